"""Run lm-eval's CLI in this process (the ``longshort`` model registered) and read back its results JSON.

Same code path as ``python -m torchtune_longshort.eval``; useful from scripts, notebooks and tests that want the
CLI's behaviour without paying the interpreter start-up and imports again.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

_CHECKPOINT_DIR = re.compile(r"(^|,)checkpoint_dir=")


_SUBCOMMANDS = ("run", "ls", "validate")


def lm_eval_argv(args: Sequence[str]) -> List[str]:
    """``args`` as lm-eval's CLI gets them from this wrapper:

    - an evaluation (``run``, or the legacy form without a subcommand) gets ``--metadata`` key ``lm_eval_model``
      naming the ``--model`` (lm-eval's default ``hf`` when none is given), so that a task that needs the
      ``longshort`` model (``misalignment_<L>``) refuses any other before a request runs, and tasks can refuse
      lengths a plain model would cut (``torchtune_longshort.eval.unavailable``);
    - ``checkpoint_dir=`` in the ``longshort`` model's ``--model_args`` is given as ``pretrained=``: lm-eval 0.4.13
      names the results folder (``<output_path>/<name>/results_*.json``) after ``pretrained`` in model_args, and
      gives any other model a random name; ``checkpoint_dir`` is ``pretrained``'s older name here, so the folder
      is named after the checkpoint whichever of the two a user types, exactly as for ``hf``.
    """
    from torchtune_longshort.eval.unavailable import MODEL_KEY

    out = [str(a) for a in args]
    model = next((out[i + 1] for i, a in enumerate(out[:-1]) if a == "--model"), None)
    model = model or next((a.split("=", 1)[1] for a in out if a.startswith("--model=")), None)
    evaluating = bool(out) and (out[0] == "run" or (out[0] not in _SUBCOMMANDS and out[0] not in ("-h", "--help")))
    if evaluating:
        out += ["--metadata", json.dumps({MODEL_KEY: model or "hf"})]
    if model != "longshort":
        return out
    spans, i = [], 0  # indices of the model_args tokens
    while i < len(out):
        if out[i].startswith("--model_args="):
            spans.append(i)
        elif out[i] in ("--model_args", "-a"):
            j = i + 1
            while j < len(out) and not out[j].startswith("-"):
                spans.append(j)
                j += 1
            i = j
            continue
        i += 1
    if any(re.search(r"(^|,|=)pretrained=", out[k]) for k in spans):
        return out
    for k in spans:
        head, sep, value = out[k].partition("--model_args=") if out[k].startswith("--model_args=") else ("", "", out[k])
        if _CHECKPOINT_DIR.search(value):
            out[k] = head + sep + _CHECKPOINT_DIR.sub(r"\1pretrained=", value, count=1)
            break
    return out


def run_cli(args: Sequence[str]) -> Dict[str, Any]:
    """Run ``lm-eval <args>`` in-process; when ``--output_path`` is given, return its newest ``results_*.json``
    parsed (else ``{}``)."""
    from torchtune_longshort._quiet import quiet_upstream

    quiet_upstream()
    import torchtune_longshort.eval.lm_eval_model  # noqa: F401  (registers ``longshort``)
    from lm_eval.__main__ import cli_evaluate

    argv: List[str] = ["lm-eval", *lm_eval_argv(args)]
    saved = sys.argv
    sys.argv = argv
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    if "--output_path" not in argv:
        return {}
    out = Path(argv[argv.index("--output_path") + 1])
    files = sorted(out.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"lm-eval wrote no results_*.json under {out}")
    return json.loads(files[-1].read_text())


def samples_of(output_path: Path, task: str) -> List[Dict[str, Any]]:
    """Rows of the newest ``samples_<task>_*.jsonl`` lm-eval wrote under ``output_path`` (``--log_samples``)."""
    files = sorted(Path(output_path).rglob(f"samples_{task}_*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no samples_{task}_*.jsonl under {output_path}")
    return [json.loads(x) for x in files[-1].read_text().splitlines() if x.strip()]
