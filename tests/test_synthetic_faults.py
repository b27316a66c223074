"""The synthetic command under faults: a full disk ends in one line (exit 2) and leaves no cut-off file, a cache entry
that cannot be parsed is trained again (a warning naming it) instead of a traceback on every later run, and a run that
stopped part-way does not block its own rerun (the folder's summary is written before its CSVs and figures)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys

import pytest
from disk_full import needs_unshare, on_small_disk

import torchtune_longshort.output_guard as output_guard
import torchtune_longshort.synthetic.experiments as experiments
import torchtune_longshort.synthetic.sparsity_probes.figures as beyond_figures
from torchtune_longshort.output_guard import write_together
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
    script = (f"{fill}; {run}; echo '#rc' $?; ls -A {disk}; echo '#room'; rm {disk / 'fill'}; mkdir {disk / 'c'}; "
              f"cp {trained_cache}/*.json {disk / 'c'}; printf '{{\"test_' > $(ls -d {disk / 'c'}/*.json | head -1); "
              f"{leave_40k}; {run}; echo '#rc' $?; ls -A {disk / 'out'}; echo '#rerun'; rm {disk / 'fill'}; {run}; "
              f"echo '#rc' $?; ls -A {disk / 'out'}")
    p = on_small_disk(disk, "3m", script, TMPDIR=tmp_path)
    full, part, rerun = p.stdout.split("#rc ")[1:]
    errors = p.stderr.split("JSONDecodeError")  # none: the cut-off entry is trained again
    assert len(errors) == 1, p.stderr[-3000:]
    # a full disk: refused in one line before anything trains (once, after training: one line naming the cache
    # entry), and no entry left (a 0-byte one blocked every later run), nor the --out and --cache folders
    assert full.split() == ["2", "fill", "#room"], p.stdout
    # a cache entry cut off: trained again, said once; then the figure does not fit: one line, exit 2
    warnings = [x for x in p.stderr.splitlines() if x.startswith("warning: the cache entry ")]
    assert len(warnings) == 1 and "training that run again" in warnings[0], p.stderr[-3000:]
    lines = [x for x in p.stderr.splitlines() if x.startswith(f"{PROG}: error:")]
    assert len(lines) == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert lines[0].startswith(f"{PROG}: error: --out {disk / 'out'}: writing the figures needs at least "), lines[0]
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


def _full_at(suffix: str):
    """A ``write_together`` whose disk fills at the first file named ``*<suffix>``: the files before it are written."""
    def write(files):
        written = [(p, data) for p, data in files[:[str(p).endswith(suffix) for p, _ in files].index(True)]]
        output_guard.write_together(written)
        raise _disk_full()

    return write


def test_a_paper_figure_that_fails_part_way_does_not_block_the_rerun(tmp_path, capsys, monkeypatch):
    out, cache = tmp_path / "out", tmp_path / "cache"
    monkeypatch.setattr(experiments, "write_together", _full_at(".png"))
    assert main(TINY + ["--out", str(out), "--cache", str(cache)]) == 2
    assert "no space left on the disk" in _one_error_line(capsys.readouterr().err)
    assert (out / "fig1b.csv").is_file() and not (out / "fig1b.png").exists()
    monkeypatch.setattr(experiments, "write_together", output_guard.write_together)
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
    monkeypatch.setattr(beyond_figures, "write_together", _full_at(f".{fail_at}"))
    assert main(argv) == 2
    assert "no space left on the disk" in _one_error_line(capsys.readouterr().err)
    assert not (out / "fig_parity.png").exists() and "parity" in json.loads((out / "beyond_summary.json").read_text())
    monkeypatch.setattr(beyond_figures, "write_together", output_guard.write_together)
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
        "trained and every figure is drawn; the beyond figures keep no finished run: run it again")
    # (it said "with --cache DIR the runs that finished are kept there", and --cache is refused with these figures)


def test_a_stop_while_the_figures_are_drawn_leaves_the_earlier_run_whole(tmp_path, monkeypatch, trained_cache):
    """Before: summary.json and runs.json were written, then each figure's CSV and PNG in turn, drawing as it went
    (~20 s for --figure all on 2 cores): a Ctrl-C / SIGTERM in that time left the new run's summary.json beside the
    earlier run's fig<n>.csv/png (and the last line said "nothing is written until every run has trained")."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    shutil.copytree(trained_cache, cache)
    argv = TINY[:1] + ["1b,5"] + TINY[2:] + ["--out", str(out), "--cache", str(cache)]
    assert main(argv) == 0
    earlier = {p.name: p.read_bytes() for p in out.iterdir()}
    drawn = []
    draw = experiments.synthetic_figure

    def stopped_at_the_second(*args, **kwargs):
        drawn.append(args[0])
        if len(drawn) == 2:
            raise KeyboardInterrupt
        return draw(*args, **kwargs)

    monkeypatch.setattr(experiments, "synthetic_figure", stopped_at_the_second)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 130 and drawn == ["1b", "5"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == earlier


def test_a_stop_while_the_files_are_written_waits_for_the_last(tmp_path, monkeypatch):
    """Ctrl-C / SIGTERM arriving while a figure's files are written is delivered once the last one is whole."""
    paths = [tmp_path / f"f{i}" for i in range(3)]
    replace = os.replace
    for signum in (signal.SIGINT, signal.SIGTERM):
        stops = []

        def stopped_in_the_first(src, dst, signum=signum):  # the stop arrives as the first file is put in place
            if not stops:
                stops.append(signum)
                os.kill(os.getpid(), signum)
            replace(src, dst)

        monkeypatch.setattr(output_guard.os, "replace", stopped_in_the_first)
        previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        try:
            with pytest.raises(KeyboardInterrupt):
                write_together([(p, f"{signum}{i}".encode()) for i, p in enumerate(paths)])
        finally:
            signal.signal(signal.SIGTERM, previous)
        assert [p.read_bytes() for p in paths] == [f"{signum}{i}".encode() for i in range(3)]


@pytest.mark.parametrize("argv, kept", [
    ([], "nothing is written until the run has trained; run it again"),
    (["--figure", "1a"], "the runs that finished are not kept (with --cache DIR they are, and a rerun reuses them)"),
    (["--figure", "parity,1a", "--cache", "CACHE"], "the runs that finished are kept in CACHE and the same command "
                                                     "reuses them"),
])
def test_a_stop_says_what_this_mode_keeps(tmp_path, monkeypatch, capsys, argv, kept):
    # every mode said "with --cache DIR the runs that finished are kept there": a single run refuses --cache, and
    # a paper figure run given --cache was not told where its runs are
    import torchtune_longshort.synthetic.__main__ as cli

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_single_run", stopped)
    monkeypatch.setattr(cli, "_figures", stopped)
    argv = [arg.replace("CACHE", str(tmp_path / "cache")) for arg in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(argv + ["--quick", "--out", str(tmp_path / "out")])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 130 and line.startswith("python -m torchtune_longshort.synthetic: interrupted "
                                                           "(SIGINT): nothing is written until ")
    assert line.endswith(kept.replace("CACHE", str(tmp_path / "cache"))), line
