"""A step folder that does not hold what its files say is refused when it is opened, naming the file and the key: a
torn weight file, a config.json that does not describe the weights, a bad RoPE base by the key that holds it, weights
that do not fit the model before FSDP loads them; running out of memory while converting is not blamed on
config.json. Split from test_checkpoint_format.py."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from test_checkpoint_format import _saved

from torchtune_longshort.models import load_hf_checkpoint
from torchtune_longshort.models.hf_checkpoint import check_checkpoint_folder
from torchtune_longshort.models.hf_model import build_decoder


@pytest.mark.parametrize("cut", ["header", "data"])
def test_a_torn_weight_file_is_refused_when_the_folder_is_opened(tmp_path, base_with_tokenizer, cut):
    """A weight file cut short (in its header, or in its data: a copy that stopped) is named when the folder is
    opened, before any weight is read: before, longshort-validate said OK, and tune run / longshort-eval refused it
    only when loading the weights (after lm-eval had started logging). Reference: safetensors' own loader."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    _, out = _saved(tmp_path, base_with_tokenizer, "linear", factor=2.0)
    shard = next(out.glob("model-*.safetensors"))
    data = shard.read_bytes()
    shard.write_bytes(data[:100] if cut == "header" else data[:-100])
    with pytest.raises(SafetensorError):
        load_file(str(shard))
    with pytest.raises(ValueError, match=rf"^cannot read weight file .*{shard.name}: .*copy or convert"):
        check_checkpoint_folder(out)


@pytest.mark.parametrize("key,value", [("vocab_size", 1000), ("intermediate_size", 100), ("num_key_value_heads", 1),
                                       ("rope_theta", -1), ("max_position_embeddings", 0),
                                       ("max_position_embeddings", float("inf")),
                                       ("max_position_embeddings", float("nan")), ("num_hidden_layers", 1),
                                       ("num_hidden_layers", 3)])
def test_a_config_json_that_does_not_describe_the_weights_is_refused_naming_it(tmp_path, base_with_tokenizer, key,
                                                                               value):
    """config.json edited to another size (or copied from another model): the eval model ended in torch's multi-line
    ``size mismatch`` RuntimeError, and a resume from the step in torchtune's ``RuntimeError: shape '[3, 2, 16, 128]'
    is invalid`` (its q/k permutation reads the head counts), both tracebacks naming no file. Reference: torch's and
    torchtune's own errors on the same folder."""
    from torchtune.models.convert_weights import hf_to_tune

    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder

    folder = tmp_path / "edited"
    shutil.copytree(base_with_tokenizer, folder)
    cfg = json.loads((folder / "config.json").read_text())
    if key == "rope_theta":  # a RoPE entry's own base is the one transformers runs (the top level only fills in where
        # the entry holds none: standardize_rope_params' setdefault): the edit goes where it is read
        cfg = {k: ({n: v for n, v in e.items() if n != "rope_theta"} if isinstance(e, dict) and
                   k in ("rope_parameters", "rope_scaling") else e) for k, e in cfg.items()}
    (folder / "config.json").write_text(json.dumps({**cfg, key: value}))
    if key in ("rope_theta", "max_position_embeddings"):  # rope_theta: NaN frequencies, the eval scored nothing,
        # "no reason recorded", exit 0; max_position_embeddings: refused as the eval's max_seq_len, not config.json's
        with pytest.raises(ValueError, match=rf"config.json: {key}={value} is not a .*put back the"):
            CheckpointFolder.open(folder)
        return
    opened = CheckpointFolder.open(folder)
    fix = r"config.json was edited or is another model's: put back the config.json written with these weights$"
    if key == "num_key_value_heads":  # the conversion the recipe's resume runs
        with pytest.raises(RuntimeError, match="is invalid for input of size"):
            hf_to_tune(opened.hf_state_dict(), num_heads=cfg["num_attention_heads"], num_kv_heads=value,
                       dim=cfg["hidden_size"])
        with pytest.raises(ValueError, match=rf"^checkpoint '{folder}': its weights do not fit its config.json "
                                             rf"\(.*num_key_value_heads=1.*\): shape .*is invalid.*{fix}"):
            opened.tune_state_dict()
        return
    if key == "num_hidden_layers":  # weights the model lacks or has more of: named neither the key nor the fix
        from torchtune_longshort.training import model_setup

        with pytest.raises(RuntimeError, match="Unexpected key" if value < 2 else "Missing key"):
            build_decoder(opened).load_state_dict(opened.tune_state_dict())
        said = rf"\(.*num_hidden_layers={value}.*\): missing=\[.*\] unexpected=\[.*\]; {fix}"
        with pytest.raises(ValueError, match=rf"^checkpoint '{folder}': its weights do not fit its config.json {said}"):
            load_hf_checkpoint(folder)
        with pytest.raises(ValueError, match=rf"^checkpoint 'x' does not fit model m: its config.json {said}"):
            model_setup.load_weights(build_decoder(opened), opened.tune_state_dict(), {}, distributed=False,
                                     device=torch.device("cpu"), dtype=torch.float32, reshard_after_forward=True,
                                     where="checkpoint 'x' does not fit model m", fix=opened.config_fix)
        return
    model = build_decoder(opened)
    with pytest.raises(RuntimeError, match="size mismatch"):
        model.load_state_dict(opened.tune_state_dict(), strict=False)
    with pytest.raises(ValueError, match=rf"^checkpoint '{folder}': its weights do not fit its config.json "
                                         rf"\(.*{key}={value}.*\): \S+ is \[.*\] in the checkpoint, \[.*\] in the "
                                         rf"model; {fix}"):
        load_hf_checkpoint(folder)


