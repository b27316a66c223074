"""The toolkit on a real pretrained model, training: the shipped SmolLM2 LoRA config fine-tunes the real
SmolLM2-135M-Instruct (the ``real_model_dir`` fixture) through ``tune run`` as a user runs it; the checkpoint loads in
transformers (``AutoModelForCausalLM`` / ``AutoTokenizer``, the independent reader), its PEFT adapter gives the merged
model's logits, and it scores the same perplexity in ``longshort`` and lm-eval's ``hf``. The full fine-tune of the
same family (``smollm2_135m/yarn_16k_stdlib.yaml``, the GPU study's recipe config) is trained and checked the same way
by the GPU study's quick run (tests/test_study_quick.py), which replaced its case here.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from warm_start import with_warm_start
from real_model_helpers import RECIPE, REPO, SMOKE, TUNE, evaluate, loads_in_transformers

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.slow


def _train(config: str, out: Path, ckpt: Path) -> Path:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env["PYTHONPATH"] = with_warm_start()  # the installed package (PYTHONPATH: only tests/warm's start-up hook)
    cmd = [TUNE, "run", RECIPE, "--config", str(REPO / "configs" / config), f"checkpoint_dir={ckpt}",
           f"output_dir={out}", *SMOKE]
    p = subprocess.run(cmd, cwd=out.parent, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    return out / "step_2"


def test_shipped_lora_config_trains_smollm2_and_its_checkpoint_loads_everywhere(real_model_dir, tmp_path):
    """LoRA, alpha 0.1, L 128, 2 steps; ``step_2`` loads in transformers (model and tokenizer: the source's
    tokenizer, unchanged), and scores the same ppl in ``longshort`` and ``hf``."""
    config = "smollm2_135m/lora_yarn_16k_stdlib.yaml"
    step = _train(config, tmp_path / "run", real_model_dir)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if '"ce"' in x]
    assert len(rows) == 2 and all(math.isfinite(r["loss"]) and r["misalignment"] > 0 for r in rows)
    ids, merged = loads_in_transformers(step, real_model_dir)
    _peft_gives_the_merged_logits(real_model_dir, step, ids, merged)
    meta = {"ppl_source": "stdlib_tests", "ppl_num_samples": 1, "max_seq_lengths": [256]}
    ours = evaluate("longshort", step, ["longshort_ppl"], meta, real_model_dir)["longshort_ppl"]["ppl_256,none"]
    theirs = evaluate("hf", step, ["longshort_ppl"], meta, real_model_dir)["longshort_ppl"]["ppl_256,none"]
    assert math.isfinite(ours) and ours == pytest.approx(theirs, rel=1e-4)




def _peft_gives_the_merged_logits(base_dir: Path, step: Path, ids, merged) -> None:
    """``peft.PeftModel.from_pretrained(base, step/adapter)`` on the real SmolLM2 gives the merged checkpoint's
    logits (``merged``: ``step`` as transformers loaded it in float32 in ``loads_in_transformers``): the base is the
    start folder as the run read it (float32, the smoke run's dtype) under the step's config.json (its YaRN
    scaling), both evaluated in float32 by transformers."""
    import torch
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(str(base_dir), config=AutoConfig.from_pretrained(str(step)),
                                                    dtype=torch.float32).eval()
        plain = base(ids).logits
        via_peft = PeftModel.from_pretrained(base, str(step / "adapter")).eval()(ids).logits
    scale = merged.abs().max()
    rel = ((via_peft - merged).abs().max() / scale).item()
    print(f"PEFT vs merged, real SmolLM2 LoRA step_2: max |dlogits| / max |logits| = {rel:.2e} "
          f"(base alone: {((plain - merged).abs().max() / scale).item():.2e})")
    assert rel < 1e-4
    assert ((plain - merged).abs().max() / scale).item() > 10 * rel  # the adapter is not empty
