"""A checkpoint folder's content digest (``CheckpointFolder.content_digest``, the identity a LoRA resume and a moved
start compare) samples every tensor: two folders that differ only in a tensor in the middle of the file (a LoRA
merged into q/k only) differ. The first formula hashed each file's first and last MiB only: the reference that the
gap was real is that it gives both folders one digest. A recipe state that holds a digest of that formula (saved
before the ``v2:`` mark) resumes as before."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import save_file

from torchtune_longshort.models.checkpoint_digest import first_content_digest
from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
from torchtune_longshort.training.model_setup import LoRAInfo
from torchtune_longshort.training.moved_sources import _start_note
from torchtune_longshort.training.recipe_checkpoints import check_start_unchanged

CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 2048, "hidden_size": 128,
          "intermediate_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
          "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "tie_word_embeddings": False}


def _folder(path, delta=0.0):
    """A two-layer Llama folder of 5.5 MiB in float32, laid out as safetensors writes a real one (by name): the head
    and the embedding (1 MiB each) first, then layer 0, layer 1 (1.75 MiB), the final norm; ``delta`` added to layer
    0's q_proj (a merged LoRA), more than a MiB from either end."""
    g = torch.Generator().manual_seed(0)
    sd = {"model.embed_tokens.weight": torch.randn(2048, 128, generator=g),
          "lm_head.weight": torch.randn(2048, 128, generator=g), "model.norm.weight": torch.ones(128)}
    for i in range(2):
        for name, shape in (("self_attn.q_proj", (128, 128)), ("self_attn.k_proj", (128, 128)),
                            ("self_attn.v_proj", (128, 128)), ("self_attn.o_proj", (128, 128)),
                            ("mlp.gate_proj", (1024, 128)), ("mlp.up_proj", (1024, 128)),
                            ("mlp.down_proj", (128, 1024)), ("input_layernorm", (128,)),
                            ("post_attention_layernorm", (128,))):
            sd[f"model.layers.{i}.{name}.weight"] = torch.randn(*shape, generator=g)
    sd["model.layers.0.self_attn.q_proj.weight"] += delta
    path.mkdir()
    (path / "config.json").write_text(json.dumps(CONFIG))
    save_file(sd, str(path / "model.safetensors"))
    return CheckpointFolder.open(path)


def test_folders_that_differ_only_in_a_middle_tensor_differ(tmp_path):
    base, merged = _folder(tmp_path / "base"), _folder(tmp_path / "merged", delta=1e-2)
    old = [first_content_digest(f.path / "config.json", f.weight_files) for f in (base, merged)]
    assert old[0] == old[1]  # the reference: the first formula did not see the merged q_proj
    assert base.content_digest() != merged.content_digest()
    assert base.content_digest().startswith("v2:") and merged.content_digest().startswith("v2:")
    shutil.copytree(base.path, tmp_path / "copy")  # a copy (other times, other path) keeps the digest
    assert CheckpointFolder.open(tmp_path / "copy").content_digest() == base.content_digest()


def test_a_state_saved_with_the_first_formula_resumes_as_before(tmp_path):
    start = _folder(tmp_path / "start")
    saved = first_content_digest(start.path / "config.json", start.weight_files)  # what states held before v2
    state = {"start_digest": saved, "step": 2}
    assert check_start_unchanged(state, start.path, start.path, LoRAInfo(rank=2)) == start.content_digest()
    assert _start_note("/a/start", start.path, state, tmp_path) is None  # a moved start of that run resumes
    config = (start.path / "config.json").read_text()
    (start.path / "config.json").write_text(config.replace("1e-05", "1e-06"))  # another start: refused as before
    with pytest.raises(ValueError, match=r"is not the one step 2's adapters were trained on"):
        check_start_unchanged(state, start.path, start.path, LoRAInfo(rank=2))
    assert "are not those of the start checkpoint" in _start_note("/a/start", start.path, state, tmp_path)


