"""benchmarks/gpu_suite.py: every part runs end to end at tiny shapes on the CPU (--smoke), and its time budget;
benchmarks/gpu_out_pack.sh: what a GPU study call leaves in $OUT comes back under the device tool's limits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from warm_start import with_warm_start

REPO = Path(__file__).resolve().parents[1]


def _suite(args, tmp_path, timeout=600):
    env = dict(os.environ, PYTHONPATH=with_warm_start(str(REPO)), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1")
    return subprocess.run([sys.executable, "benchmarks/gpu_suite.py", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_budget_smaller_than_every_part_is_refused_with_the_plan(tmp_path):
    p = _suite(["--smoke", "--budget", "5", "--out", str(tmp_path / "out")], tmp_path, timeout=120)
    assert p.returncode == 2
    msg = p.stderr.strip().splitlines()[-1]
    assert "--budget 5 s is smaller than the smallest part" in msg
    for part in ("loss 40 s", "longest", "recipe", "eval", "fused_ce", "longest_8b 180 s"):
        assert part in msg
    assert not (tmp_path / "out").exists()  # refused before anything ran or was written


@pytest.mark.parametrize("args, flag", [
    (["--budget", "-5"], "--budget -5: must be above 0"),
    (["--peak-tflops", "-3"], "--peak-tflops -3: must be above 0"),
    (["--eval-rounds", "0"], "--eval-rounds 0: must be above 0"),
    (["--eval-layers", "-1"], "--eval-layers -1: must be above 0"),
    (["--longest-8b-gb", "0"], "--longest-8b-gb 0: must be above 0"),
    (["--longest-chunks", "-2"], "--longest-chunks -2: must be 0"),
    (["--memory-points", "no_such.json"], "--memory-points no_such.json: no such file"),
], ids=["budget", "peak_tflops", "eval_rounds", "eval_layers", "longest_8b_gb", "longest_chunks", "memory_points"])
def test_a_size_no_part_could_run_with_is_refused_before_any_part(args, flag, tmp_path, capsys):
    """Each was accepted and met only by the part that reads it, after the earlier parts ran (``--peak-tflops -3``
    printed a negative MFU); now refused in one line before anything runs or is written."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_suite

    with pytest.raises(SystemExit) as exit_:
        gpu_suite.main(["--smoke", "--parts", "loss", "--out", str(tmp_path / "out"), *args])
    assert exit_.value.code == 2
    assert flag in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_budget_skips_the_parts_that_no_longer_fit():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_suite

    planned, refusal = gpu_suite.plan(["loss", "recipe"], 100)
    assert refusal is None and planned == {"loss": gpu_suite.PLANNED_S["loss"], "recipe": gpu_suite.PLANNED_S["recipe"]}
    assert gpu_suite.plan(["loss"], gpu_suite.PLANNED_S["loss"] - 1)[1] is not None
    # the 80 GB point: both steps plan past one call's 600 s (its first step alone took 234 s on an H200)
    assert gpu_suite.plan(["longest_8b"], None, 80)[0] == {"longest_8b": 640}
    assert gpu_suite.plan(["longest_8b"], None, 80, 1)[0] == {"longest_8b": 300}
    assert gpu_suite.plan(["longest_8b"], None, 40, 1)[0] == {"longest_8b": gpu_suite.PLANNED_S["longest_8b"]}


