"""Shared by the study test files (``test_study.py``, ``test_study_report.py``): a study on the shipped CPU config
with a fake executor that plays the recipe and lm-eval (writes step_<k> folders, metrics.jsonl and a results_*.json
with values made from alpha, seed and length), so those files need no training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from torchtune_longshort.output_guard import write_names
from torchtune_longshort.training.checkpointing import MANIFEST
from torchtune_longshort.training.output_aside import MARKER
from torchtune_longshort.study import Study, load_study_config

ROOT = Path(__file__).resolve().parents[1]
CPU_SMALL = ROOT / "configs/study/cpu_small.yaml"


def _write_cfg(tmp_path, **changes):
    raw = yaml.safe_load(CPU_SMALL.read_text())
    for k, v in changes.items():
        raw[k] = v
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def _label(n: int) -> str:
    """The task pack's length label, written out here (1024 -> "1k") as the independent reference."""
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def _value(task: str, alpha: float, seed: int, metadata: dict) -> dict:
    """The fake lm-eval's numbers: a known function of task, length, alpha and seed, one metric per length of
    the task's own lengths key in --metadata."""
    lengths = {"longshort_ppl": "ppl", "longshort_misalignment": "mis", "longshort_passkey": "passkey"}
    out = {}
    for n in metadata.get(f"{lengths.get(task, '-')}_max_seq_lengths", []):
        lab = _label(n)
        if task == "longshort_ppl":
            out.update({f"ppl_{lab},none": 10.0 + n / 100 - 2 * alpha + 0.37 * seed, f"ppl_{lab}_stderr,none": 0.1})
        if task == "longshort_misalignment":
            out.update({f"sce_{lab},none": 5.0 - alpha + 0.11 * seed + n / 1000,
                        f"jeffreys_{lab},none": 0.5 - alpha / 2 + 0.01 * seed, f"js_{lab},none": 0.01})
        if task == "longshort_passkey":
            out.update({"acc,none": 0.5 * seed, f"acc_{lab},none": 0.5 * seed, f"acc_{lab}_d0,none": 0.0,
                        f"digits_{lab},none": 0.1 + 0.3 * seed,
                        **{f"digits_{lab}_d{d},none": d / 100 for d in (0, 25, 50, 75, 100)}})
    if out:
        return out
    if task == "longshort_babilong":
        return {"acc,none": 0.2 + alpha, "acc_1k,none": 0.1 * seed, **{f"acc_1k_d{d},none": d / 200 for d in (0, 50, 100)}}
    if task.startswith("longshort_babilong_qa"):  # one QA task run on its own: numbers that differ by task
        q = int(task[-1])
        return {"acc,none": 0.1 * q + alpha, "acc_1k,none": 0.1 * seed + 0.01 * q,
                **{f"acc_1k_d{d},none": d / 200 + 0.001 * q for d in (0, 50, 100)}}
    raise AssertionError(task)


class FakeExecutor:
    """Plays ``tune run`` and ``python -m torchtune_longshort.eval run``; ``fail`` = run keys whose training fails."""

    def __init__(self, fail=()):
        self.fail, self.calls = set(fail), []

    def __call__(self, argv, log_path, cwd, env, timeout):
        argv = list(argv)
        self.calls.append(argv)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if Path(argv[0]).name == "tune":
            rc = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text())
            out = Path(rc["output_dir"])
            key = out.parent.name
            if key in self.fail:
                log_path.write_text("step 3\nTraceback (most recent call last):\nFloatingPointError: non-finite loss nan at step 3\n")
                return 1
            if "overwrite_output_dir=True" in argv and out.exists():
                shutil.rmtree(out)  # as the recipe does with a folder it made
            d = out / f"step_{rc['max_steps']}"
            d.mkdir(parents=True)
            (d / "config.json").write_text("{}")
            (out / MARKER).write_text("")  # the recipe's own folder, as the overwrite next time finds it
            write_names(d / MANIFEST, {"config.json"})
            a = rc["loss"]["alpha"]
            rows = [{"step": s, "loss": 3.0, "ce": 3.0 - 0.01 * s, "misalignment": 4.0 - a, "tokens_per_second": 1.0}
                    for s in range(1, rc["max_steps"] + 1)]
            rows += [{"step": s, "val_ce": 4.0 - 0.01 * s} for s in range(5, rc["max_steps"] + 1, 5)]  # validation
            (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
            log_path.write_text("ok\n")
            return 0
        if argv[1:3] == ["-m", "torchtune_longshort.eval.tasks.babilong.generator"]:
            out = Path(argv[argv.index("--out") + 1])
            for length in argv[argv.index("--lengths") + 1].split(","):  # a file per length and task, as it writes
                for qa in argv[argv.index("--qa") + 1].split(","):
                    (out / length).mkdir(parents=True, exist_ok=True)
                    (out / length / f"{qa}.jsonl").write_text("{}\n")
            return 0
        assert argv[1:4] == ["-m", "torchtune_longshort.eval", "run"], argv
        margs = dict(kv.split("=", 1) for kv in argv[argv.index("--model_args") + 1].split(","))
        run_dir = Path(margs["pretrained"]).parents[1]
        rc = yaml.safe_load((run_dir / "recipe.yaml").read_text())
        alpha, seed = rc["loss"]["alpha"], rc["seed"]
        out = Path(argv[argv.index("--output_path") + 1]) / "model"
        out.mkdir(parents=True, exist_ok=True)
        tasks = argv[argv.index("--tasks") + 1].split(",")
        metadata = json.loads(argv[argv.index("--metadata") + 1])
        (out / "results_2026-01-01T00-00-00.json").write_text(
            json.dumps({"results": {t: _value(t, alpha, seed, metadata) for t in tasks}}))
        return 0


def quick_cpu_small():
    """The shipped CPU config with ``quick`` merged, read as :func:`load_study_config` reads it, less its checks
    of the files and the recipe overrides (other tests' subject: they import torchtune, ~4-9 s in a fresh process),
    for a test of what a study does with a valid config."""
    from torchtune_longshort.study.config import QUICK_REPLACES, StudyConfig, read_config

    return read_config(CPU_SMALL, StudyConfig, "study", quick=True, repo_root=ROOT, quick_replaces=QUICK_REPLACES)


def _study(tmp_path, fail=(), **cfg_changes):
    cfg = load_study_config(_write_cfg(tmp_path, **cfg_changes), repo_root=ROOT)
    ex = FakeExecutor(fail)
    return Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, executor=ex, log=lambda m: None), ex
