"""longshort-cp, the copy of a shipped config: its refusals in one line (a missing or file-named folder, a dash, no
destination, --list with a copy, a link loop), tune cp's flags and its way with symbolic links (written through, as
tune cp does), the shipped configs found from a checkout, and a listing whose reader left. Split from
test_configs.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_longshort_cp_refuses_a_destination_in_a_missing_folder_in_one_line(tmp_path, capsys):
    # `longshort-cp NAME nodir/x.yaml` printed a FileNotFoundError traceback from shutil; now one line naming the
    # folder, exit 2, and nothing created.
    from torchtune_longshort.configs_cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "nodir" / "x.yaml")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.count("\n") == 1 and "nodir" in err and "mkdir -p" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
    # a destination folder that is a file was told to be made (`mkdir -p x.yaml`, which fails)
    (tmp_path / "x.yaml").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "x.yaml" / "sub.yaml")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "x.yaml is a file, not a folder" in err and "mkdir" not in err, err
    assert (tmp_path / "x.yaml").read_text() == "mine"
    # `DEST/` names a folder, as cp reads it: a missing one wrote a FILE named DEST
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "nd") + "/"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "nd does not exist" in err and "mkdir -p" in err, err
    assert not (tmp_path / "nd").exists()
    (tmp_path / "nd").mkdir()
    assert main(["tiny/longshort_stdlib.yaml", str(tmp_path / "nd") + "/"]) == 0
    assert (tmp_path / "nd" / "longshort_stdlib.yaml").is_file()


def test_longshort_cp_refuses_a_device_or_pipe_for_a_destination(tmp_path, capsys):
    # `longshort-cp NAME /dev/null` wrote /dev/null.yaml (tune cp does the same); `--force` onto a named pipe
    # replaced the user's pipe by a file
    from torchtune_longshort.configs_cli import main

    import socket

    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    (tmp_path / "l.yaml").symlink_to(fifo)  # a link to the pipe is the pipe; so is `p`, which names p.yaml
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s.yaml"))
    stray = "/dev/null.yaml"  # what a regression writes (as root): removed again, so it cannot outlive this test
    assert not os.path.lexists(stray)
    try:
        for dest, flags, word in (("/dev/null", [], "character device"), (str(fifo), ["--force"], "named pipe"),
                                  (str(tmp_path / "l.yaml"), ["-n"], "named pipe"),
                                  (str(tmp_path / "p"), ["-n"], "named pipe"),
                                  (str(tmp_path / "s.yaml"), [], "socket")):
            with pytest.raises(SystemExit) as exit_info:
                main(["tiny/longshort_stdlib.yaml", dest, *flags])
            err = capsys.readouterr().err
            dest = dest if dest != str(tmp_path / "p") else str(fifo)
            assert exit_info.value.code == 2 and err.count("\n") == 1 and f"{dest} is a {word}" in err, err
        assert not os.path.lexists(stray)
    finally:
        sock.close()
        if os.path.lexists(stray):
            os.unlink(stray)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.yaml", "p.yaml", "s.yaml"] and fifo.is_fifo()


def test_longshort_cp_refuses_a_link_to_nothing_without_force(tmp_path, capsys):
    # `longshort-cp NAME link.yaml`, link.yaml a symbolic link whose target is gone: exists() is False for it, so the
    # copy replaced the user's link with a file, without --force
    from torchtune_longshort.configs_cli import main

    link = tmp_path / "link.yaml"
    link.symlink_to(tmp_path / "gone.yaml")
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(link)])
    assert exit_info.value.code == 2 and "exists (a symbolic link to " in capsys.readouterr().err
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["link.yaml"]


def test_longshort_cp_takes_tune_cps_flags(tmp_path, capsys):
    # `longshort-cp NAME runs/a/run.yaml --make-parents` and `-n` (tune cp's flags) were "unrecognized arguments",
    # and `longshort-cp NAME my_run` wrote a file without .yaml (tune cp writes my_run.yaml)
    from torchtune_longshort.configs_cli import config_path, main

    shipped = config_path("tiny/longshort_stdlib.yaml").read_text()
    assert main(["tiny/longshort_stdlib.yaml", str(tmp_path / "runs" / "a" / "run.yaml"), "--make-parents"]) == 0
    assert (tmp_path / "runs" / "a" / "run.yaml").read_text() == shipped
    assert main(["tiny/longshort_stdlib.yaml", str(tmp_path / "my_run")]) == 0
    assert (tmp_path / "my_run.yaml").read_text() == shipped and not (tmp_path / "my_run").exists()
    (tmp_path / "mine.yaml").write_text("mine")
    capsys.readouterr()
    assert main(["tiny/longshort_stdlib.yaml", str(tmp_path / "mine.yaml"), "-n"]) == 0
    assert "not overwriting" in capsys.readouterr().out and (tmp_path / "mine.yaml").read_text() == "mine"
    with pytest.raises(SystemExit) as exit_info:  # without the flag: one line naming it, nothing made
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "new" / "run.yaml")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--make-parents" in err and not (tmp_path / "new").exists(), err


def test_longshort_cp_list_refuses_a_copy_asked_with_it(tmp_path, capsys):
    # `longshort-cp --list tiny/longshort_stdlib.yaml run.yaml` listed and copied nothing, exit 0 (an audit)
    from torchtune_longshort.configs_cli import main

    for extra in (["tiny/longshort_stdlib.yaml", str(tmp_path / "run.yaml")], ["--force"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["--list", *extra])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and "--list takes nothing else (" in err, err
    assert not any(tmp_path.iterdir())


def test_shipped_configs_are_found_where_the_package_is_imported_from_its_checkout(tmp_path, monkeypatch, capsys):
    # A checkout's package shadowing a non-editable install (`python -m torchtune_longshort.study --config
    # configs/study/cpu_small.yaml` run in the checkout), or PYTHONPATH=. with no install, has no data package
    # torchtune_longshort.configs: every shipped name (the study configs' `recipe_config: tiny/...`, longshort-cp,
    # the figures' --config) ended in a ModuleNotFoundError traceback. The checkout's configs/ is that package's source.
    from importlib import resources

    import torchtune_longshort.configs_cli as cli

    files = resources.files

    def not_installed(package):
        if package == "torchtune_longshort.configs":
            raise ModuleNotFoundError(f"No module named {package!r}")
        return files(package)

    monkeypatch.setattr(cli.resources, "files", not_installed)
    assert cli.shipped_configs() == sorted(
        str(p.relative_to(REPO / "configs")) for p in (REPO / "configs").rglob("*.yaml"))
    assert cli.resolve_config("tiny/longshort_stdlib.yaml", tmp_path, "--config") == (
        REPO / "configs" / "tiny" / "longshort_stdlib.yaml")
    # a checkout's path, as the reports record the commands run there (`--config configs/study/...`): from a wheel it
    # was "neither a file ... (e.g. tiny/longshort_stdlib.yaml)", a recipe config offered for a study
    assert cli.resolve_config("configs/study/cpu_small.yaml", tmp_path, "--config") == (
        REPO / "configs" / "study" / "cpu_small.yaml")
    with pytest.raises(ValueError, match=r"e\.g\. study/"):
        cli.resolve_config("configs/study/cpu_smal.yaml", tmp_path, "--config")
    assert cli.main(["study/cpu_small.yaml", str(tmp_path)]) == 0
    assert (tmp_path / "cpu_small.yaml").read_text() == (REPO / "configs" / "study" / "cpu_small.yaml").read_text()
    # neither installed nor beside the package: one line, exit 2
    monkeypatch.setattr(cli, "SOURCE_CONFIGS", tmp_path / "no_configs")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--list"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "pip install ." in err, err
    with pytest.raises(ValueError, match="neither a file"):
        cli.resolve_config("tiny/longshort_stdlib.yaml", tmp_path, "--config")


def test_a_listing_whose_reader_left_ends_quietly_and_another_broken_pipe_keeps_its_traceback():
    # `longshort-cp --list | head -1`: the reader gone, the listing's write (or the exit's flush) raised
    # BrokenPipeError: "Exception ignored ... BrokenPipeError" on stderr. Now no output, exit 141 (128 + SIGPIPE).
    import os
    import subprocess
    import sys

    from torchtune_longshort.refusals import quiet_when_the_reader_leaves

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader left before the first line
    try:
        p = subprocess.run([str(Path(sys.executable).parent / "longshort-cp"), "--list"], stdout=write_end,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (p.returncode, p.stderr) == (141, "")

    def child_pipe_broke():
        raise BrokenPipeError("a child process's stdin")

    with pytest.raises(BrokenPipeError):  # this process's stdout is fine: not the reader leaving
        quiet_when_the_reader_leaves(child_pipe_broke)()


def test_longshort_cp_refuses_a_dash_for_a_destination(tmp_path, monkeypatch, capsys):
    # `longshort-cp NAME -` (standard output, by cat's habit) wrote a file named -.yaml in the working folder, as
    # `tune cp NAME -` does; it is refused in one line, nothing written
    from torchtune_longshort.configs_cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", "-"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "'-' is not standard output" in err, err
    assert not any(tmp_path.iterdir())
    assert main(["tiny/longshort_stdlib.yaml", "./-"]) == 0 and (tmp_path / "-.yaml").is_file()  # asked by its path


def test_longshort_cp_refuses_a_name_without_a_destination_in_one_line(tmp_path, monkeypatch, capsys):
    # `longshort-cp tiny/longshort_stdlib.yaml` (no DEST) ended in a TypeError traceback, exit 1; tune cp says
    # 'the following arguments are required: destination', exit 2 by argparse
    from torchtune_longshort.configs_cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert err == "longshort-cp: error: give a destination: longshort-cp NAME DEST\n"
    assert not any(tmp_path.iterdir())


def _linked_folder(folder, link, target, target_there):
    """``folder`` made, holding ``link`` -> ``target`` (relative), the target a user's file ("mine") or absent."""
    folder.mkdir()
    if target_there:
        (folder / target).write_text("mine\n")
    (folder / link).symlink_to(target)
    return folder


