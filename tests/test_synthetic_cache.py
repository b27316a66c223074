"""The synthetic ``--cache``: an entry is reused only when the code that wrote it is the code running now (before, the
cache was keyed by the run's config alone, so a rerun after the training or evaluation code changed silently reused
the old code's numbers)."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

import torchtune_longshort.synthetic.experiments as experiments
from torchtune_longshort import worker_pool
from torchtune_longshort.synthetic import run_cache
from torchtune_longshort.synthetic.train import RunConfig

# one run of about a second
TINY = RunConfig(l_train=4, l_test=8, max_steps=3, eval_every=3, val_size=64, test_per_length=8, dim=8, num_heads=2,
                 batch_size=32)


def _counting_worker(monkeypatch) -> list:
    """Every config ``run_all`` trains (in-process, workers=1), appended to the returned list."""
    trained, worker = [], experiments._worker

    def counted(cfg):
        trained.append(cfg)
        return worker(cfg)

    monkeypatch.setattr(experiments, "_worker", counted)
    return trained


def _entry(cache) -> tuple:
    (path,) = cache.glob("*.json")
    return path, json.loads(path.read_text())


def test_an_entry_written_by_other_code_is_trained_again(tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    trained = _counting_worker(monkeypatch)
    first = experiments.run_all([TINY], workers=1, cache_dir=str(cache))
    path, entry = _entry(cache)
    assert len(trained) == 1 and entry["code_key"] == run_cache.code_key()
    sentinel = [123.0] * TINY.l_test  # a number no run gives: where it comes back, the entry was reused
    path.write_text(json.dumps({**entry, "test_mse": sentinel}))
    again = experiments.run_all([TINY], workers=1, cache_dir=str(cache))
    assert len(trained) == 1 and next(iter(again.values()))["test_mse"] == sentinel  # same code: reused
    capsys.readouterr()
    for stale in ({**entry, "test_mse": sentinel, "code_key": "0" * 16},  # other code
                  {k: v for k, v in {**entry, "test_mse": sentinel}.items() if k != "code_key"}):  # no key (older)
        path.write_text(json.dumps(stale))
        res = next(iter(experiments.run_all([TINY], workers=1, cache_dir=str(cache)).values()))
        assert res["test_mse"] != sentinel and res["test_mse"] == next(iter(first.values()))["test_mse"]
        assert json.loads(path.read_text())["code_key"] == run_cache.code_key()  # the entry replaced
        notes = [x for x in capsys.readouterr().err.splitlines() if x.startswith("note: ")]
        assert len(notes) == 1 and "1 cache entry in " in notes[0] and "written by other code" in notes[0], notes
    assert len(trained) == 3


def test_the_code_key_changes_with_any_source_file(tmp_path):
    folder, outside = tmp_path / "synthetic", tmp_path / "windows.py"
    shutil.copytree(run_cache.PACKAGE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__", "sparsity_probes"))
    shutil.copy(run_cache.OUTSIDE_FILES[0], outside)
    assert run_cache.code_key(folder, [outside]) == run_cache.code_key()  # same bytes, same key, wherever they are
    keys = {run_cache.code_key(folder, [outside])}
    for path in (folder / "train.py", folder / "misalignment.py", outside):
        path.write_text(path.read_text() + "\n# changed\n")
        keys.add(run_cache.code_key(folder, [outside]))
    (folder / "new_module.py").write_text("x = 1\n")
    keys.add(run_cache.code_key(folder, [outside]))
    assert len(keys) == 5
    (folder / "notes.txt").write_text("not code")  # only the source files count
    assert run_cache.code_key(folder, [outside]) in keys


def _imported_modules(path: Path, package: str, root: Path) -> set:
    """The files of ``package``'s modules that ``path`` imports anywhere in it (module or function level)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            here = path.parent.relative_to(root.parent).parts
            base = ".".join(here[:len(here) - node.level + 1]) if node.level else ""
            mod = ".".join(x for x in (base, node.module or "") if x)
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith(package + "."):
                rel = Path(*name.split(".")[1:])
                found |= {f for f in (root / rel / "__init__.py", root / rel.with_suffix(".py")) if f.is_file()}
    return found


def test_the_code_key_hashes_every_module_of_the_package_a_cached_run_imports():
    # the key hashes synthetic/*.py, not the subpackage sparsity_probes/ (whose runs never use the cache): a cached
    # run importing a module of it would reuse stale entries after that module changed; the import statements of
    # what the figure runs and their workers run (experiments.py, train.py), followed through the package, are the
    # reference
    root = Path(run_cache.__file__).resolve().parent.parent  # torchtune_longshort/
    todo = [root / "synthetic" / "experiments.py", root / "synthetic" / "train.py", root / "synthetic" / "__init__.py"]
    seen = set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += _imported_modules(path, "torchtune_longshort", root) - seen
    in_package = {p for p in seen if (root / "synthetic") in p.parents}
    assert root / "synthetic" / "run_cache.py" in in_package and len(in_package) > 8  # the walk follows the imports
    assert in_package <= {p.resolve() for p in run_cache.PACKAGE_DIR.glob("*.py")}, in_package