def test_a_longest_step_that_would_not_fit_host_memory_is_refused(monkeypatch):
    """On the lent machine's 128 GiB, the 80 GB 8B point's 1.25x step (186,880 tokens a window) pins 32 bf16
    layer inputs of 3.06 GB, each in a 4 GiB block, and the final norm's fp32 input in an 8 GiB one: 146 GB,
    refused; pageable (its bytes as they are: 104 GB) it fits, as does the default 40 GB point pinned (73 GB)."""
    import argparse

    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_loss_parts
    import memory_model as mm

    assert mm.offloaded_host_bytes("8b-lora", 186880) == 32 * 2**32 + 2**33
    assert mm.offloaded_host_bytes("8b-lora", 186880, False) == 32 * 2 * 186880 * 4096 * 2 + 2 * 186880 * 4096 * 4
    sysconf = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 128 * 2**30 // 4096}
    real = os.sysconf  # the os module's own, shared: other names (psutil's SC_CLK_TCK as it imports) as they are
    monkeypatch.setattr(gpu_loss_parts.os, "sysconf", lambda name: sysconf[name] if name in sysconf else real(name))
    opts = dict(longest_offload=0, longest_chunks=0, longest_8b_gb=80, offload_pinned=1, memory_points=None)
    msg = gpu_loss_parts.host_memory_refusal(["loss", "longest", "longest_8b"], argparse.Namespace(**opts))
    assert msg.startswith("longest_8b: its 1.25x step (186880 tokens a window) offloads 146 GB to pinned"), msg
    assert "add --offload-pinned 0 (pageable host copies: 104 GB)" in msg, msg
    for change in ({"offload_pinned": 0}, {"longest_8b_gb": 40}):
        assert gpu_loss_parts.host_memory_refusal(["longest_8b"], argparse.Namespace(**{**opts, **change})) is None
    # the predicted window alone (--longest-steps 1) still pins 146 GB: 32 inputs of 2.45 GB in 4 GiB blocks
    one = argparse.Namespace(**opts, longest_steps=1)
    msg = gpu_loss_parts.host_memory_refusal(["longest_8b"], one)
    assert msg.startswith("longest_8b: its one step (149504 tokens a window) offloads 146 GB to pinned"), msg
    assert "(pageable host copies: 83 GB)" in msg, msg


def test_the_longest_check_names_the_direction_of_a_wrong_model():
    """The verdict of ``memory_model.check_longest``'s steps: on the H200 (2026-12-04) the 8B LoRA's 1.25x step at
    the 40 GB cap fit too (36.5 of 37.3 GiB): the model over-estimates, which is wrong but on the safe side."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from gpu_loss_parts import longest_verdict

    fit, oom = {"fit": True}, {"fit": False}
    assert longest_verdict([fit, oom]) == "the model holds"
    assert "on the safe side" in longest_verdict([fit, fit]) and "over-estimates" in longest_verdict([fit, fit])
    assert "under-estimates" in longest_verdict([oom, oom])
    assert "under-estimates" in longest_verdict([oom])
    assert "1.25x it not run" in longest_verdict([fit])


def test_one_longest_step_runs_the_predicted_window_only(monkeypatch):
    """``--longest-steps 1``: ``check_longest`` runs the predicted window and not 1.25x it; fitting is then half
    the check (``model_holds`` None), not fitting still proves the model wrong."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import memory_model as mm

    ran = []
    monkeypatch.setattr(mm, "predict_longest", lambda *a, **k: 1024)
    monkeypatch.setattr(mm, "predict_bytes", lambda *a, **k: (1, "bwd_first"))
    for steps, fits, holds in ((1, True, None), (1, False, False), (2, True, False)):
        ran.clear()
        monkeypatch.setattr(mm, "run_step", lambda shape, L, *a, _f=fits, **k: ran.append(L) or dict(
            L=L, fit=_f, peak_bytes=1, build_s=0, seconds=0, error="CUDA out of memory"))
        res = mm.check_longest(1e9, "8b-lora", steps=steps)
        assert ran == [1024, 1280][:steps] and res["model_holds"] is holds, (ran, res)


def test_gpu_study_results_come_back_in_files_under_the_device_limit(tmp_path):
    """The device tool returns no file over 16 MiB. One archive of a study's folder (records and lm-eval's samples)
    was 16.9 MiB for command 1 of gpu_smollm2_seeds (simulated 2026-12-03): nothing would have come back. The records
    go in study.tgz without samples or checkpoints; the samples in pieces of PIECE bytes that rejoin."""
    import tarfile

    study = tmp_path / "outputs" / "study"
    (study / "base" / "eval" / "m").mkdir(parents=True)
    (study / "base" / "result.json").write_text("{}")
    (study / "base" / "eval" / "m" / "results_1.json").write_text("{}")
    samples = os.urandom(250_000)  # incompressible: three pieces of 100 KB
    (study / "base" / "eval" / "m" / "samples_longshort_ppl_1.jsonl").write_bytes(samples)
    (study / "runs" / "a" / "train" / "step_2").mkdir(parents=True)
    (study / "runs" / "a" / "train" / "step_2" / "samples_x.jsonl").write_bytes(b"a checkpoint's file")
    out, env = tmp_path / "OUT", dict(os.environ, PIECE="100000")
    p = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_out_pack.sh"), str(out), "outputs/study"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(f.stat().st_size <= 100_000 for f in out.glob("samples.tgz.*")) and len(list(out.iterdir())) == 4
    with tarfile.open(out / "study.tgz") as t:
        names = t.getnames()
    assert "outputs/study/base/result.json" in names and "outputs/study/base/eval/m/results_1.json" in names
    assert not [n for n in names if "samples_" in n or "/train" in n], names
    joined = b"".join(f.read_bytes() for f in sorted(out.glob("samples.tgz.*")))
    (tmp_path / "joined.tgz").write_bytes(joined)
    with tarfile.open(tmp_path / "joined.tgz") as t:
        assert t.getnames() == ["outputs/study/base/eval/m/samples_longshort_ppl_1.jsonl"]
        assert t.extractfile(t.getnames()[0]).read() == samples
    assert "benchmarks/gpu_out_pack.sh" in (REPO / "benchmarks" / "gpu_study.sh").read_text()
    p = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_out_pack.sh"), str(out), "nothere"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "FOLDER nothere is not a folder" in p.stdout