def test_a_moved_start_or_tokenizer_counts_only_where_it_holds_what_the_run_read(tmp_path):
    """``moved_sources`` alone, by hand-made folders: a start moved whole (its v2 digest the saved one) moves every
    key that named it; a key that named something else before is no move; a start folder that is gone or holds no
    checkpoint, a state with no digest, a tokenizer gone or under another file name are refused (not moved)."""
    from torchtune_longshort.training.moved_sources import START, TOKENIZER, _tokenizer_note, moved_sources

    start, step = _folder(tmp_path / "b_start"), tmp_path / "run" / "step_1"
    step.mkdir(parents=True)
    (step / "tokenizer.model").write_bytes(b"ids")
    (tmp_path / "b_tok").mkdir()
    (tmp_path / "b_tok" / "tokenizer.model").write_bytes(b"ids")
    state = {"start_digest": start.content_digest()}
    old = {START: "/a/start", TOKENIZER: "/a/tok", "model.checkpoint_dir": "/a/start", "other": "/a/else"}
    new = {START: str(start.path), TOKENIZER: str(tmp_path / "b_tok"), "model.checkpoint_dir": str(start.path),
           "other": str(start.path)}
    changes, notes = moved_sources(state, step)(old, new)
    assert sorted(changes) == sorted([(START, "/a/start", str(start.path)), (TOKENIZER, "/a/tok", new[TOKENIZER]),
                                      ("model.checkpoint_dir", "/a/start", str(start.path))]) and notes == {}
    assert _start_note("/a/start", tmp_path / "gone", state, step) == ""  # no checkpoint there: refused as it was
    assert "holds no digest" in _start_note("/a/start", start.path, {}, step)
    assert _tokenizer_note("/a/tok", tmp_path / "gone", state, step) == ""
    (tmp_path / "b_tok" / "other.model").write_bytes(b"ids")  # the same bytes under another file name
    renamed = _tokenizer_note("/a/tok/tokenizer.model", tmp_path / "b_tok" / "other.model", state, step)
    assert "are not the copies in step_1" in renamed
    (tmp_path / "b_tok" / "tokenizer.model").write_bytes(b"idz")  # other bytes, same size and time as the copy
    os.utime(tmp_path / "b_tok" / "tokenizer.model", ns=(0, (step / "tokenizer.model").stat().st_mtime_ns))
    assert _tokenizer_note("/a/tok", tmp_path / "b_tok", state, step)
    (tmp_path / "b_tok" / "tokenizer.model").write_bytes(b"ids")
    (tmp_path / "b_tok" / "tokenizer.json").write_text("{}")  # an id file the step has no copy of
    assert _tokenizer_note("/a/tok", tmp_path / "b_tok", state, step)
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "README.md").write_text("no id file")  # nothing to compare: not the run's tokenizer
    assert _tokenizer_note("/a/tok", tmp_path / "none", state, step)


def test_one_byte_in_a_tensors_middle_or_a_name_in_the_header_changes_the_digest(tmp_path):
    """The v2 digest reads each tensor's middle block and the safetensors header: a folder that differs from another
    in one byte at the middle of layer 0's q_proj, or in one tensor's name (its bytes the same), has another digest.
    The first formula, reference: sha256 over config.json and the weight file's name, size, first and last MiB."""
    import hashlib
    import struct

    base = _folder(tmp_path / "base")
    data = (base.path / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    b, e = json.loads(data[8:8 + n])["model.layers.0.self_attn.q_proj.weight"]["data_offsets"]
    middle = bytearray(data)
    middle[8 + n + (b + e) // 2] ^= 1
    renamed = data.replace(b"model.norm.weight", b"model.norm.weighx")
    for name, content in (("middle", bytes(middle)), ("renamed", renamed)):
        shutil.copytree(base.path, tmp_path / name)
        (tmp_path / name / "model.safetensors").write_bytes(content)
        assert CheckpointFolder.open(tmp_path / name).content_digest() != base.content_digest(), name
    mib = 1 << 20
    h = hashlib.sha256((base.path / "config.json").read_bytes())
    h.update(f"model.safetensors:{len(data)}".encode() + data[:mib] + data[-mib:])
    assert first_content_digest(base.path / "config.json", base.weight_files) == h.hexdigest()[:16]