@pytest.mark.parametrize("holder", ["rope_parameters", "rope_scaling"])
def test_a_bad_rope_base_is_named_by_the_key_that_holds_it(tmp_path, base_with_tokenizer, holder):
    """A RoPE base of -1 inside ``rope_parameters`` / ``rope_scaling`` (no top-level ``rope_theta``) was refused as
    ``rope_theta=None``, a key the file does not hold with a value it does not have: the key that holds it is named,
    with its value."""
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder

    folder = tmp_path / "edited"
    shutil.copytree(base_with_tokenizer, folder)
    cfg = {k: v for k, v in json.loads((folder / "config.json").read_text()).items()
           if k not in ("rope_theta", "rope_parameters", "rope_scaling")}
    (folder / "config.json").write_text(json.dumps({**cfg, holder: {"rope_type": "default", "rope_theta": -1}}))
    with pytest.raises(ValueError, match=rf"config.json: {holder}.rope_theta=-1 is not a RoPE base .*put back the"):
        CheckpointFolder.open(folder)


def test_running_out_of_memory_while_converting_is_not_blamed_on_config_json(base_with_tokenizer, monkeypatch):
    """Every RuntimeError of the weights' conversion was told as "its weights do not fit its config.json ... put
    back the config.json": the CPU allocator's refusal (a RuntimeError, ``devices.is_out_of_memory``) of a 7B
    conversion too. It stays the allocator's error."""
    import torchtune.models.convert_weights as convert

    from torchtune_longshort.devices import is_out_of_memory
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder

    def refused(*_, **__):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you "
                           "tried to allocate 262144 bytes.")

    monkeypatch.setattr(convert, "hf_to_tune", refused)
    with pytest.raises(RuntimeError) as err:
        CheckpointFolder.open(base_with_tokenizer).tune_state_dict()
    assert is_out_of_memory(err.value) and "config.json" not in str(err.value)


def test_weights_that_do_not_fit_the_model_are_refused_before_fsdp_loads_them(tmp_path, base_with_tokenizer,
                                                                               monkeypatch):
    """The recipe's load under torchrun (FSDP2's load_from_full_model_state_dict) refuses a config.json that does not
    describe the weights in the same one line as one process: the check sat in the one-process path only, and FSDP2
    ended in torch's multi-line size mismatch. (FSDP2 itself stands aside here: a process group is not needed to see
    that it is never reached.)"""
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
    from torchtune_longshort.training import model_setup

    folder = tmp_path / "edited"
    shutil.copytree(base_with_tokenizer, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 100}))
    opened = CheckpointFolder.open(folder)
    model = build_decoder(opened)
    reached = []
    monkeypatch.setattr(model_setup, "shard_and_load", lambda *a, **k: reached.append(a))
    for distributed in (False, True):
        with pytest.raises(ValueError, match=r"^checkpoint '.*' does not fit: \S+ is \[.*\] in the checkpoint, "
                                             r"\[.*\] in the model$"):
            model_setup.load_weights(model, opened.tune_state_dict(), {}, distributed=distributed,
                                     device=torch.device("cpu"), dtype=torch.float32, reshard_after_forward=True,
                                     where="checkpoint 'x' does not fit")
    assert not reached
    # QLoRA built on the meta device, as a sharded load builds it: the check reads shapes, not state_dict(), whose
    # NF4 hook copies every weight to the CPU (under torchrun: "Cannot copy out of meta tensor"; in one process a
    # whole dequantized copy of the base)
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    nf4 = dict(vocab_size=512, embed_dim=256, num_layers=1, num_heads=4, num_kv_heads=4, intermediate_dim=768)
    base = CheckpointFolder.open(write_random_llama2_checkpoint(tmp_path / "nf4", max_seq_len=64, seed=0, **nf4))
    with torch.device("meta"):
        qlora = build_decoder(base, lora={"lora_attn_modules": ["q_proj", "v_proj"], "lora_rank": 4, "lora_alpha": 8,
                                          "quantize_base": True})
    model_setup.load_weights(qlora, base.tune_state_dict(), {}, distributed=True, device=torch.device("cpu"),
                             dtype=torch.float32, reshard_after_forward=True, where="x")
    assert len(reached) == 1


LLAMA_CONFIG = {  # a small Llama's config.json, as a converted folder holds beside its weights
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 512, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 256, "rope_theta": 10000.0, "rms_norm_eps": 1e-5}


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_a_folder_where_a_checkpoint_file_should_be_is_named_as_a_folder(tmp_path, name):
    """config.json as a folder was said to be missing ("has no config.json"); model.safetensors as a folder gave
    safetensors' own "OSError: No such device (os error 19)". Reference: the errno class Python maps EISDIR to, and
    safetensors' own open of the folder failing."""
    import errno

    from safetensors import safe_open

    folder = tmp_path / "folder"
    folder.mkdir()
    if name == "model.safetensors":  # a Llama's config beside it, as a converted folder holds
        (folder / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    (folder / name).mkdir()
    if name == "model.safetensors":
        with pytest.raises(Exception):
            safe_open(str(folder / name), framework="pt")
    with pytest.raises(type(OSError(errno.EISDIR, "")), match=rf"{name}' is a folder, not a file"):
        check_checkpoint_folder(folder)


def test_a_shard_the_index_names_that_is_a_folder_is_named_as_a_folder(tmp_path):
    """A shard that model.safetensors.index.json names and that is a folder was said to be "missing" (the single
    file case says "is a folder, not a file"). Reference: the error class Python's own open of the folder raises."""
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    shard = "model-00001-of-00001.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"lm_head.weight": shard}}))
    (folder / shard).mkdir()
    with pytest.raises(OSError) as opened:
        open(folder / shard, "rb")
    with pytest.raises(type(opened.value), match=rf"{shard}' is a folder, not a file"):
        check_checkpoint_folder(folder)