def test_a_pool_starts_no_more_worker_processes_than_runs(monkeypatch):
    # '--figure 1a --workers 99' spawned 99 processes (each importing torch) for 12 runs
    sizes, runs = [], [RunConfig(**{**TINY.__dict__, "seed": s}) for s in (0, 1)]
    monkeypatch.setattr(worker_pool, "_start", lambda ctx, n, *rest: sizes.append(n))  # records the count, starts none
    experiments.run_all(runs, workers=99)
    assert sizes == [2]


def test_a_cache_that_takes_no_new_file_serves_the_runs_it_holds(tmp_path, monkeypatch):
    """8c6ea9b refused an existing --cache folder that takes no new file (chattr +i, a read-only mount) up front, so
    a rerun whose every run the cache holds (read only, nothing stored) was refused too. The folder is now asked
    once a run is to be stored, before that run trains. The reference: the results of the run that filled it."""
    import pytest

    import torchtune_longshort.config.values as values
    from torchtune_longshort.config.values import UnwritablePath

    cache = tmp_path / "cache"
    trained = _counting_worker(monkeypatch)
    first = experiments.run_all([TINY], workers=1, cache_dir=str(cache))
    probe = values._refuses_new_folder
    monkeypatch.setattr(values, "_refuses_new_folder", lambda f: "Read-only file system" if f == cache else probe(f))
    assert experiments.run_all([TINY], workers=1, cache_dir=str(cache)) == first and len(trained) == 1
    with pytest.raises(UnwritablePath, match=r"^--cache='.*' does not take new files \(Read-only file system\)"):
        experiments.run_all([TINY, RunConfig(**{**TINY.__dict__, "seed": 1})], workers=1, cache_dir=str(cache))
    assert len(trained) == 1  # refused before the run to store trained


def test_a_rerun_says_how_many_runs_it_took_from_the_cache(tmp_path, capsys, monkeypatch):
    # a rerun over a cache said nothing of the runs it reused (its bar counted the runs left: 'runs: 0it' when the
    # cache held them all); the reference is the cache folder's own entries, counted before each rerun
    cache = tmp_path / "cache"
    trained = _counting_worker(monkeypatch)
    configs = [TINY, RunConfig(**{**TINY.__dict__, "seed": 1})]
    experiments.run_all(configs, workers=1, cache_dir=str(cache))
    assert len(trained) == 2 and not [x for x in capsys.readouterr().err.splitlines() if "taken from" in x]
    entries = sorted(cache.glob("*.json"))
    experiments.run_all(configs, workers=1, cache_dir=str(cache))
    notes = [x for x in capsys.readouterr().err.splitlines() if x.startswith("note: ")]
    assert len(trained) == 2 and notes == [f"note: {len(entries)} of 2 runs taken from --cache {cache} (finished "
                                           "earlier, by this code): none to train"], notes
    entries[0].unlink()
    experiments.run_all(configs, workers=1, cache_dir=str(cache))
    notes = [x for x in capsys.readouterr().err.splitlines() if x.startswith("note: ")]
    assert len(trained) == 3 and notes == [f"note: {len(entries) - 1} of 2 runs taken from --cache {cache} "
                                           "(finished earlier, by this code): training the other 1"], notes


@pytest.mark.parametrize("workers", [1, 2])
def test_a_rerun_with_every_run_cached_prints_no_progress_bar(tmp_path, capsys, monkeypatch, workers):
    # '--figure 1b --quick --cache c1' run twice printed 'runs: 0it [00:00, ?it/s]' two times (tqdm over no run, to a
    # file or pipe) after 'none to train'; the reference: the cache's own entries, one per config, and the bar the
    # first run (which trains) prints
    cache = tmp_path / "cache"
    trained = _counting_worker(monkeypatch)
    experiments.run_all([TINY], workers=1, cache_dir=str(cache))
    assert "runs: 100%" in capsys.readouterr().err  # a run trained: its bar
    assert len(list(cache.glob("*.json"))) == 1
    again = experiments.run_all([TINY], workers=workers, cache_dir=str(cache))
    err = capsys.readouterr().err
    assert len(trained) == 1 and len(again) == 1
    assert "none to train" in err and "runs:" not in err and "it/s" not in err, err
