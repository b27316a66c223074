"""``tune run`` of the recipe with LoRA and QLoRA on the tiny checkpoint: PEFT adapters written and resumed from
exactly, a QLoRA loss that goes down and resumes exactly, two processes matching one (LoRA and QLoRA; with dropout,
resumed exactly), QLoRA shapes FSDP cannot shard refused before loading. Split from test_recipe.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_recipe import REPO, _env, _metric, losses, run_tune, tune_cmd


def _first_and_last(out: Path):
    ce = [r["ce"] for r in (json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()) if "ce" in r]
    return sum(ce[:3]) / 3, sum(ce[-5:]) / 5


@pytest.mark.slow
def test_lora_writes_peft_adapters_and_resumes_exactly_from_them(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """LoRA (with LongQLoRA's trained embeddings and norms): the loss goes down; every step folder holds the merged
    weights and a PEFT adapter/; the newest two recipe states (keep_recipe_states=2) sit in recipe_state/. A resume
    reads its adapters back from the step's adapter/ and reproduces the uninterrupted losses exactly; with the
    adapter file gone it is refused in one line naming the folder."""
    out, base = tmp_path / "out", tmp_path / "base"
    shutil.copytree(tiny_llama2_dir, base)  # its weights are swapped below
    cmd = tune_cmd("configs/tiny/lora_from_checkpoint.yaml", base, sp_tokenizer_dir, out,
                   "keep_recipe_states=2")
    run_tune(cmd, tmp_path)
    first, last = _first_and_last(out)
    assert last < first - 0.3, (first, last)
    reference = losses(out)
    for step in (4, 28, 30):
        assert {p.name for p in (out / f"step_{step}" / "adapter").iterdir()} == {
            "adapter_model.safetensors", "adapter_config.json", "longshort_adapter.json"}
        d = out / f"step_{step}"
        assert (d / "config.json").is_file() and not (d / "recipe_state.pt").exists()
    assert sorted(p.name for p in (out / "recipe_state").iterdir()) == ["step_28.pt", "step_30.pt"]
    assert not (out / ".staging").exists()

    shutil.rmtree(out / "step_30")
    (out / "recipe_state" / "step_30.pt").unlink()
    adapter = out / "step_28" / "adapter" / "adapter_model.safetensors"
    adapter.rename(tmp_path / "aside.safetensors")
    p = subprocess.run(cmd + ["resume=True"], cwd=REPO, env=_env(tmp_path), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stderr.strip().splitlines()[-1].startswith(
        f"longshort_finetune: error: LoRA adapter folder '{out / 'step_28' / 'adapter'}' lacks "
        "adapter_model.safetensors")
    (tmp_path / "aside.safetensors").rename(adapter)
    # another base of the same shapes copied over the start folder: the adapters trained on without a word
    from safetensors.torch import load_file, save_file

    weights = next(base.glob("*.safetensors"))
    original = weights.read_bytes()
    tensors = load_file(weights)
    tensors = {k: v + 0.01 if i == 0 else v for i, (k, v) in enumerate(sorted(tensors.items()))}
    save_file(tensors, weights, metadata={"format": "pt"})
    p = subprocess.run(cmd + ["resume=True"], cwd=REPO, env=_env(tmp_path), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].startswith(
        f"longshort_finetune: error: resume=True: the start checkpoint '{base}' (checkpointer.checkpoint_dir) is not "
        "the one step 28's adapters were trained on"), p.stderr[-3000:]
    weights.write_bytes(original)
    run_tune(cmd + ["resume=True"], tmp_path)
    assert losses(out) == reference


@pytest.mark.slow
def test_qlora_loss_goes_down_and_resumes_exactly(tmp_path, sp_tokenizer_dir):
    """QLoRA (NF4 base, LongQLoRA's trained embeddings and norms): the loss goes down, and the run resumed from its
    step 12 (its later steps removed, as test_lora_writes_peft_adapters_... does) gives the uninterrupted run's 24
    losses, bit for bit (the NF4 weights are rebuilt from the base checkpoint; the adapters, embeddings, norms and
    optimizer state come from the recipe state). One 24-step run and a 12-step resume, not a second run stopped at
    step 12 beside them: its 12 steps repeated the first run's."""
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    ckpt = write_random_llama2_checkpoint(
        tmp_path / "ckpt128", vocab_size=512, embed_dim=128, num_layers=2, num_heads=4, num_kv_heads=4,
        intermediate_dim=384, max_seq_len=256, seed=0,
    )
    out = tmp_path / "out"
    cmd = tune_cmd("configs/tiny/qlora_from_checkpoint.yaml", ckpt, sp_tokenizer_dir, out, "max_steps=24",
                   "save_every_n_steps=12", "keep_recipe_states=2")
    run_tune(cmd, tmp_path)
    first, last = _first_and_last(out)
    assert last < first - 0.3, (first, last)
    reference = losses(out)
    assert [s for s, _ in reference] == list(range(1, 25))
    shutil.rmtree(out / "step_24")
    (out / "recipe_state" / "step_24.pt").unlink()
    run_tune(cmd + ["resume=True"], tmp_path)
    assert losses(out) == reference


def _ppl_pair(step: Path, tmp: Path):
    """longshort_ppl at 128 tokens of a checkpoint with our model and with lm-eval's hf model (the independent
    reader)."""
    from torchtune_longshort.eval.cli_run import run_cli

    meta = '{"ppl_source": "stdlib", "ppl_num_samples": 2, "max_seq_lengths": [128]}'
    out = []
    for model, args in (("longshort", f"checkpoint_dir={step}"), ("hf", f"pretrained={step},dtype=float32")):
        res = run_cli(["run", "--model", model, "--model_args", args, "--device", "cpu", "--batch_size", "2",
                       "--tasks", "longshort_ppl",
                       "--metadata", meta, "--output_path", str(tmp / model)])
        out.append(res["results"]["longshort_ppl"]["ppl_128,none"])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lora", "qlora"])
def test_two_process_lora_and_qlora_match_one_process(kind, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """LongQLoRA's setup (LoRA / NF4 QLoRA on several processes, FSDP2 over gloo): the losses and gradient norms
    equal the single-process run's on the same global batch, and the 2-process checkpoint evaluates in both
    models. The 2-process run says ``seed: null``: both ranks train with the one seed rank 0 drew (torchtune's
    broadcast), which the run prints once and records, and the 1-process run given that integer is the reference
    (a rank with a seed of its own would start from other adapters and draw other shifts)."""
    from omegaconf import OmegaConf

    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    overrides = ["max_steps=2", "save_every_n_steps=2", "batch_size=4", "validation=null"]
    ckpt = tiny_llama2_dir
    if kind == "qlora":  # the smallest NF4 shapes that shard over 2 ranks: numel % (16384 * 2) == 0
        dims = dict(vocab_size=512, embed_dim=256, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_dim=768)
        ckpt = write_random_llama2_checkpoint(tmp_path / "ckpt256", max_seq_len=256, seed=0, **dims)
    cfg = f"configs/tiny/{kind}_from_checkpoint.yaml"
    one, two = tmp_path / "one", tmp_path / "two"
    p = run_tune(tune_cmd(cfg, ckpt, sp_tokenizer_dir, two, *overrides, "seed=null", nproc=2), tmp_path, timeout=400)
    seed = OmegaConf.load(two / "torchtune_config.yaml").seed
    assert isinstance(seed, int) and json.loads((two / "metrics.jsonl").read_text().splitlines()[0])["seed"] == seed
    assert (p.stdout + p.stderr).count(f"seed: null drew seed={seed} (give seed={seed} ") == 1
    run_tune(tune_cmd(cfg, ckpt, sp_tokenizer_dir, one, *overrides, f"seed={seed}"), tmp_path)
    # both start from the same adapters (initial_adapters: not each rank's own random shard of A), so both steps'
    # losses and gradient norms agree, not only step 1's loss (B = 0 there, whatever A)
    for key, rel in (("loss", 1e-5), ("grad_norm", 1e-4)):
        a, b = _metric(one, key), _metric(two, key)
        assert len(a) == len(b) == 2 and all(abs(x - y) <= rel * abs(x) for x, y in zip(a, b)), (key, a, b)
    ours, theirs = _ppl_pair(two / "step_2", tmp_path / "eval")
    assert ours == pytest.approx(theirs, rel=1e-4)


def test_a_two_process_lora_run_with_dropout_resumes_exactly(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """LoRA dropout draws from each rank's own stream: the recipe state held rank 0's alone and put it back on every
    rank, so a 2-process run with lora_dropout > 0 (LongQLoRA's 0.05) resumed off its uninterrupted losses (step 4:
    6.641616 vs 6.641622). Now each rank's is saved and put back."""
    import torch

    cfg = "configs/tiny/lora_from_checkpoint.yaml"
    out = tmp_path / "two"
    overrides = ["max_steps=4", "save_every_n_steps=2", "keep_recipe_states=2", "batch_size=4", "validation=null",
                 "model.lora_dropout=0.3"]
    run_tune(tune_cmd(cfg, tiny_llama2_dir, sp_tokenizer_dir, out, *overrides, nproc=2), tmp_path, timeout=400)
    reference = losses(out)
    state = torch.load(out / "recipe_state" / "step_2.pt", weights_only=False)
    assert len(state["rank_rngs"]) == 2 and not torch.equal(state["rank_rngs"][0]["torch_rng"],
                                                            state["rank_rngs"][1]["torch_rng"])
    shutil.rmtree(out / "step_4")
    (out / "recipe_state" / "step_4.pt").unlink()
    run_tune(tune_cmd(cfg, tiny_llama2_dir, sp_tokenizer_dir, out, *overrides, "resume=True", nproc=2), tmp_path,
             timeout=400)
    assert [s for s, _ in reference] == [1, 2, 3, 4] and losses(out) == reference


@pytest.mark.slow
def test_unshardable_qlora_shapes_are_refused_before_loading(tmp_path, sp_tokenizer_dir, monkeypatch):
    # In the recipe's config check, as each of tune run --nproc_per_node 2's workers (WORLD_SIZE=2) runs it; that a
    # worker's refusal reaches the user in one line is test_recipe_refusal_torchrun's (this test ran the two workers)
    from omegaconf import OmegaConf

    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    ckpt = write_random_llama2_checkpoint(tmp_path / "ckpt128", vocab_size=512, embed_dim=128, num_layers=2,
                                          num_heads=4, num_kv_heads=4, intermediate_dim=384, max_seq_len=256, seed=0)
    cfg = OmegaConf.load(REPO / "configs/tiny/qlora_from_checkpoint.yaml")
    cfg.checkpoint_dir, cfg.output_dir = str(ckpt), str(tmp_path / "out")
    cfg.tokenizer.path, cfg.batch_size = str(sp_tokenizer_dir / "tokenizer.model"), 4

    def said(err):
        # refused by the family table's check before the build (torchtune's builder quantizes while it builds)
        assert "quantize_base=True (QLoRA)" in err and "16384 x 2 processes = 32768" in err, err
        # the way on that fits: one process (its example was the very checkpoint it refused)
        assert "run it on 1 process (--nproc_per_node 1)" in err and "hidden_size 128" not in err, err

    for name, value in (("WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as err:
        LongShortFinetuneRecipe(cfg)
    said(str(err.value))
    assert not (tmp_path / "out").exists()
