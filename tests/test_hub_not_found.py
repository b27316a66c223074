"""A hub that answers that it has no such dataset (HTTP 404 from a mirror or a wrong ``HF_ENDPOINT``, or the hub's own
"doesn't exist on the Hub") is refused in one line naming the dataset, that answer and the way on, as the hub out of
reach is (``hf_loading.load_failure``): at build, on a first read unchecked (``check_first=False``), and in the eval
pack's reason. The reference: real ``datasets`` and ``huggingface_hub`` asking a real HTTP server that answers 404
(``python -m http.server`` over an empty folder), in a process of their own with the hub online."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import datasets
import pytest

from torchtune_longshort.data import corpus

ROOT = Path(__file__).resolve().parents[1]

# Asked in a process with the hub online (the tests' conftest puts it offline): the line each reader gives.
ASK = """
import json
from torchtune_longshort.data import corpus
from torchtune_longshort.eval.tasks.common.long_text import texts_from_metadata
said = {}
for key, read in (("build", lambda: corpus.hf_text("emozilla/pg19-test")),
                  ("read", lambda: next(iter(corpus.hf_text("emozilla/pg19-test", check_first=False)()))),
                  ("eval", lambda: next(iter(texts_from_metadata(
                      {"ppl_source": "hf", "ppl_dataset_path": "emozilla/pg19-test"}, "ppl"))))):
    try:
        read()
    except Exception as e:
        said[key] = [type(e).__name__, str(e)]
print(json.dumps(said))
"""


@pytest.fixture
def hub_404(tmp_path):
    """An HTTP server that answers 404 to every request (an empty folder served), and its address."""
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *a: None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_hub_answering_404_is_refused_in_one_line_naming_the_fix(hub_404, tmp_path):
    """HF_ENDPOINT=<a server answering 404> tune run ... dataset.source=emozilla/pg19-test gave datasets' own
    "Couldn't find any data file at <cwd>/emozilla/pg19-test. Couldn't find 'emozilla/pg19-test' on the Hugging Face
    Hub either: LocalEntryNotFoundError: ... Please check your connection ...", naming no fix (longshort-eval's
    reason the same words)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    env.update(HF_ENDPOINT=hub_404, HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(ROOT), HF_HUB_ETAG_TIMEOUT="5")
    out = subprocess.run([sys.executable, "-c", ASK], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    said = json.loads(out.stdout.strip().splitlines()[-1])
    answer = (f"cannot be loaded: the hub at HF_ENDPOINT={hub_404} answered that it has no such dataset (HTTP 404 for "
              f"{hub_404}/datasets/emozilla/pg19-test/")
    build_kind, build = said["build"]
    assert build_kind in ("ValueError", "DataSourceError") and "\n" not in build, said  # a ValueError: exit 2
    assert build.startswith("dataset 'emozilla/pg19-test' (name None, split 'train') " + answer), build
    assert build.endswith("check the name's spelling (dataset.source), that HF_ENDPOINT names the hub you mean, or "
                          "read a copy of it from local files (source: json, data_files: ...)"), build
    assert "check your connection" not in build.lower()
    assert said["read"] == ["DataSourceError", build]  # unchecked: the first read says it (exit 2, nothing written)
    eval_kind, reason = said["eval"]
    # led by the user's key, as a torn line's and a bad record's: it started "data set 'emozilla/pg19-test' ..."
    assert eval_kind == "TaskDataError" and reason.startswith("ppl_dataset_path in --metadata: data set "
                                                              "'emozilla/pg19-test' (name None, split 'test') "
                                                              + answer), reason
    assert reason.endswith("(ppl_dataset_path in --metadata), that HF_ENDPOINT names the hub you mean, or read a "
                           "copy of it from local files (ppl_data_files=<path or glob> in --metadata, or ppl_source=stdlib)"), reason


def test_the_hubs_own_not_found_is_worded_so_and_a_missing_revision_is_not(monkeypatch):
    """The Hugging Face hub's own answer (datasets' DatasetNotFoundError "doesn't exist on the Hub or cannot be
    accessed": a private one too) gets the same line, with the token; a revision the dataset lacks keeps datasets'
    words (its dataset exists)."""
    from datasets.exceptions import DatasetNotFoundError

    said = {}

    def missing(*args, **kwargs):
        raise DatasetNotFoundError(said["error"])

    monkeypatch.setattr(datasets, "load_dataset", missing)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    said["error"] = "Dataset 'emozila/pg19-test' doesn't exist on the Hub or cannot be accessed."
    with pytest.raises(ValueError) as err:
        corpus.hf_text("emozila/pg19-test")
    assert str(err.value) == (
        "dataset 'emozila/pg19-test' (name None, split 'train') cannot be loaded: the Hugging Face hub "
        "(https://huggingface.co) answered that it has no such dataset (DatasetNotFoundError: Dataset "
        "'emozila/pg19-test' doesn't exist on the Hub or cannot be accessed.): check the name's spelling "
        "(dataset.source) (a private or gated one: your token, HF_TOKEN), that HF_ENDPOINT names the hub you mean, "
        "or read a copy of it from local files (source: json, data_files: ...)")
    said["error"] = "Revision 'v9' doesn't exist for dataset 'emozilla/pg19-test' on the Hub."
    with pytest.raises(DatasetNotFoundError, match="^Revision 'v9' doesn't exist"):
        corpus.hf_text("emozilla/pg19-test", revision="v9")


@pytest.mark.parametrize("code", ["RepoNotFound", "EntryNotFound", "RevisionNotFound"])
def test_a_404_for_a_file_or_revision_is_no_missing_dataset(code):
    """huggingface_hub's own reading of the hub's 404 the reference: a repository it calls missing is a missing
    dataset; a file (RemoteEntryNotFoundError) or a revision the dataset lacks is not, though each is raised from the
    HTTP error of a 404 (which the chain's walk took for the dataset's: "answered that it has no such dataset")."""
    import httpx2
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
    from huggingface_hub.utils import hf_raise_for_status

    from torchtune_longshort.data.hf_loading import hub_answered_missing

    url = "https://huggingface.co/datasets/emozilla/pg19-test/resolve/v9/data/x.parquet"
    response = httpx2.Response(404, headers={"X-Error-Code": code}, request=httpx2.Request("GET", url))
    with pytest.raises((RepositoryNotFoundError, EntryNotFoundError, RevisionNotFoundError)) as err:
        hf_raise_for_status(response)
    missing_repo = isinstance(err.value, RepositoryNotFoundError)
    assert missing_repo == (code == "RepoNotFound")
    assert (hub_answered_missing(err.value) == f"HTTP 404 for {url}") == missing_repo
    assert (hub_answered_missing(err.value) is None) == (not missing_repo)