@pytest.mark.parametrize("target_there", [True, False], ids=["link_to_a_file", "link_to_nothing"])
def test_longshort_cp_force_writes_through_a_link_as_tune_cp_does(tmp_path, capsys, target_there):
    # `ln -s real.yaml l.yaml; longshort-cp tiny/longshort_stdlib.yaml l.yaml --force` replaced the user's link with a
    # plain file and left real.yaml stale; `tune cp llama2/7B_full l.yaml` writes the file the link points to, the link
    # kept (walked): its copy is shutil.copy(src, destination) (torchtune/_cli/cp.py), the reference, run here on its
    # own folder (importing torchtune for tune cp itself takes seconds)
    import shutil

    from torchtune_longshort.configs_cli import config_path, main

    def made(tool, argv):
        folder = _linked_folder(tmp_path / tool, "l.yaml", "real.yaml", target_there)
        argv(str(folder / "l.yaml"))
        return folder, (folder / "l.yaml").is_symlink() and os.readlink(folder / "l.yaml"), sorted(os.listdir(folder))

    source = config_path("tiny/longshort_stdlib.yaml")
    _, *tune_seen = made("tune", lambda dest: shutil.copy(source, dest))
    ours_folder, *ours_seen = made("ours", lambda dest: main(["tiny/longshort_stdlib.yaml", dest, "--force"]))
    assert ours_seen == tune_seen == ["real.yaml", ["l.yaml", "real.yaml"]]
    written = (ours_folder / "real.yaml").read_text()
    assert written == (tmp_path / "tune" / "real.yaml").read_text() == source.read_text()
    assert "through the link, into" in capsys.readouterr().out
    if target_there:  # without --force: refused, naming the link's file, nothing written
        (ours_folder / "real.yaml").write_text("mine\n")
        with pytest.raises(SystemExit) as exit_info:
            main(["tiny/longshort_stdlib.yaml", str(ours_folder / "l.yaml")])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"a symbolic link to {ours_folder / 'real.yaml'}" in err, err
        assert (ours_folder / "real.yaml").read_text() == "mine\n"


