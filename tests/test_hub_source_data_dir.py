"""A hub ``source`` (``allenai/c4``) with ``data_dir: en`` or a relative ``data_files`` names files inside the hub
repository, as ``datasets``' ``HubDatasetModuleFactory`` reads them: the config check refused
"dataset.data_dir='en' does not exist (no such file, folder or glob match)" before the load was ever asked. Which
sources ``datasets`` takes to the hub is asked of ``datasets`` itself, offline (its error says "on the Hub"); a local
folder source keeps its checks."""

from __future__ import annotations

import datasets
import datasets.config
import pytest

from torchtune_longshort.data.data_files import hub_source, named_files


def datasets_goes_to_hub(source: str) -> bool:
    """Whether ``datasets`` looks ``source`` up on the hub (offline: it says it could not reach it there)."""
    try:
        datasets.load_dataset_builder(source, data_dir="en")
    except ConnectionError as e:
        return "on the Hub" in str(e)
    except Exception:
        return False
    return False


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "owner" / "local").mkdir(parents=True)
    (tmp_path / "owner" / "local" / "a.jsonl").write_text('{"text": "x"}\n')
    return tmp_path


@pytest.mark.parametrize("source", ["allenai/c4", "c4", "hf://datasets/allenai/c4", "owner/local", "json", "a/b/c"])
def test_hub_sources_are_those_datasets_reads_from_the_hub(offline, source):
    assert hub_source(source) == datasets_goes_to_hub(source)


@pytest.mark.parametrize("args", [{"data_dir": "en"}, {"data_files": "en/c4-train.00000-of-01024.json.gz"},
                                  {"data_dir": "en", "data_files": ["c4-train.00000-of-01024.json.gz"]},
                                  {"data_files": {"train": "en/*.json.gz"}}])
def test_a_hub_source_s_data_dir_and_relative_data_files_are_not_checked_on_disk(offline, args):
    assert datasets_goes_to_hub("allenai/c4")
    assert named_files({"source": "allenai/c4", "split": "train", **args}, "dataset") == []


def test_a_hub_source_s_absolute_data_files_and_a_local_folder_keep_their_checks(offline):
    missing = offline / "missing.jsonl"  # datasets' resolve_pattern leaves an absolute pattern on the local disk
    with pytest.raises(FileNotFoundError, match="dataset.data_files="):
        named_files({"source": "allenai/c4", "data_files": str(missing)}, "dataset")
    with pytest.raises(FileNotFoundError, match="dataset.data_dir='owner/local/en' does not exist"):
        named_files({"source": "owner/local", "data_dir": "en"}, "dataset")
    assert [f.name for _, f in named_files({"source": "owner/local"}, "dataset")] == ["a.jsonl"]