@pytest.mark.slow
def test_gpu_suite_smoke_runs_every_part(tmp_path):
    p = _suite(["--smoke", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")], tmp_path)
    assert p.returncode == 0, p.stderr[-4000:]
    report = json.loads((tmp_path / "out" / "gpu_suite.json").read_text())
    assert report["smoke"] and list(report["parts"]) == ["loss", "longest", "recipe", "eval", "fused_ce", "longest_8b"]
    assert not any("error" in r for r in report["parts"].values())
    variants = {r["variant"] for r in report["parts"]["loss"]["rows"]}
    assert variants == {"fused a=0.0", "fused a=0.1", "naive a=0.0"}
    longest = report["parts"]["longest"]
    assert longest["predicted_L"] >= 1024 and [r["fit"] for r in longest["runs"]] == [True, True]
    longest_8b = report["parts"]["longest_8b"]  # the tiled MLP's prediction at 40 GB, its step code tiled on the CPU
    assert longest_8b["predicted_L"] >= 1024 and longest_8b["tile"] == 4096
    assert [(r["fit"], r["tile"]) for r in longest_8b["runs"]] == [(True, 48), (True, 48)]
    recipe = report["parts"]["recipe"]["results"]
    assert set(recipe) == {"torchtune eager", "longshort a=0 eager", "torchtune compile", "longshort a=0 compile"}
    assert all(r["tokens_per_s"] > 0 and r["peak_mib"] > 0 for r in recipe.values())
    assert "Loss path: fused" in p.stdout + p.stderr
    assert "decoder layers compiled one by one" in p.stdout + p.stderr  # our compiled run compiled
    # each run's graphs as torch._dynamo counts them: both compiled runs compiled (torchtune's too), no eager one did
    assert {k: r["graphs_compiled"] > 0 for k, r in recipe.items()} == {k: r["compile"] for k, r in recipe.items()}
    assert all(r["compile"] == k.endswith(" compile") for k, r in recipe.items())
    for row in report["parts"]["eval"]["rows"]:
        assert row["result_diff"] < 1e-5  # the two lm-eval models agree on the log-likelihoods
        assert row["result_diff_kv"] == 0.0 and row["tokens_per_s"]["ours_kv"] > 0  # hf's k/v layout: same values
    attention = report["parts"]["eval"]["attention"]  # SDPA alone, three layouts a length, each named by backend
    assert [(r["L"], r["layout"]) for r in attention] == [(L, lay) for L in (64, 128)
                                                           for lay in ("torchtune", "hf", "contiguous")]
    assert all(r["backend"] == "FLASH_ATTENTION" and r["fwd_bwd_ms"] > 0 and r["max_abs_diff"] < 1e-6
               for r in attention)
    kernels = report["parts"]["eval"]["kernels"]  # one profiled request a way: each ran the same SDPA operator
    assert set(kernels["total_ms"]) == {"hf", "ours", "ours_kv"} and min(kernels["total_ms"].values()) > 0
    sdpa = next(r for r in kernels["rows"] if "scaled_dot_product" in r["name"])
    assert sdpa["hf"][1] == sdpa["ours"][1] == sdpa["ours_kv"][1] == 2  # one call a layer, 2 layers
    losses = report["parts"]["fused_ce"]["results"]
    # ours at alpha 0 is the mean CE over both windows' rows (equal window sizes), as full logits give it
    naive = losses["naive: full float32 logits, F.cross_entropy"]["loss"]
    assert losses["ours a=0"]["loss"] == pytest.approx(naive, rel=1e-5)
    assert losses["ours a=0, no report"]["loss"] == pytest.approx(naive, rel=1e-5)
    assert losses["ours a=0.1"]["loss"] > naive  # plus alpha x SCE (>= 0)
    assert (tmp_path / "out" / "gpu_suite.md").read_text().startswith("# GPU suite")


def test_contiguous_kv_hands_sdpa_hfs_layout_and_restores_the_model():
    """benchmarks/attention_layout.contiguous_kv: inside, every attention passes SDPA contiguous k and v (lm-eval
    ``hf``'s layout) and the output is the same; outside, torchtune's own transposed views again."""
    import torch
    from torchtune.models.llama2 import llama2

    sys.path.insert(0, str(REPO / "benchmarks"))
    import attention_layout

    torch.manual_seed(0)
    model = llama2(vocab_size=64, num_layers=2, num_heads=4, num_kv_heads=4, embed_dim=64, max_seq_len=32).eval()
    seen = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, *args, **kwargs):
        seen.append((k.is_contiguous(), v.is_contiguous()))
        return real(q, k, v, *args, **kwargs)

    tokens = torch.randint(0, 64, (1, 16))
    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
        before = model(tokens)
        with attention_layout.contiguous_kv(model):
            inside = model(tokens)
        after = model(tokens)
    assert seen == [(False, False)] * 2 + [(True, True)] * 2 + [(False, False)] * 2
    assert torch.equal(before, inside) and torch.equal(before, after)


@pytest.mark.parametrize("args, says", [
    (["--heads", "-2"], "--heads -2 --head-dim 128: each at least 1"),
    (["--head-dim", "0"], "--heads 32 --head-dim 0: each at least 1"),
    (["--device", "cdua"], "--device 'cdua': not a torch device"),
    (["--out", "{tmp}"], "a folder; pass the JSON file to write"),
], ids=["heads", "head_dim", "device", "out_folder"])
def test_attention_layout_refuses_bad_input_in_one_line_before_measuring(args, says, tmp_path, capsys, monkeypatch):
    """A negative ``--heads`` or a zero ``--head-dim`` was a traceback from ``torch.randn`` / ``max()``, a device
    typo one from ``.to``, and ``--out`` naming a folder an IsADirectoryError after every length was timed."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import attention_layout

    monkeypatch.setattr(attention_layout, "measure", lambda *a, **k: pytest.fail("measured before refusing"))
    with pytest.raises(SystemExit) as exit_:
        attention_layout.main(["--lengths", "64", *[a.format(tmp=tmp_path) for a in args]])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err.strip().splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


def test_kernel_profile_splits_each_ways_time_and_a_failing_profile_is_a_line():
    """gpu_parts.kernel_profile: each way's operators with their own time and calls (the profile counts what each
    way ran); a way that raises leaves the error, named, in place of the table (the eval part goes on)."""
    from contextlib import nullcontext

    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_parts

    a = torch.randn(256, 256)

    class LM:
        def __init__(self, times):
            self.times = times

        def loglikelihood(self, reqs, disable_tqdm=True):
            for _ in range(self.times):
                torch.mm(a, a)

    prof = gpu_parts.kernel_profile({"one": (LM(1), nullcontext), "three": (LM(3), nullcontext)}, [], cuda=False)
    mm = next(r for r in prof["rows"] if r["name"] == "aten::mm")
    assert mm["one"][1] == 1 and mm["three"][1] == 3 and mm["one"][0] > 0 and mm["three"][0] > 0
    assert prof["rows"][0]["name"] == "aten::mm" and prof["total_ms"]["three"] >= mm["three"][0]
    assert "| aten::mm |" in gpu_parts.kernels_markdown(prof)

    class Broken:
        def loglikelihood(self, reqs, disable_tqdm=True):
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    failed = gpu_parts.kernel_profile({"x": (Broken(), nullcontext)}, [], cuda=False)
    assert failed == {"error": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"}
    assert gpu_parts.kernels_markdown(failed) == "the profiler failed (RuntimeError: CUPTI_ERROR_NOT_INITIALIZED)"


PROBED = ("torch", "transformers", "kernels", "torchtune", "torchao", "lm_eval", "triton", "liger_kernel",
          "cut_cross_entropy", "torchtune_longshort")


def _gpu_run(tmp_path, env_extra):
    """benchmarks/gpu_run.sh in a copy of its folder, with a python3 that installs nothing, runs the probe over
    stand-in modules (a fake torch answering the CUDA questions) and, as gpu_suite.py, prints the environment."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "gpu_run.sh").write_text((REPO / "benchmarks" / "gpu_run.sh").read_text())
    for m in PROBED:
        (tmp_path / m).mkdir()
        (tmp_path / m / "__init__.py").write_text("__version__ = 'stand-in'\n")
    (tmp_path / "torch" / "__init__.py").write_text(
        "__version__ = 'stand-in'\nclass version:\n    cuda = '0'\nclass _P:\n    total_memory = 2**30\n"
        "class cuda:\n    get_device_name = staticmethod(lambda: 'fake')\n"
        "    get_device_properties = staticmethod(lambda i: _P())\n")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho fake\n")
    (bin_ / "python3").write_text(
        f"#!/bin/bash\ncase \"$1\" in\n  -m) exit 0;;\n  -) exec {sys.executable} -;;\n"
        f"  *) exec {sys.executable} -c 'import os; print(\"suite sees USE_HUB_KERNELS\", "
        "os.environ.get(\"USE_HUB_KERNELS\"))';;\nesac\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "USE_HUB_KERNELS"}
    env.update(PATH=f"{bin_}:{env['PATH']}", OUT=str(tmp_path / "out"), **env_extra)
    p = subprocess.run(["bash", "benchmarks/gpu_run.sh"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout, (tmp_path / "out" / "probe.txt").read_text()


@pytest.mark.parametrize("given, seen", [({}, "NO"), ({"USE_HUB_KERNELS": "YES"}, "YES")])
def test_gpu_run_keeps_hf_off_hub_kernels_and_records_it(tmp_path, given, seen):
    """transformers 5.25 (what a device's own install may be when .gpu/site is missing) loads lm-eval's hf model
    with use_kernels on, swapping RMSNorm, RoPE and SiLU on CUDA: P3's hf side would not be the earlier runs' code.
    gpu_run.sh runs the suite with USE_HUB_KERNELS=NO unless told otherwise, and its probe records it."""
    out, probe = _gpu_run(tmp_path, given)
    assert f"suite sees USE_HUB_KERNELS {seen}" in out
    assert f"USE_HUB_KERNELS {seen}\n" in probe and "kernels stand-in" in probe


def test_gpu_pack_takes_docs_out_and_back_in_a_git_worktree(tmp_path):
    """In a git worktree .git is a file: gpu_pack.sh wrote '/docs/' to .git/info/exclude ('Not a directory', exit 1)
    after taking docs/ out of the index, so docs/ would have travelled as untracked files and a commit would delete
    it. The repository's exclude file (git rev-parse --git-path), which the worktree's fix wrote, is shared by every
    checkout of it: docs/ is now ignored by a docs/.gitignore of the worktree's alone; restore puts the tree back."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "benchmarks").mkdir()
    (repo / "docs" / "a.md").write_text("a\n")
    (repo / ".gitignore").write_text("/.gpu/\n")
    (repo / "benchmarks" / "gpu_pack.sh").write_text((REPO / "benchmarks" / "gpu_pack.sh").read_text())
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "c"], ["worktree", "add", "-q", "../wt"]):
        subprocess.run(git + cmd, cwd=repo, check=True, capture_output=True)
    shared = tmp_path / "shared" / "tools"
    shared.mkdir(parents=True)
    (shared / "gpu-wheels.sh").write_text("exit 7\n")  # stop before any download: the index step is what is asked
    wt, env = tmp_path / "wt", dict(os.environ, SHARED=str(tmp_path / "shared"), MODEL="0")
    p = subprocess.run(["bash", "benchmarks/gpu_pack.sh"], cwd=wt, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 7, p.stdout + p.stderr
    travels = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=wt, capture_output=True, text=True)
    assert "docs/a.md" not in travels.stdout.split() and "benchmarks/gpu_pack.sh" in travels.stdout.split()
    # the other checkouts of the repository are not touched: the exclude file they share with the worktree ('/docs/'
    # there hid a new docs/ page of the main checkout from git status and git add until the worktree's restore)
    (repo / "docs" / "new.md").write_text("n\n")
    seen = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    assert seen == "?? docs/new.md\n", seen
    p = subprocess.run(["bash", "benchmarks/gpu_pack.sh", "restore"], cwd=wt, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and not p.stderr, p.stdout + p.stderr
    assert subprocess.run(["git", "status", "--porcelain"], cwd=wt, capture_output=True, text=True).stdout == ""
    assert "/docs/" not in (repo / ".git" / "info" / "exclude").read_text().split()
