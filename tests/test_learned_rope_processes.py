"""A learned RoPE (CLEX: one ODE module every layer shares, solved once per forward in a decoder hook) trained by
several processes: FSDP2 leaves its weights out of the sharding, replicated on every rank, and the recipe averages
their gradients. Reference: the one-process run on the same global batch. Before, the config check refused CLEX
under torchrun (the second layer's ``fully_shard`` found the shared parameters already sharded by the first)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_recipe import RECIPE, TUNE, run_tune

from torchtune_longshort.training.recipe_config import load_recipe_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CONFIG = "configs/llama2_7b/clex_4k_redpajama_book.yaml"


def _rows(out: Path, key: str) -> list:
    return [r[key] for r in (json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()) if key in r]


@pytest.mark.parametrize("name", ["llama2_7b/clex_4k_pg19.yaml", "llama2_7b/clex_4k_redpajama_book.yaml"])
def test_clex_across_processes_needs_fsdp2_ignored_params(name, monkeypatch):
    """Accepted across processes where torch's ``fully_shard`` takes ``ignored_params`` (torch >= 2.7, this one);
    with an older torch (simulated) refused before anything is written, naming the field and both ways out; one
    process needs nothing of FSDP2."""
    from omegaconf import OmegaConf

    from torchtune_longshort.training.recipe_config import rules

    assert rules.fsdp_ignores_params()
    load_recipe_config(OmegaConf.load(CONFIGS / name), world_size=8, local=False)
    monkeypatch.setattr(rules, "fsdp_ignores_params", lambda: False)
    with pytest.raises(ValueError, match=r"^model\.method gives RoPE method 'clex'.*across 8 processes.*"
                                         r"torch >= 2\.7.*upgrade torch, or train in one process"):
        load_recipe_config(OmegaConf.load(CONFIGS / name), world_size=8, local=False)
    load_recipe_config(OmegaConf.load(CONFIGS / name), world_size=1, local=False)
    load_recipe_config(OmegaConf.load(CONFIGS / "llama2_7b/eabf_8k_redpajama_book.yaml"), world_size=8, local=False)


@pytest.mark.slow
def test_two_process_clex_matches_one_process(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """CLEX (t_max 4, so steps draw t > 1 and the ODE trains), with activation checkpointing (each layer's recompute
    reads the forward's ODE solution) and alpha 0.1, 1 process against 2 over 4 steps: the losses, the gradient
    norms and the ODE's own gradient norm agree, and so do the saved weights and the ODE's side file (every rank draws
    the same t and positions from the one generator, a new run starts from the same ODE, and the ranks' ODE gradients
    are averaged). A 2-process resume from step 2 gives the same losses (the generator's state is saved)."""
    import torch
    from safetensors.torch import load_file

    from torchtune_longshort.models.hf_checkpoint import ROPE_SIDE_FILE

    overrides = [
        f"checkpoint_dir={tiny_llama2_dir}", f"tokenizer.path={sp_tokenizer_dir / 'tokenizer.model'}",
        "checkpointer.checkpoint_files=null", "model.max_seq_len=1024", "seq_len=64", "batch_size=4",
        "gradient_accumulation_steps=1", "max_steps=4", "loss.alpha=0.1", "loss.num_chunks=2", "optimizer.lr=1e-3",
        "optimizer.fused=False", "lr_scheduler.num_warmup_steps=0", "validation=null", "device=cpu", "dtype=fp32",
        "compile=False", "enable_activation_checkpointing=True", "dataset._component_=torchtune_longshort.data."
        "corpus.stdlib", "dataset.include_tests=False", "dataset.limit=20", "save_every_n_steps=2",
        "keep_recipe_states=2",
    ]
    outs = []
    for nproc in (1, 2):
        out = tmp_path / f"nproc{nproc}"
        dist = ["--nproc_per_node", "2"] if nproc > 1 else []
        run_tune([TUNE, "run", *dist, RECIPE, "--config", CONFIG, f"output_dir={out}", *overrides], tmp_path,
                 timeout=400)
        outs.append(out)
    one, two = outs
    assert max(_rows(one, "rope_grad_norm")) > 0  # the ODE trained: some step drew t > 1
    # the ODE gradient sums d loss / d angle x position over every position: fp32 reorderings move it more
    for key, rel in (("loss", 1e-5), ("grad_norm", 1e-4), ("rope_grad_norm", 1e-3)):
        a, b = _rows(one, key), _rows(two, key)
        assert len(a) == len(b) == 4 and all(abs(x - y) <= rel * abs(x) + 1e-9 for x, y in zip(a, b)), (key, a, b)
    for name in ("model-00001-of-00001.safetensors", ROPE_SIDE_FILE):
        wa, wb = (load_file(str(out / "step_4" / name)) for out in (one, two))
        assert wa.keys() == wb.keys()
        for k in wa:
            torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-5)
    reference = _rows(two, "loss")
    shutil.rmtree(two / "step_4")
    (two / "recipe_state" / "step_4.pt").unlink()
    run_tune([TUNE, "run", "--nproc_per_node", "2", RECIPE, "--config", CONFIG, f"output_dir={two}", *overrides,
              "resume=True"], tmp_path, timeout=400)
    assert _rows(two, "loss") == reference


def test_a_folder_whose_own_scaling_is_clex_is_found(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """A CLEX checkpoint fine-tuned further: the config check finds its learned RoPE in the folder's config.json
    (the field named is the folder), which the study's check, reading no folder, does not."""
    from torchtune_longshort.config.fields import build_section
    from torchtune_longshort.models import load_hf_checkpoint, read_hf_config, rope_scaled, write_hf_checkpoint
    from torchtune_longshort.training.recipe_config.components import ModelConfig

    base = load_hf_checkpoint(tiny_llama2_dir)
    model = rope_scaled(base, "clex", 4 * base.max_seq_len)
    folder = write_hf_checkpoint(tmp_path / "clex_ckpt", model.state_dict(), read_hf_config(tiny_llama2_dir),
                                 rope_spec=model.rope_scaling, tokenizer=sp_tokenizer_dir)
    node = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": str(folder)}
    section = build_section(ModelConfig, node, "model")
    assert section.learned_rope(local=True) == ("model.checkpoint_dir", "clex")
    assert section.learned_rope(local=False) is None
    plain = build_section(ModelConfig, dict(node, checkpoint_dir=str(tiny_llama2_dir)), "model")
    assert plain.learned_rope(local=True) is None


def test_a_new_run_from_a_clex_checkpoint_starts_from_its_learned_ode(tmp_path, tiny_llama2_dir, sp_tokenizer_dir,
                                                                      caplog):
    """A CLEX checkpoint fine-tuned further (a new run, not a resume) under a ``rope_scaled`` CLEX node that gives
    no ``act``: its learned ODE is where the new run starts, as evaluation loads it, with the settings it was trained
    with (``act: tanh``, CLEX's release). Before: the side file was read on resume only, and a new run drew CLEX's
    initial ODE (ode_down_proj zeros), silently throwing the learned one away; then the ODE was loaded into the
    node's default ``act: silu`` without a word. A node that changes a setting says so, and a node of another method
    says the learned ODE is not used."""
    import torch
    from recipe_config import make_cfg

    from torchtune_longshort.models import load_hf_checkpoint, read_hf_config, rope_scaled, write_hf_checkpoint
    from torchtune_longshort.models.hf_checkpoint import load_rope_parameters
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.training.learned_rope import learned_rope_modules

    base = load_hf_checkpoint(tiny_llama2_dir)
    model = rope_scaled(base, "clex", 4 * base.max_seq_len, act="tanh")
    with torch.no_grad():  # a learned ODE: not CLEX's initial one
        for m in learned_rope_modules(model):
            for p in m.parameters(recurse=False):
                p.copy_(torch.randn_like(p))
    folder = write_hf_checkpoint(tmp_path / "clex_ckpt", model.state_dict(), read_hf_config(tiny_llama2_dir),
                                 rope_spec=model.rope_scaling, tokenizer=sp_tokenizer_dir)
    saved = load_rope_parameters(folder)
    assert saved and all(v.abs().sum() > 0 for v in saved.values())
    inner = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": str(folder)}
    node = {"_component_": "torchtune_longshort.models.rope_scaled", "method": "clex", "t_max": 4,
            "max_seq_len": 4 * base.max_seq_len, "model": inner}
    cfg = make_cfg(folder, sp_tokenizer_dir, tmp_path / "out", model=node, max_steps=1, batch_size=2,
                   **{"dataset.limit": 10})
    recipe = LongShortFinetuneRecipe(cfg)
    try:
        recipe.setup()
        (m,) = learned_rope_modules(recipe._model)
        assert (m.act_name, recipe._model.rope_scaling["act"]) == ("tanh", "tanh")
        got = {k: v.detach().float() for k, v in m.named_parameters(recurse=False)}
        assert set(got) == set(saved)
        for k in saved:
            torch.testing.assert_close(got[k], saved[k].float(), rtol=0, atol=0)
    finally:
        recipe.release_output_dir()
    with caplog.at_level("WARNING"):
        assert rope_scaled(inner, "clex", 4 * base.max_seq_len, act="silu").rope_scaling["act"] == "silu"
    assert "act='silu' replaces 'tanh' (the learned parameters train on under the new value)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        rope_scaled(inner, "yarn", 4 * base.max_seq_len)
    assert "its learned ode_down_proj, ode_up_proj (a checkpoint's longshort_rope/rope_params.safetensors) are not " \
           "used (method 'clex' loads them)" in caplog.text


def test_a_clex_run_resumes_with_the_settings_its_ode_was_trained_with(tmp_path, tiny_llama2_dir, sp_tokenizer_dir,
                                                                        monkeypatch):
    """A run of a rope_scaled CLEX node without ``act`` over a CLEX step trained with ``act: tanh``, saved before
    rope_scaled kept the step's settings (its ODE trained under the node's default, silu), resumed under the start
    step's tanh: the silu-trained ODE went on under another activation without a word (the run's config, compared
    on resume, had not changed). The resumed step's own settings (its config.json's longshort_rope) are kept."""
    from recipe_config import make_cfg

    from torchtune_longshort.models import load_hf_checkpoint, read_hf_config, rope_scaled, write_hf_checkpoint
    from torchtune_longshort.models import rope_scaling
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.training.learned_rope import learned_rope_modules

    base = load_hf_checkpoint(tiny_llama2_dir)
    model = rope_scaled(base, "clex", 4 * base.max_seq_len, act="tanh")
    folder = write_hf_checkpoint(tmp_path / "clex_ckpt", model.state_dict(), read_hf_config(tiny_llama2_dir),
                                 rope_spec=model.rope_scaling, tokenizer=sp_tokenizer_dir)
    node = {"_component_": "torchtune_longshort.models.rope_scaled", "method": "clex", "t_max": 4,
            "max_seq_len": 4 * base.max_seq_len,
            "model": {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": str(folder)}}
    out = tmp_path / "out"
    with monkeypatch.context() as m:  # rope_scaled as it was: the node's defaults
        m.setattr(rope_scaling, "kept_learned_settings", lambda *a, **k: {})
        first = LongShortFinetuneRecipe(make_cfg(folder, sp_tokenizer_dir, out, model=node, max_steps=1,
                                                 batch_size=2, **{"dataset.limit": 10}))
        first.setup()
        first.train()
        first.cleanup()
    assert read_hf_config(out / "step_1")["longshort_rope"]["act"] == "silu"
    resumed = LongShortFinetuneRecipe(make_cfg(folder, sp_tokenizer_dir, out, model=node, max_steps=2, batch_size=2,
                                               resume=True, **{"dataset.limit": 10}))
    try:
        resumed.setup()
        (rope,) = learned_rope_modules(resumed._model)
        assert (rope.act_name, resumed.rope_spec["act"]) == ("silu", "silu")
    finally:
        resumed.release_output_dir()
