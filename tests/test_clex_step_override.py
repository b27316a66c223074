"""A CLEX override on a CLEX-trained step (split from test_checkpoint_open): the step's learned ODE is kept, a
changed learned setting is said as ``rope_scaled`` says it, and ``longshort-misalignment`` records the scaling it ran
with. References: the step's side file and its own forward, read from its folder."""

from __future__ import annotations

import json
import logging

import pytest

from torchtune_longshort.metrics.cli import main as misalignment_main

from clex_step import PLAIN, write_clex_step


@pytest.fixture(scope="module")
def clex_folder(tiny_llama2_dir, sp_tokenizer_dir, tmp_path_factory):
    return write_clex_step(tiny_llama2_dir, sp_tokenizer_dir, tmp_path_factory.mktemp("clex") / "step")


def test_a_clex_override_on_a_clex_step_keeps_its_learned_ode(clex_folder):
    """``rope=clex,rope_t_max=<t>`` on a CLEX-trained step built an untrained CLEX (the step's ODE dropped without a
    word), and ``load_hf_checkpoint(folder, rope={"method": "clex", "t_max": 2})`` was refused ("max_seq_len=256
    is too short"). Reference: the step's side file, and the model built from its own config.json."""
    import torch
    from safetensors.torch import load_file

    from torchtune_longshort.models import load_hf_checkpoint

    side = load_file(str(clex_folder / "longshort_rope" / "rope_params.safetensors"))
    tokens = torch.randint(0, 500, (1, 2 * PLAIN - 8), generator=torch.Generator().manual_seed(0))  # t = 2
    own = load_hf_checkpoint(clex_folder)
    for t_max in (2, 4):
        model = load_hf_checkpoint(clex_folder, rope={"method": "clex", "t_max": t_max})
        rope = model.layers[0].attn.pos_embeddings
        assert rope.t_max == t_max and rope.max_seq_len >= PLAIN * t_max
        for name, value in side.items():
            assert torch.equal(getattr(rope, name.split(".")[-1]).detach(), value), name
        with torch.no_grad():
            got = model(tokens)  # t = 2 <= t_max: the same ODE, the same frequencies
            assert torch.isfinite(got).all() and torch.equal(got, own(tokens))
    other = load_hf_checkpoint(clex_folder, rope={"method": "yarn", "factor": 2})
    assert not any(n.startswith("ode") for n, _ in other.layers[0].attn.pos_embeddings.named_parameters())


def test_a_clex_override_that_changes_a_learned_setting_says_so_as_rope_scaled_does(clex_folder, caplog):
    """One rule for which settings of a CLEX step a new CLEX scaling keeps (the ODE's ``learned_settings``), asked by
    the eval's override and by ``rope_scaled``: ``rope=clex,rope_act=tanh`` on a step trained under silu ran its
    ODE under tanh with no word (the override's note said the step's settings were kept), where ``rope_scaled``
    warned. Reference: the step's own forward (``load_hf_checkpoint`` without override)."""
    import torch

    from torchtune_longshort.models import load_hf_checkpoint, rope_scaled
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
    from torchtune_longshort.models.rope_override import replacement_note

    folder = CheckpointFolder.open(clex_folder)
    assert folder.rope_spec["act"] == "silu"
    tokens = torch.randint(0, 500, (1, 2 * PLAIN - 8), generator=torch.Generator().manual_seed(0))  # t = 2
    own = load_hf_checkpoint(clex_folder)
    with torch.no_grad():
        reference = own(tokens)
        kept = load_hf_checkpoint(clex_folder, rope={"method": "clex", "t_max": 2, "act": "silu"})(tokens)
        changed = load_hf_checkpoint(clex_folder, rope={"method": "clex", "t_max": 2, "act": "tanh"})
        assert torch.equal(kept, reference) and not torch.allclose(changed(tokens), reference)
    assert changed.layers[0].attn.pos_embeddings.act_name == "tanh"
    assert "act='silu' replaces" not in replacement_note(folder, {"method": "clex", "t_max": 2, "act": "silu"})
    note = replacement_note(folder, {"method": "clex", "t_max": 2, "act": "tanh"}, "--rope ")
    assert note.endswith("are kept: the override keeps the settings its learned clex parameters were trained with: "
                         "param_factor=1, time_dt=0.01, log_scale=False; rope_act='tanh' replaces 'silu' (the learned "
                         "parameters run under the new value)"), note
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        rope_scaled(own, "clex", 2 * PLAIN, act="tanh")
    (said,) = [r.getMessage() for r in caplog.records]
    assert said == ("rope_scaled: clex over the model's own clex keeps the settings its learned clex parameters were "
                    "trained with: param_factor=1, time_dt=0.01, log_scale=False; act='tanh' replaces 'silu' (the "
                    "learned parameters train on under the new value)"), said
    # a resumed run loads its step's learned parameters, not the start's: a step trained under tanh continued with
    # act: tanh replaces nothing (the line said "act='tanh' replaces 'silu'" on every resume); another act still warns
    from torchtune_longshort.models.rope_scaling import learned_parameters_from

    step_spec = {**folder.rope_spec, "act": "tanh"}
    caplog.clear()
    with caplog.at_level(logging.INFO), learned_parameters_from(step_spec):
        assert rope_scaled(load_hf_checkpoint(clex_folder), "clex", 2 * PLAIN, act="tanh").rope_scaling["act"] == "tanh"
        assert not caplog.records, caplog.text
        rope_scaled(load_hf_checkpoint(clex_folder), "clex", 2 * PLAIN, act="silu")
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.endswith("act='silu' replaces 'tanh' (the learned parameters train on under the new value)"), said


def test_misalignment_records_the_scaling_a_clex_override_ran_with(clex_folder, sp_tokenizer_dir, tmp_path):
    """``--rope clex,rope_t_max=4`` on a CLEX step runs the step's learned ODE with the step's CLEX settings (act,
    param_factor, time_dt, its pre-trained length); the JSON's ``rope_scaling`` recorded ``{method, t_max}`` only,
    which rebuilt elsewhere is CLEX with the defaults (a step trained with act tanh: another module). Reference: the
    step's own scaling, read from its folder."""
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder

    own = CheckpointFolder.open(clex_folder).rope_spec
    out = tmp_path / "m.json"
    assert misalignment_main(["--checkpoint-dir", str(clex_folder), "--tokenizer", str(sp_tokenizer_dir), "--length",
                              "64", "--num-samples", "1", "--divergences", "sce", "--rope", "clex,rope_t_max=4",
                              "--output", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["rope_override"] == "clex,rope_t_max=4" and res["rope_scaling"]["t_max"] == 4
    for key in ("act", "param_factor", "time_dt", "log_scale", "original_max_seq_len"):
        assert res["rope_scaling"].get(key) == own[key], (key, res["rope_scaling"])
    assert res["usable_length"] == 4 * own["original_max_seq_len"]
