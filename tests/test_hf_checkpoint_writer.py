"""The checkpoint writer's shards and index against huggingface_hub's ``save_torch_state_dict`` (an independent writer
of the same format): byte for byte when sharded; one shard keeps the sharded name and an index (the folder format),
where the hub writes ``model.safetensors`` alone."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import save_torch_state_dict
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from torchtune_longshort.models import load_hf_checkpoint
from torchtune_longshort.models.families import family_of
from torchtune_longshort.models.hf_checkpoint import INDEX_FILE, read_hf_config
from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
from torchtune_longshort.training.staging import unsaved_files


def _weights(d):
    return sorted(p.name for p in d.iterdir() if p.name.startswith("model") and p.name != "config.json")


# 100_000: the embedding and the output projection (131,072 bytes each) are each over it, the latter after the layers
@pytest.mark.parametrize("max_bytes", [100_000, 200_000, 5 * 1024**3])
def test_shards_and_index_are_huggingface_hubs(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, max_bytes):
    ours, hub = tmp_path / "ours", tmp_path / "hub"
    model = load_hf_checkpoint(tiny_llama2_dir, plain_rope=True)
    write_hf_checkpoint(ours, model.state_dict(), read_hf_config(tiny_llama2_dir), tokenizer=sp_tokenizer_dir,
                        max_shard_bytes=max_bytes)
    assert unsaved_files(ours) == []  # every shard named where a killed save's folder is told from a user's
    index = json.loads((ours / INDEX_FILE).read_text())
    shards = sorted(set(index["weight_map"].values()))
    tensors = {k: v for s in shards for k, v in load_file(str(ours / s)).items()}
    hub.mkdir()
    config = read_hf_config(tiny_llama2_dir)  # the hub is given the tensors in the order the writer converts them
    order = family_of(config).tune_to_hf(model.state_dict(), config)
    save_torch_state_dict({k: tensors[k] for k in order}, hub, max_shard_size=max_bytes)
    for s in shards:
        with safe_open(str(ours / s), "pt") as f:
            assert f.metadata() == {"format": "pt"}
    if len(shards) > 1:
        assert _weights(ours) == _weights(hub) == sorted(shards + [INDEX_FILE])
        for name in _weights(hub):
            assert (ours / name).read_bytes() == (hub / name).read_bytes(), name
    else:
        assert shards == ["model-00001-of-00001.safetensors"] and _weights(hub) == ["model.safetensors"]
        assert (ours / shards[0]).read_bytes() == (hub / "model.safetensors").read_bytes()
        assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())


def test_config_dtype_names_the_stored_weights_whatever_the_source_config_said(tmp_path, tiny_llama2_dir,
                                                                               sp_tokenizer_dir):
    """A hub config.json in transformers 4's spelling (``torch_dtype: float16``) kept it over float32 shards, and
    transformers (dtype "auto") loaded the fine-tune in float16 without a word; mixed shards (a LoRA run's float32
    merged weights beside bfloat16) name the widest."""
    import torch
    from transformers import AutoModelForCausalLM

    model = load_hf_checkpoint(tiny_llama2_dir, plain_rope=True)
    config = {**read_hf_config(tiny_llama2_dir), "torch_dtype": "float16"}
    config.pop("dtype", None)
    write_hf_checkpoint(tmp_path / "fp32", model.state_dict(), config, tokenizer=sp_tokenizer_dir)
    saved = json.loads((tmp_path / "fp32" / "config.json").read_text())
    assert saved["torch_dtype"] == saved["dtype"] == "float32"
    assert next(AutoModelForCausalLM.from_pretrained(str(tmp_path / "fp32")).parameters()).dtype == torch.float32
    mixed = {k: (v if "q_proj" in k or "attn.q" in k else v.to(torch.bfloat16)) for k, v in model.state_dict().items()}
    write_hf_checkpoint(tmp_path / "mixed", mixed, config, tokenizer=sp_tokenizer_dir)
    assert json.loads((tmp_path / "mixed" / "config.json").read_text())["torch_dtype"] == "float32"
    write_hf_checkpoint(tmp_path / "bf16", {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}, config,
                        tokenizer=sp_tokenizer_dir)
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["torch_dtype"] == "bfloat16"


def test_weights_get_the_mode_the_config_beside_them_gets(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """safetensors >= 0.8 writes through a temporary file of mode 0600 (safetensors#782): a run's weights were
    readable by their owner alone while config.json beside them was not (another user's evaluation found no weights).
    Every weights file the project writes (shards, the PEFT adapter, a random checkpoint) takes a plain file's mode,
    under two umasks; the reference is config.json, written by ``open``."""
    import os
    import stat

    import torch

    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint
    from torchtune_longshort.models.peft_adapter import write_peft_adapter

    model = load_hf_checkpoint(tiny_llama2_dir, plain_rope=True)
    config = read_hf_config(tiny_llama2_dir)
    for mask in (0o022, 0o002):
        old = os.umask(mask)
        try:
            out = tmp_path / f"umask{mask:o}"
            write_hf_checkpoint(out / "full", model.state_dict(), config, tokenizer=sp_tokenizer_dir)
            lora = {"layers.0.attn.q_proj.lora_a.weight": torch.zeros(2, 64),
                    "layers.0.attn.q_proj.lora_b.weight": torch.zeros(64, 2)}
            write_peft_adapter(out / "adapter", {**model.state_dict(), **lora}, config, alpha=16.0)
            write_random_llama2_checkpoint(out / "random", vocab_size=64, embed_dim=16, num_layers=1, num_heads=2,
                                           num_kv_heads=1, intermediate_dim=32, max_seq_len=32)
        finally:
            os.umask(old)
        plain = stat.S_IMODE((out / "full" / "config.json").stat().st_mode)
        assert plain == 0o666 & ~mask
        weights = sorted(out.rglob("*.safetensors"))
        assert len(weights) == 3 and {w.name: stat.S_IMODE(w.stat().st_mode) for w in weights} == \
            {w.name: plain for w in weights}


def test_bad_arguments_are_refused_before_the_folder_is_made(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """A dtype given as a string, a tokenizer path that does not exist, a config whose dimensions do not fit and a
    transformers model's state dict each failed after the folder was made (shards written, no tokenizer), or deep
    inside torchtune's conversion; each is refused naming the argument, and no folder is made. A ``config.json``
    path takes the tokenizer beside it, as its folder does."""
    import shutil

    import torch

    from torchtune_longshort.models import save_hf_checkpoint

    model = load_hf_checkpoint(tiny_llama2_dir, plain_rope=True)
    wide = dict(read_hf_config(tiny_llama2_dir), hidden_size=128)
    cases = [
        (dict(config=tiny_llama2_dir, tokenizer=sp_tokenizer_dir, dtype="bfloat16"),
         r"dtype='bfloat16' is not a torch.dtype"),
        (dict(config=tiny_llama2_dir, tokenizer=tmp_path / "nope"), r"tokenizer='.*nope' does not exist"),
        (dict(config=wide, tokenizer=sp_tokenizer_dir), r"the model's embedding is \[512, 64\] but the config says "
                                                         r"vocab_size=512, hidden_size=128"),
    ]
    for i, (kw, match) in enumerate(cases):
        with pytest.raises((ValueError, FileNotFoundError), match=match):
            save_hf_checkpoint(model, tmp_path / f"out{i}", **kw)
        assert not (tmp_path / f"out{i}").exists()
    with pytest.raises(ValueError, match=r"not a torchtune decoder's \(no tok_embeddings.weight"):
        write_hf_checkpoint(tmp_path / "hf", {"model.embed_tokens.weight": torch.zeros(2, 2)},
                            read_hf_config(tiny_llama2_dir), tokenizer=sp_tokenizer_dir)
    assert not (tmp_path / "hf").exists()
    src = tmp_path / "src"
    shutil.copytree(tiny_llama2_dir, src)
    for f in sp_tokenizer_dir.iterdir():
        shutil.copy(f, src / f.name)
    out = save_hf_checkpoint(model, tmp_path / "from_json", src / "config.json")
    assert (out / "tokenizer.model").read_bytes() == (sp_tokenizer_dir / "tokenizer.model").read_bytes()



def test_saving_over_a_checkpoint_this_package_did_not_write_is_refused_before_a_byte_is_written(
        tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """save_hf_checkpoint(model, SRC, SRC) replaced the source's config.json and left its model.safetensors beside
    the new shards: transformers then loaded the old weights under the new config, our loader the new ones. A file
    as out_dir, a config path that does not exist or is no JSON were bare OS / JSON errors. An earlier save's
    folder is still replaced."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from torchtune_longshort.models import save_hf_checkpoint

    src = tmp_path / "src"
    shutil.copytree(tiny_llama2_dir, src)
    weights = {k: v for f in sorted(src.glob("*.safetensors")) for k, v in load_file(f).items()}
    for f in src.glob("model*"):
        f.unlink()
    save_file(weights, src / "model.safetensors")  # one model.safetensors, as save_pretrained writes a small model
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    model = load_hf_checkpoint(src, plain_rope=True)
    with torch.no_grad():
        model.tok_embeddings.weight.mul_(2)
    with pytest.raises(ValueError, match=r"^save_hf_checkpoint: out_dir='.*src' holds a checkpoint this package did "
                                         r"not write \(config.json, model.safetensors\): saving there would replace"):
        save_hf_checkpoint(model, src, src, tokenizer=sp_tokenizer_dir)
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before
    (tmp_path / "a_file").write_text("mine")
    with pytest.raises(ValueError, match=r"^save_hf_checkpoint: out_dir='.*a_file' is a file: pass a folder"):
        save_hf_checkpoint(model, tmp_path / "a_file", src, tokenizer=sp_tokenizer_dir)
    with pytest.raises(FileNotFoundError, match=r"^save_hf_checkpoint: config='.*nope.json' does not exist"):
        save_hf_checkpoint(model, tmp_path / "o1", tmp_path / "nope.json", tokenizer=sp_tokenizer_dir)
    with pytest.raises(ValueError, match=r"^save_hf_checkpoint: config='.*a_file' is not JSON"):
        save_hf_checkpoint(model, tmp_path / "o2", tmp_path / "a_file", tokenizer=sp_tokenizer_dir)
    assert (tmp_path / "a_file").read_text() == "mine" and not any((tmp_path / n).exists() for n in ("o1", "o2"))
    out = save_hf_checkpoint(model, tmp_path / "out", src, tokenizer=sp_tokenizer_dir)
    save_hf_checkpoint(model, out, src, tokenizer=sp_tokenizer_dir)  # an earlier save's folder: replaced
    hf = AutoModelForCausalLM.from_pretrained(out)
    assert torch.equal(hf.model.embed_tokens.weight, model.tok_embeddings.weight)
