"""``longshort-eval peft-base STEP --out DIR`` on adapters whose recorded base is a hub model's name
(``base_model_name_or_path: HuggingFaceTB/SmolLM2-135M``, what PEFT records of ``from_pretrained(<that name>)``)
that lies only in the Hugging Face cache: it was refused, "its recorded base ... is no checkpoint folder here (no
config.json)", where transformers loads it offline from the cache. The cache is built as huggingface_hub lays it out
(``models--owner--name/blobs``, ``snapshots/<commit>/`` links, ``refs/main``), and huggingface_hub's own
``snapshot_download(local_files_only=True)`` is the reference for the folder it resolves to."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

pytest.importorskip("peft")

from test_peft_adapter_other_step import yarn_run  # noqa: E402
from test_peft_base_folder import PROG, _refused  # noqa: E402

from torchtune_longshort.eval.peft_base import main  # noqa: E402

NAME = "HuggingFaceTB/SmolLM2-135M"


def _cache(hub, model):
    """``model``'s files in huggingface_hub's cache layout under ``hub``: content-named blobs, a snapshot of links."""
    repo = hub / ("models--" + NAME.replace("/", "--"))
    commit = hashlib.sha1(b"walk").hexdigest()
    (repo / "blobs").mkdir(parents=True), (repo / "refs").mkdir(), (repo / "snapshots" / commit).mkdir(parents=True)
    for f in model.iterdir():
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, blob)
        os.symlink(os.path.relpath(blob, repo / "snapshots" / commit), repo / "snapshots" / commit / f.name)
    (repo / "refs" / "main").write_text(commit)
    return repo


def test_a_hub_recorded_base_in_the_cache_is_the_base_else_refused_naming_it(tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants, snapshot_download

    base, _, step3 = yarn_run(tmp_path)
    hub = tmp_path / "hf_cache"
    repo = _cache(hub, base)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = json.loads((step3 / "adapter" / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = NAME
    (step3 / "adapter" / "adapter_config.json").write_text(json.dumps(config))
    monkeypatch.chdir(step3)  # no folder named as the hub model here

    reference = snapshot_download(NAME, cache_dir=str(hub), local_files_only=True)
    out = tmp_path / "from_cache"
    assert main([str(step3), "--out", str(out)], PROG) == 0
    assert f"{out}: the weights of {reference} as " in capsys.readouterr().out
    assert os.path.samefile(out / "model.safetensors", os.path.join(reference, "model.safetensors"))
    assert (out / "config.json").read_bytes() == (step3 / "config.json").read_bytes()  # the step's RoPE

    shutil.rmtree(repo)  # not in the cache: refused, naming the model and where it was looked for
    line = _refused(capsys, tmp_path, step3, "--out", tmp_path / "b")
    assert f"its recorded base {NAME} " in line and str(hub) in line and f"hf download {NAME}" in line, line


def test_a_hub_base_cached_at_another_revision_is_refused_naming_the_adapters_revision(tmp_path, capsys, monkeypatch):
    """Adapters recorded with ``revision`` (PEFT loads the base at it) whose base the cache holds only at ``main``:
    refused, and the fetch it advised was ``hf download <name>``, which fetches ``main`` again (the rerun was refused
    the same way); it now names the revision, as ``hf download``'s own ``--revision`` takes it."""
    from huggingface_hub import constants

    base, step3 = tmp_path / "start", tmp_path / "run" / "step_3"  # JSON alone: refused before any weight is read
    llama = {"model_type": "llama", "rope_theta": 10000.0, "max_position_embeddings": 512, "hidden_size": 64,
             "num_attention_heads": 4}
    (step3 / "adapter").mkdir(parents=True), base.mkdir()
    (base / "config.json").write_text(json.dumps(llama)), (step3 / "config.json").write_text(json.dumps(llama))
    (step3 / "adapter" / "adapter_config.json").write_text("{}")
    hub = tmp_path / "hf_cache"
    _cache(hub, base)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = json.loads((step3 / "adapter" / "adapter_config.json").read_text())
    config.update(base_model_name_or_path=NAME, revision="v2")
    (step3 / "adapter" / "adapter_config.json").write_text(json.dumps(config))
    monkeypatch.chdir(step3)

    line = _refused(capsys, tmp_path, step3, "--out", tmp_path / "b")
    assert f"hf download {NAME} --revision v2 " in line and "'v2'" in line, line
    assert not (tmp_path / "b").exists()
