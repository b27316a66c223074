"""``longshort-eval run --model hf --model_args pretrained=nope_dir`` (no such folder here, not cached) with the hub
online ended, after transformers' retries, in its ``OSError`` traceback ("We couldn't connect to ...", or "... is not
a valid model identifier"), exit 1. The hub is now asked once before lm-eval starts: unreachable, or without such a
model or revision, it is refused in one line naming ``pretrained=``; a model the hub serves still passes. A local
server stands in for the hub (``HF_ENDPOINT``); transformers' own ``AutoConfig`` against it is the reference."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("lm_eval")

from huggingface_hub import constants as hub_constants  # noqa: E402
from transformers import AutoConfig, LlamaConfig  # noqa: E402

from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _hub(config: bytes):
    class Hub(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self._answer(body=False)

        def do_GET(self):
            self._answer(body=True)

        def _answer(self, body):
            if self.path in ("/myorg/tiny/resolve/main/config.json", f"/myorg/tiny/resolve/{COMMIT}/config.json"):
                self.send_response(200)
                for k, v in (("X-Repo-Commit", COMMIT), ("ETag", '"e1"'), ("Content-Length", str(len(config)))):
                    self.send_header(k, v)
                self.end_headers()
                if body:
                    self.wfile.write(config)
                return
            code = "RevisionNotFound" if self.path.startswith("/myorg/tiny/") else "RepoNotFound"
            self.send_response(404)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def online(tmp_path, monkeypatch):
    """The hub online at a local server serving ``myorg/tiny``'s config.json, an empty cache, run from tmp_path."""
    server = _hub(LlamaConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2).to_json_string().encode())
    monkeypatch.chdir(tmp_path)
    for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setattr(hub_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        hub_constants.ENDPOINT + "/{repo_id}/resolve/{revision}/{filename}")
    yield server
    server.shutdown()


def _check(args):
    check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--model_args", args]))


def test_a_hub_name_the_hub_serves_passes_and_one_it_lacks_is_refused_in_one_line(online, tmp_path):
    _check("pretrained=myorg/tiny")  # transformers loads it from the hub (below): passes, nothing written
    assert not (tmp_path / "hub").exists()
    assert AutoConfig.from_pretrained("myorg/tiny", cache_dir=tmp_path / "ref").vocab_size > 0
    start = (f"--model_args pretrained={{}}: neither a folder in {str(tmp_path)!r}, the folder this command runs in, "
             f"nor a model in the Hugging Face cache ({tmp_path / 'hub'}){{}}, and the hub ({hub_constants.ENDPOINT}) ")
    for args, told in (
            ("pretrained=nope_dir", start.format("nope_dir", "") + "has no model nope_dir (none this login may read)"
             ": --model hf needs a checkpoint folder (give its path) or a hub model's name (`hf auth login` first for "
             "a private one)"),
            ("pretrained=myorg/tiny,revision=v9", start.format("myorg/tiny", " at revision v9") + "has no revision v9 "
             "of myorg/tiny: give a revision it has (a branch, tag or commit), or leave revision= out")):
        name, _, revision = args[len("pretrained="):].partition(",revision=")
        with pytest.raises(OSError):  # transformers cannot load it either
            AutoConfig.from_pretrained(name, revision=revision or None, cache_dir=tmp_path / "ref")
        with pytest.raises(FileNotFoundError) as refused:
            _check(args)
        assert str(refused.value) == told


def test_a_hub_name_with_the_hub_out_of_reach_is_refused_in_one_line(online, tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on: a connection is refused (the reference)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    monkeypatch.setattr(hub_constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(hub_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        hub_constants.ENDPOINT + "/{repo_id}/resolve/{revision}/{filename}")
    with pytest.raises(FileNotFoundError) as refused:
        _check("pretrained=nope_dir")
    said = str(refused.value)
    assert "\n" not in said and said.startswith("--model_args pretrained=nope_dir: neither a folder in ")
    assert f"and the hub (http://127.0.0.1:{port}) cannot be reached (" in said
    assert said.endswith(": --model hf needs a checkpoint folder (give its path), or run again once the hub is "
                         "reachable (or, with the model cached, with HF_HUB_OFFLINE=1)")
    assert not (tmp_path / "hub").exists()

