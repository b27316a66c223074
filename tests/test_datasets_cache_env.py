"""A ``datasets``-backed source (a torchtune builder, ``corpus.hf_text``) whose cache ``datasets`` cannot make or
write (HOME naming a file, a read-only HF_HOME) is refused naming that cache and its variable: it read
"dataset (books.json) could not be loaded: NotADirectoryError: [Errno 20] Not a directory: '<home>/.cache'", naming
neither HF_HOME nor HF_DATASETS_CACHE."""

import json

import datasets.config
import pytest

from torchtune_longshort.data.torchtune_datasets import build_torchtune_dataset


@pytest.mark.parametrize("given", [True, False])
def test_an_unwritable_datasets_cache_is_named_with_its_variable(given, tmp_path, monkeypatch):
    from torchtune.datasets import text_completion_dataset

    books = tmp_path / "books.json"
    books.write_text(json.dumps({"text": "def f(x):\n    return x\n"}) + "\n")
    home = tmp_path / "home_is_a_file"
    home.write_text("")
    cache = home / ".cache" / "huggingface"
    # the folders datasets read from the environment at its import (HOME=<a file> there), as datasets.config has them
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache / "datasets")
    monkeypatch.setattr(datasets.config, "HF_MODULES_CACHE", cache / "modules")
    if given:
        monkeypatch.setenv("HF_DATASETS_CACHE", str(cache / "datasets"))
    else:
        monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    args = {"source": "json", "data_files": str(books), "column": "text", "split": "train"}
    with pytest.raises(ValueError) as e:
        build_torchtune_dataset(text_completion_dataset, None, args)
    said = str(e.value)
    assert said.startswith(f"dataset ({books}) could not be loaded: datasets cannot use its folder "), said
    assert f"HF_DATASETS_CACHE='{cache / 'datasets'}'" in said and f"Not a directory: '{home / '.cache'}'" in said
    assert said.endswith(("set HF_DATASETS_CACHE" if given else "set HF_HOME (or HF_DATASETS_CACHE)")
                         + " to a folder you can write"), said
    assert home.read_text() == ""


def test_a_hub_source_whose_token_file_cannot_be_read_names_hf_home(tmp_path, monkeypatch):
    # HOME=<a file>, online: huggingface_hub reads <HF_HOME>/token before a hub request and raised NotADirectoryError,
    # which read as a data file gone mid-run: "hf_text(...): <home>/.cache/huggingface/token can no longer be read
    # (Not a directory; read as the run went on)", the eval adding "(or skip such records: ...)"
    import huggingface_hub
    from huggingface_hub import constants

    from torchtune_longshort.data.document_source import DocumentSource
    from torchtune_longshort.data.text_files import DataSourceError
    from torchtune_longshort.eval.tasks.common.long_text import TaskDataError, readable_texts

    home = tmp_path / "home_is_a_file"
    home.write_text("")
    hub_home = home / ".cache" / "huggingface"
    monkeypatch.setattr(constants, "HF_HOME", str(hub_home))  # as huggingface_hub read them at its import
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(hub_home / "token"))
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)

    def hub_documents():
        huggingface_hub.get_token()  # what a streamed hub source does before its first request
        yield "never"

    source = DocumentSource(hub_documents, "hf_text('emozilla/pg19-test', split='test')")
    with pytest.raises(DataSourceError) as e:
        list(source())
    said = str(e.value)
    assert f"huggingface_hub cannot use its folder HF_HOME='{hub_home}'" in said, said
    assert f"Not a directory: '{hub_home / 'token'}'" in said and said.endswith("set HF_HOME to a folder you can write")
    with pytest.raises(TaskDataError) as e:
        list(readable_texts(source(), "or skip such records: --metadata '{\"ppl_skip_bad_records\": true}'"))
    assert "skip" not in str(e.value) and "HF_HOME" in str(e.value)  # no skipping passes a source that failed
    # a data set the eval loads whole (BABILong, LongBench-E): its reason said "the Hugging Face hub could not be
    # reached or does not have it (NotADirectoryError: ... token)"
    from torchtune_longshort.eval.tasks.common.unavailable import hub_failure_reason

    with pytest.raises(NotADirectoryError) as raised:
        huggingface_hub.get_token()
    said = hub_failure_reason("'RMT-team/babilong-1k-samples'", raised.value, "for local data pass babilong_data_dir")
    assert said == (f"data 'RMT-team/babilong-1k-samples' unavailable: huggingface_hub cannot use its folder "
                    f"HF_HOME='{hub_home}' (NotADirectoryError: Not a directory: '{hub_home / 'token'}'); set HF_HOME "
                    "to a folder you can write; for local data pass babilong_data_dir"), said
