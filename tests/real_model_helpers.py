"""Shared by the real-model test files (``test_real_model_*.py``): lm-eval on a SmolLM2 folder through either model,
with one task index per tokenizer, and the overrides that shrink a SmolLM2 config to a CPU smoke run."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

from torchtune_longshort.eval.tasks import tasks_path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TUNE = str(Path(sys.executable).with_name("tune"))
RECIPE = "torchtune_longshort/recipes/longshort_finetune.py"
# two lengths: each metric is checked under its own length's key; SmolLM2's 8192 positions hold both, so a longer
# one would test nothing more (1024 and 512 cost the file ~25 s more on 2 CPU cores; at 256 and 512 the passkey is
# found and the ppl is 36 and 21 in both models)
LENGTHS = [256, 512]
# seq_len 128: the LoRA run's checks (logged rows, PEFT against the merged weights, the same ppl in both models at
# the eval's own 256) mean the same at half the training tokens of 256
SMOKE = ["device=cpu", "dtype=fp32", "seq_len=128", "batch_size=1", "gradient_accumulation_steps=1", "max_steps=2",
         "save_every_n_steps=2", "validation=null", "loss.alpha=0.1", "lr_scheduler.num_warmup_steps=0",
         "dataset.limit=40"]


@functools.lru_cache(maxsize=None)
def _task_manager(tokenizer: str, meta_json: str):
    """One lm-eval task index per tokenizer and metadata (building one takes seconds; every SmolLM2 checkpoint
    carries the same tokenizer, so the fine-tuned ones share the base model's)."""
    from lm_eval.tasks import TaskManager

    import torchtune_longshort.eval.model.adapter  # noqa: F401  (registers ``longshort``)

    return TaskManager(include_path=str(tasks_path()), include_defaults=False,
                       metadata={"tokenizer": tokenizer, **json.loads(meta_json)})


def evaluate(model: str, pretrained: Path, tasks, meta, tokenizer: Path) -> dict:
    from lm_eval import simple_evaluate

    tm = _task_manager(str(tokenizer), json.dumps(meta, sort_keys=True))
    res = simple_evaluate(model=model, model_args=f"pretrained={pretrained},dtype=float32", tasks=tasks,
                          batch_size=1, device="cpu", task_manager=tm, log_samples=False, bootstrap_iters=0)
    return res["results"]




def loads_in_transformers(step: Path, source: Path):
    """``step`` as a user takes it: the source's ``tokenizer.json`` unchanged, and the folder loads in transformers
    (``AutoTokenizer`` / ``AutoModelForCausalLM``, the independent reader) with finite logits; returns the probe
    text's ids and those float32 logits (a caller comparing against them needs no second load of the folder)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert (step / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()
    tok = AutoTokenizer.from_pretrained(str(step))
    hf = AutoModelForCausalLM.from_pretrained(str(step), dtype=torch.float32).eval()
    ids = tok("def main():\n    return 0\n", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = hf(ids).logits
    assert torch.isfinite(logits).all()
    return ids, logits
