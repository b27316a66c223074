"""The CE-only controls' rule at its boundaries, as the README states it ("within `L0` at most 1.02x the base's ppl,
beyond it below the base"), and the claims' long lengths ("every length >= L"): hand mutants (mutants36) '< RECOVERY',
'ratio <= 1.0' and 'n > cfg.L' passed test_study_claims.py's planted studies, whose ratios and lengths sit off them."""

from types import SimpleNamespace

from torchtune_longshort.study.comparisons import control_learned, long_lengths

L0 = 8192


def test_within_l0_a_ratio_of_exactly_1_02_recovers_the_base():
    assert control_learned(1.02, L0, L0) == "recovers the base"  # "at most 1.02x"
    assert control_learned(1.0201, L0, L0).startswith("does NOT recover")


def test_beyond_l0_a_ratio_of_exactly_1_does_not_beat_the_base():
    assert control_learned(1.0, L0 + 1, L0) == "does NOT beat the base"  # "below the base"
    assert control_learned(0.999, L0 + 1, L0) == "beats the base"


def test_the_long_lengths_start_at_l_itself():
    cfg = SimpleNamespace(L=16384, eval=SimpleNamespace(ppl_lengths=[8192, 16383, 16384, 32768]))
    assert long_lengths(cfg) == [16384, 32768]
