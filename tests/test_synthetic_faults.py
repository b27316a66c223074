"""The synthetic command under faults: a full disk ends in one line (exit 2) and leaves no cut-off file, a cache entry
that cannot be parsed is trained again (a warning naming it) instead of a traceback on every later run, and a run that
stopped part-way does not block its own rerun (the folder's summary is written before its CSVs and figures)."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from disk_full import needs_unshare, on_small_disk

import torchtune_longshort.synthetic.experiments as experiments
import torchtune_longshort.synthetic.sparsity_probes.figures as beyond_figures
from torchtune_longshort.synthetic.__main__ import main

PROG = "python -m torchtune_longshort.synthetic"
# figure 1b at its smallest: 4 runs of a few seconds in all
TINY = ["--figure", "1b", "--quick", "--seeds", "1", "--steps", "5", "--dim", "8", "--heads", "2"]


def _one_error_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.startswith(f"{PROG}: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def _disk_full():
    return OSError(28, "No space left on device")


@pytest.fixture(scope="module")
def trained_cache(tmp_path_factory):
    """The cache of :data:`TINY`'s 4 runs, trained once for the module."""
    folder = tmp_path_factory.mktemp("syn")
    assert main(TINY + ["--out", str(folder / "out"), "--cache", str(folder / "cache")]) == 0
    return folder / "cache"


@needs_unshare
def test_a_full_disk_ends_in_one_line_and_the_rerun_goes_on(tmp_path, trained_cache):
    """Before: a traceback from the cache writer leaving a 0-byte cache entry (every later run then died on its
    JSONDecodeError), and one from PIL's savefig leaving fig1b.csv, which the rerun refused as a user's file."""
    disk = tmp_path / "disk"
    run = (f"{sys.executable} -m torchtune_longshort.synthetic {' '.join(TINY)} --out {disk / 'out'} "
           f"--cache {disk / 'c'}")
    fill = f"head -c 4000000 /dev/zero > {disk / 'fill'} 2>/dev/null"
    leave_40k = (f"rm {disk / 'fill'}; head -c $(( $(df -k {disk} | tail -1 | awk '{{print $4}}') * 1024 - 40960 )) "
                 f"/dev/zero > {disk / 'fill'}")
    script = (f"{fill}; {run}; echo '#rc' $?; ls -A {disk / 'c'}; echo '#room'; rm -r {disk / 'fill'} {disk / 'out'}; "
              f"cp {trained_cache}/*.json {disk / 'c'}; printf '{{\"test_' > $(ls -d {disk / 'c'}/*.json | head -1); "
              f"{leave_40k}; {run}; echo '#rc' $?; ls -A {disk / 'out'}; echo '#rerun'; rm {disk / 'fill'}; {run}; "
              f"echo '#rc' $?; ls -A {disk / 'out'}")
    p = on_small_disk(disk, "3m", script, TMPDIR=tmp_path)
    full, part, rerun = p.stdout.split("#rc ")[1:]
    errors = p.stderr.split("JSONDecodeError")  # none: the cut-off entry is trained again
    assert len(errors) == 1, p.stderr[-3000:]
    # a full disk: one line naming the cache entry, and no entry left (a 0-byte one blocked every later run)
    assert full.split() == ["2", "#room"], p.stdout
    # a cache entry cut off: trained again, said once; then the figure does not fit: one line, exit 2
    warnings = [x for x in p.stderr.splitlines() if x.startswith("warning: the cache entry ")]
    assert len(warnings) == 1 and "training that run again" in warnings[0], p.stderr[-3000:]
    lines = [x for x in p.stderr.splitlines() if x.startswith(f"{PROG}: error:")]
    assert len(lines) == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "no space left on the disk writing" in lines[0] and f"{disk / 'c'}/" in lines[0], lines[0]
    assert f"writing {disk / 'out' / 'fig1b.png'}" in lines[1], lines[1]
    listed = part.split("#rerun")[0].split()
    assert listed[0] == "2" and "summary.json" in listed and "fig1b.png" not in listed, p.stdout
    assert not [n for n in listed if n.endswith(".tmp")], listed
    # the rerun is not refused for the files the failed run left
    assert rerun.split()[0] == "0" and "fig1b.png" in rerun.split(), p.stderr[-3000:]


