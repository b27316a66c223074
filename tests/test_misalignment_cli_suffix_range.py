"""longshort-misalignment --min-len / --max-len: the suffix-length range of Eq. 4 that misalignment_metric's
min_len / max_len set in Python (the command had no flag for it: 'unrecognized arguments: --min-len 3'). The
reference is the Python API on the same checkpoint, text and seed."""

import functools
import json

import pytest


def test_the_flags_give_the_apis_numbers(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.data import corpus
    from torchtune_longshort.data.fixed_length import fixed_length_sequences
    from torchtune_longshort.hidden_states import last_position_logits
    from torchtune_longshort.metrics import cli
    from torchtune_longshort.metrics.misalignment import misalignment_metric
    from torchtune_longshort.models.checkpoint_open import open_checkpoint
    from torchtune_longshort.models.hf_model import load_hf_checkpoint

    tok_file, data = str(sp_tokenizer_dir / "tokenizer.model"), tmp_path / "d.txt"
    data.write_text("def f(x):\n    return x + 1\n" * 200)
    out = tmp_path / "m.json"
    assert cli.main(["--checkpoint-dir", str(tiny_llama2_dir), "--tokenizer", tok_file, "--data", str(data),
                     "--length", "32", "--num-samples", "3", "--seed", "5", "--min-len", "3", "--max-len", "7",
                     "--output", str(out)]) == 0
    got = json.loads(out.read_text())

    opened = open_checkpoint(tiny_llama2_dir, names=cli.NAMES, tokenizer=tok_file, length=32)
    model = load_hf_checkpoint(opened.folder, max_seq_len=32)
    seqs = fixed_length_sequences(corpus.local_text(str(data)),
                                  lambda t: opened.tokenizer.encode(t, add_bos=True, add_eos=True), 32, 3)
    ref = misalignment_metric(functools.partial(last_position_logits, model), seqs, length=32, num_samples=3,
                              min_len=3, max_len=7, seed=5, progress=False)
    assert (got["min_len"], got["max_len"]) == (3, 7) and got["pairs"] == ref.pairs
    assert all(3 <= n <= 7 for pair in ref.pairs for n in pair)  # not Eq. 4's default [16, 32]
    assert set(got["values"]) == set(ref.values) == {"sce", "jeffreys", "js"}
    for name, values in ref.values.items():
        assert got["values"][name] == pytest.approx(values, rel=1e-6, abs=1e-9), name


@pytest.mark.parametrize("flags, said", [
    (["--min-len", "0"], "--min-len=0 is outside [1, --length=32]"),
    (["--max-len", "33"], "--max-len=33 is outside [1, --length=32]"),
    (["--min-len", "9", "--max-len", "8"], "--min-len=9 > --max-len=8: give --min-len <= --max-len"),
    (["--max-len", "15"], "--min-len 16 (its default, L/2) > --max-len=15"),
])
def test_a_range_outside_one_to_l_or_reversed_is_refused_before_the_model_loads(flags, said, tiny_llama2_dir,
                                                                                monkeypatch, capsys):
    from torchtune_longshort.metrics import cli

    monkeypatch.setattr(cli, "open_checkpoint", lambda *a, **k: pytest.fail("the checkpoint was opened"))
    with pytest.raises(SystemExit) as stop:
        cli.main(["--checkpoint-dir", str(tiny_llama2_dir), "--length", "32", *flags])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and said in err, err
