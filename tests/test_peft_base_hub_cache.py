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


def hub_repo(hub):
    """The folder of :data:`NAME` in huggingface_hub's cache layout under ``hub``."""
    return hub / ("models--" + NAME.replace("/", "--"))


def snapshot(repo, model, ref="main"):
    """``model``'s files as a snapshot of ``repo`` (content-named blobs and relative links) that ``refs/<ref>`` names,
    as huggingface_hub lays out its cache; returns ``repo``."""
    commit = hashlib.sha1(ref.encode()).hexdigest()
    (repo / "blobs").mkdir(parents=True, exist_ok=True), (repo / "refs").mkdir(exist_ok=True)
    (repo / "snapshots" / commit).mkdir(parents=True)
    for f in (f for f in model.iterdir() if f.is_file()):
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, blob)
        os.symlink(os.path.relpath(blob, repo / "snapshots" / commit), repo / "snapshots" / commit / f.name)
    (repo / "refs" / ref).write_text(commit)
    return repo


def offline_hub(monkeypatch, hub, step, **record):
    """huggingface_hub offline with its cache at ``hub``, and ``step``'s adapters recording :data:`NAME` as their
    base (and ``record``'s other keys, e.g. ``revision``)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = step / "adapter" / "adapter_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    config.update(base_model_name_or_path=NAME, **record)
    path.write_text(json.dumps(config))


def json_only_run(tmp_path):
    """A base folder and a LoRA step of JSON alone (a llama config.json each; no weights): refused before any weight
    is read."""
    base, step3 = tmp_path / "start", tmp_path / "run" / "step_3"
    llama = {"model_type": "llama", "rope_theta": 10000.0, "max_position_embeddings": 512, "hidden_size": 64,
             "num_attention_heads": 4}
    (step3 / "adapter").mkdir(parents=True), base.mkdir()
    (base / "config.json").write_text(json.dumps(llama)), (step3 / "config.json").write_text(json.dumps(llama))
    return base, step3


def test_a_hub_recorded_base_in_the_cache_is_the_base_else_refused_naming_it(tmp_path, capsys, monkeypatch):
    from huggingface_hub import snapshot_download

    base, _, step3 = yarn_run(tmp_path)
    hub = tmp_path / "hf_cache"
    repo = snapshot(hub_repo(hub), base)
    offline_hub(monkeypatch, hub, step3)
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
    base, step3 = json_only_run(tmp_path)
    hub = tmp_path / "hf_cache"
    snapshot(hub_repo(hub), base)  # main only
    offline_hub(monkeypatch, hub, step3, revision="v2")
    monkeypatch.chdir(step3)

    line = _refused(capsys, tmp_path, step3, "--out", tmp_path / "b")
    assert f"hf download {NAME} --revision v2 " in line and "'v2'" in line, line
    assert not (tmp_path / "b").exists()