def test_a_cut_off_cache_entry_is_trained_again(tmp_path, capsys, trained_cache):
    out, cache = tmp_path / "out", tmp_path / "cache"
    shutil.copytree(trained_cache, cache)
    entries = sorted(cache.glob("*.json"))
    assert len(entries) == 4
    entries[0].write_text("")  # a 0-byte entry: what a full disk left
    entries[1].write_text(entries[1].read_text()[:40])  # cut off mid-way
    entries[2].write_text("[1, 2]")  # JSON, but no run's result
    capsys.readouterr()
    assert main(TINY + ["--out", str(out), "--cache", str(cache)]) == 0
    err = capsys.readouterr().err
    warned = [x for x in err.splitlines() if x.startswith("warning: the cache entry ")]
    assert sorted(x.split()[4] for x in warned) == sorted(str(p) for p in entries[:3]), err[-3000:]
    assert "Traceback" not in err
    assert all(isinstance(json.loads(p.read_text()), dict) for p in entries)  # trained again and stored whole


def test_a_paper_figure_that_fails_part_way_does_not_block_the_rerun(tmp_path, capsys, monkeypatch):
    out, cache = tmp_path / "out", tmp_path / "cache"
    plot = experiments._plot

    def full_disk(*args, **kwargs):
        raise _disk_full()

    monkeypatch.setattr(experiments, "_plot", full_disk)
    assert main(TINY + ["--out", str(out), "--cache", str(cache)]) == 2
    assert "no space left on the disk" in _one_error_line(capsys.readouterr().err)
    assert (out / "fig1b.csv").is_file() and not (out / "fig1b.png").exists()
    monkeypatch.setattr(experiments, "_plot", plot)
    assert main(TINY + ["--out", str(out), "--cache", str(cache)]) == 0, capsys.readouterr().err
    assert (out / "fig1b.png").is_file()


def _fake_probe(cfg) -> dict:
    """A beyond run's result, as the trainers return it, with no training."""
    ks = getattr(cfg, "test_ks", (1,))
    return {"acc": {f"{k},{n}": 0.5 for k in ks for n in cfg.test_ls}, "final_train_loss": 0.7, "seconds": 0.1}


@pytest.mark.parametrize("fail_at", ["csv", "png"])
def test_a_beyond_figure_that_fails_part_way_does_not_block_the_rerun(tmp_path, capsys, monkeypatch, fail_at):
    out = tmp_path / "out"
    argv = ["--figure", "parity", "--quick", "--seeds", "1", "--out", str(out)]
    monkeypatch.setattr(beyond_figures, "train_probe", _fake_probe)
    save, opened = beyond_figures.save_figure, beyond_figures.atomic_open

    def full_disk(*args, **kwargs):
        raise _disk_full()

    monkeypatch.setattr(beyond_figures, "save_figure" if fail_at == "png" else "atomic_open", full_disk)
    assert main(argv) == 2
    assert "no space left on the disk" in _one_error_line(capsys.readouterr().err)
    assert not (out / "fig_parity.png").exists() and "parity" in json.loads((out / "beyond_summary.json").read_text())
    monkeypatch.setattr(beyond_figures, "save_figure", save)
    monkeypatch.setattr(beyond_figures, "atomic_open", opened)
    assert main(argv) == 0, capsys.readouterr().err
    assert (out / "fig_parity.png").is_file() and (out / "fig_parity.csv").is_file()


def test_a_beyond_figure_stopped_in_training_leaves_no_folder(tmp_path, monkeypatch, capsys):
    # Ctrl-C while the probes trained left the --out it had made first (empty, and its parents); the paper figures
    # make theirs once every run has trained. And it ended in a KeyboardInterrupt traceback: now one line, exit 130.
    def stopped(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(beyond_figures, "train_probe", stopped)
    with pytest.raises(SystemExit) as exit_info:
        main(["--figure", "parity", "--quick", "--seeds", "1", "--out", str(tmp_path / "new" / "out")])
    assert exit_info.value.code == 130 and list(tmp_path.iterdir()) == []
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "python -m torchtune_longshort.synthetic: interrupted (SIGINT): nothing is written until every run has "
        "trained; with --cache DIR the runs that finished are kept there and the same command reuses them")