@pytest.mark.parametrize("target_there", [False, True])
def test_longshort_cp_no_clobber_writes_through_a_link_to_nothing_as_tune_cp_does(tmp_path, capsys, target_there):
    # `ln -s gone.yaml d.yaml; longshort-cp tiny/longshort_stdlib.yaml d.yaml -n` said 'exists, not overwriting', where
    # `tune cp -n` writes gone.yaml through the link (walked): its rule, `if args.no_clobber and destination.exists()`
    # (leave it) else shutil.copy (torchtune/_cli/cp.py), the reference, run here on its own folder
    import shutil

    from torchtune_longshort.configs_cli import config_path, main

    def made(tool, argv):
        folder = _linked_folder(tmp_path / tool, "d.yaml", "gone.yaml", target_there)
        assert argv(folder / "d.yaml") == 0
        texts = {p.name: p.read_text() for p in folder.iterdir() if p.exists()}
        return (folder / "d.yaml").is_symlink(), sorted(os.listdir(folder)), texts

    source = config_path("tiny/longshort_stdlib.yaml")
    tune_seen = made("tune", lambda dest: 0 if dest.exists() else shutil.copy(source, dest) and 0)
    ours_seen = made("ours", lambda dest: main(["tiny/longshort_stdlib.yaml", str(dest), "-n"]))
    assert ours_seen == tune_seen
    assert tune_seen[2]["gone.yaml"] == ("mine\n" if target_there else source.read_text())
    out = capsys.readouterr().out
    assert ("not overwriting" in out) == target_there, out


def test_longshort_cp_refuses_a_link_loop_in_one_line(tmp_path, capsys):
    from torchtune_longshort.configs_cli import main

    (tmp_path / "a.yaml").symlink_to("b.yaml")
    (tmp_path / "b.yaml").symlink_to("a.yaml")
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "a.yaml"), "--force"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "a symbolic link in a loop" in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml"]
    assert all(p.is_symlink() for p in tmp_path.iterdir())


@pytest.mark.parametrize("argv, said", [(["", "run.yaml"], "name='' is empty: give a shipped config"),
                                        ([" ", "run.yaml"], "name=' ' is empty: give a shipped config"),
                                        (["tiny/longshort_stdlib.yaml", ""],
                                         "argument destination: '' is an empty path")])
def test_longshort_cp_refuses_an_empty_name_or_destination(argv, said, tmp_path, monkeypatch, capsys):
    # `longshort-cp "" run.yaml` (an unset $NAME) listed the configs and exited 0, copying nothing
    from torchtune_longshort.configs_cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.err.count("\n") == 1 and said in captured.err, captured.err
    assert captured.out == "" and not any(tmp_path.iterdir())
