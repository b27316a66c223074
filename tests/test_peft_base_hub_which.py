"""``longshort-eval peft-base`` on adapters whose recorded base is a hub model of the Hugging Face cache and whose
``adapter_config.json`` names a ``revision`` (PEFT records it and loads the base at that revision): the folder written
must be that revision's snapshot, not ``main``'s. The cache holds two snapshots (``refs/main`` and ``refs/v2``, as
huggingface_hub lays them out); huggingface_hub's own ``snapshot_download(revision=..., local_files_only=True)`` is the
reference."""

from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("peft")

from test_peft_adapter_other_step import yarn_run  # noqa: E402
from test_peft_base_folder import PROG  # noqa: E402
from test_peft_base_hub_cache import NAME, hub_repo, json_only_run, offline_hub, snapshot  # noqa: E402

from torchtune_longshort.eval.peft_base import main  # noqa: E402


def test_the_adapters_recorded_revision_is_the_snapshot_written(tmp_path, capsys, monkeypatch):
    from huggingface_hub import snapshot_download

    base, step2, step3 = yarn_run(tmp_path)
    hub = tmp_path / "hf_cache"
    snapshot(hub_repo(hub), step2, "main")  # main: another checkpoint
    snapshot(hub_repo(hub), base, "v2")  # the revision the adapters were trained on
    offline_hub(monkeypatch, hub, step3, revision="v2")
    monkeypatch.chdir(step3)

    reference = snapshot_download(NAME, revision="v2", cache_dir=str(hub), local_files_only=True)
    assert reference != snapshot_download(NAME, cache_dir=str(hub), local_files_only=True)
    out = tmp_path / "o"
    assert main([str(step3), "--out", str(out)], PROG) == 0
    assert f"{out}: the weights of {reference} as " in capsys.readouterr().out
    assert os.path.samefile(out / "model.safetensors", os.path.join(reference, "model.safetensors"))


def test_a_folder_here_of_the_hub_name_comes_before_the_cache(tmp_path, capsys, monkeypatch):
    """A folder named as the hub model in the folder the command runs in (not above the adapter) is what
    transformers loads (``cached_file``: a folder first, the cache after), so it is the base, not the cache's."""
    from transformers.utils import cached_file

    base, step2, step3 = yarn_run(tmp_path)
    hub = tmp_path / "hf_cache"
    snapshot(hub_repo(hub), step2, "main")  # the cache: another checkpoint
    offline_hub(monkeypatch, hub, step3)
    here = tmp_path / "elsewhere"
    shutil.copytree(base, here / NAME)
    monkeypatch.chdir(here)

    reference = os.path.dirname(cached_file(NAME, "config.json", cache_dir=str(hub)))
    assert os.path.samefile(reference, here / NAME)
    out = tmp_path / "o"
    assert main([str(step3), "--out", str(out)], PROG) == 0
    capsys.readouterr()
    assert os.path.samefile(out / "model.safetensors", os.path.join(reference, "model.safetensors"))


def test_a_hub_base_is_said_cached_only_at_the_adapters_revision(tmp_path, capsys, monkeypatch):
    """The cache holds the base at ``main`` and ``v2``, the adapters record ``v3``: peft-base's refusal said "its
    recorded base <name> (a model of the Hugging Face hub) is no checkpoint folder here ... nor a hub model the
    Hugging Face cache holds at the adapter's revision 'v3'" (the first part asked the cache for ``main``, the second
    for ``v3``). Both now ask for the adapter's revision; huggingface_hub's ``try_to_load_from_cache`` is the
    reference."""
    from huggingface_hub import try_to_load_from_cache
    from test_peft_base_folder import _refused

    from torchtune_longshort.eval.peft_fit import recorded_base_said

    base, step3 = json_only_run(tmp_path)
    hub = tmp_path / "hf_cache"
    repo = snapshot(hub_repo(hub), base, "main")
    snapshot(repo, base, "v2")
    offline_hub(monkeypatch, hub, step3, revision="v3")
    monkeypatch.chdir(step3)

    def cached(revision):
        return isinstance(try_to_load_from_cache(NAME, "config.json", cache_dir=str(hub), revision=revision), str)

    assert cached("main") and cached("v2") and not cached("v3")
    line = _refused(capsys, tmp_path, step3, "--out", tmp_path / "b")
    assert "'v3'" in line and "a model of the Hugging Face hub" not in line, line
    for revision in (None, "main", "v2", "v3"):
        assert ("(a model of the Hugging Face hub)" in recorded_base_said(NAME, None, revision)) == cached(revision)
    shutil.rmtree(repo / "snapshots" / (repo / "refs" / "main").read_text())  # v2 alone: still the hub model at v2
    (repo / "refs" / "main").unlink()
    assert not cached("main") and cached("v2")
    assert "(a model of the Hugging Face hub)" in recorded_base_said(NAME, None, "v2")
