"""The checkpoint folder (``models.hf_checkpoint``): what it writes loads in transformers (an independent reader),
and an incomplete or inconsistent folder is refused with the path and what is missing."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from torchtune_longshort.models import apply_rope_scaling, load_hf_checkpoint
from torchtune_longshort.models.hf_checkpoint import INDEX_FILE, ROPE_SIDE_FILE, check_checkpoint_folder
from torchtune_longshort.models.hf_checkpoint_writer import save_hf_checkpoint


def _saved(tmp_path, base, method, **kw):
    model = load_hf_checkpoint(base, plain_rope=True)
    apply_rope_scaling(model, method, 512, original_max_seq_len=256, **kw)
    out = tmp_path / method
    save_hf_checkpoint(model, out, base)
    return model, out


def test_linear_folder_loads_in_transformers_with_its_tokenizer(tmp_path, base_with_tokenizer, sp_tokenizer_dir):
    import sentencepiece as spm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, out = _saved(tmp_path, base_with_tokenizer, "linear", factor=2.0)
    assert (out / INDEX_FILE).is_file() and (out / "tokenizer.model").is_file()
    text = "def f(x):\n    return x + 1\n"
    tok = AutoTokenizer.from_pretrained(str(out))
    sp = spm.SentencePieceProcessor(model_file=str(sp_tokenizer_dir / "tokenizer.model"))
    ids = tok(text)["input_ids"]
    assert ids == [1] + sp.encode(text)
    hf = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    x = torch.randint(3, 500, (1, 400))  # past the 256 base positions: the scaling matters
    with torch.no_grad():
        ours = model(x)
        theirs = hf(x).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_torchtunes_own_checkpointer_reads_a_step_and_hf_decoder_keeps_its_rope(tmp_path, base_with_tokenizer):
    """What docs/recipe.md tells a torchtune user (``tune run generate`` on a step folder): torchtune's
    ``FullModelHFCheckpointer`` reads the folder (every key), ``hf_decoder`` on it builds the saved YaRN and gives our
    loader's logits, while torchtune's own builder of the same dimensions loads the weights with plain RoPE, no word."""
    from torchtune.models.llama2 import llama2
    from torchtune.training import FullModelHFCheckpointer

    from torchtune_longshort.models import hf_decoder
    from torchtune_longshort.models.hf_checkpoint import weight_files

    model, out = _saved(tmp_path, base_with_tokenizer, "yarn", factor=2.0)
    sd = FullModelHFCheckpointer(checkpoint_dir=str(out), checkpoint_files=[p.rsplit("/", 1)[-1] for p in
                                 weight_files(out)], model_type="LLAMA2", output_dir=str(tmp_path / "tt")
                                 ).load_checkpoint()["model"]
    ours, cfg = hf_decoder(str(out)), json.loads((out / "config.json").read_text())
    ours.load_state_dict(sd, strict=True)
    theirs = llama2(vocab_size=cfg["vocab_size"], num_layers=cfg["num_hidden_layers"],
                    num_heads=cfg["num_attention_heads"], num_kv_heads=cfg["num_key_value_heads"],
                    embed_dim=cfg["hidden_size"], intermediate_dim=cfg["intermediate_size"], max_seq_len=512)
    theirs.load_state_dict(sd, strict=True)
    x = torch.randint(3, 500, (1, 400), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model.eval()(x)
        torch.testing.assert_close(ours.eval()(x), want, rtol=1e-5, atol=1e-5)
        assert (theirs.eval()(x) - want).abs().max() > 1e-3  # torchtune's builder: plain RoPE
    # ours reads a step without learned RoPE exactly as torchtune's does
    from torchtune_longshort.models import FullModelHFRopeCheckpointer

    same = FullModelHFRopeCheckpointer(str(out), [p.rsplit("/", 1)[-1] for p in weight_files(out)], "LLAMA2",
                                       str(tmp_path / "ours")).load_checkpoint()["model"]
    assert same.keys() == sd.keys() and all(torch.equal(same[k], sd[k]) for k in sd)


def test_a_clex_step_loads_and_saves_through_our_torchtune_checkpointer(tmp_path, base_with_tokenizer):
    """``tune run generate`` / torchtune's finetune recipes on a CLEX step: torchtune's ``FullModelHFCheckpointer``
    does not read the ODE's side file (strict load: Missing key(s) ...pos_embeddings.ode_up_proj, as docs/recipe.md
    said); ``FullModelHFRopeCheckpointer`` returns it under the model's keys (the logits of ``load_hf_checkpoint``,
    the reference) and its save writes the trained ODE back to the side file, which our loader then reads."""
    from torchtune.training import FullModelHFCheckpointer

    from torchtune_longshort.models import FullModelHFRopeCheckpointer, hf_decoder

    model = apply_rope_scaling(load_hf_checkpoint(base_with_tokenizer, plain_rope=True), "clex", 512,
                               original_max_seq_len=256, t_max=2)
    with torch.no_grad():  # a trained ODE, not the one a fresh build starts from
        for p in model.layers[0].attn.pos_embeddings.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    out = tmp_path / "clex"
    save_hf_checkpoint(model, out, base_with_tokenizer)
    files = [f.name for f in out.glob("model*.safetensors")]
    theirs = FullModelHFCheckpointer(str(out), files, "LLAMA2", str(tmp_path / "tt")).load_checkpoint()["model"]
    with pytest.raises(RuntimeError, match=r"Missing key.*layers\.0\.attn\.pos_embeddings\.ode_up_proj"):
        hf_decoder(str(out)).load_state_dict(theirs)
    ckpt = FullModelHFRopeCheckpointer(str(out), files, "LLAMA2", str(tmp_path / "ft"))
    tuned = hf_decoder(str(out))
    tuned.load_state_dict(ckpt.load_checkpoint()["model"], strict=True)
    x = torch.randint(3, 500, (1, 400), generator=torch.Generator().manual_seed(0))  # past 256: the ODE runs
    with torch.no_grad():
        ref = load_hf_checkpoint(out)(x)
        torch.testing.assert_close(tuned.eval()(x), ref, rtol=0, atol=0)
        fresh = hf_decoder(str(out))  # the ODE untrained: another model past the pre-trained positions
        fresh.load_state_dict(theirs, strict=False)
        assert (fresh.eval()(x) - ref).abs().max() > 1e-3
        for p in (tuned.layers[0].attn.pos_embeddings.ode_up_proj, tuned.layers[0].attn.pos_embeddings.ode_down_proj):
            p.add_(0.05)  # a fine-tuning step's change, saved as torchtune's recipes save
    ckpt.save_checkpoint({"model": tuned.state_dict()}, epoch=0)
    saved = tmp_path / "ft" / "epoch_0"
    assert (saved / ROPE_SIDE_FILE).is_file()
    with torch.no_grad():
        torch.testing.assert_close(load_hf_checkpoint(saved)(x), tuned(x), rtol=1e-5, atol=1e-5)
    # a CLEX config.json without its side file: refused before torchtune's checkpointer makes output_dir
    (saved / ROPE_SIDE_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="rope_params.safetensors.*copy the step folder whole"):
        FullModelHFRopeCheckpointer(str(saved), files, "LLAMA2", str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def test_many_shards_with_index_load_in_transformers(tmp_path, base_with_tokenizer):
    from transformers import AutoModelForCausalLM

    from torchtune_longshort.models.hf_checkpoint import read_hf_config
    from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint

    model = load_hf_checkpoint(base_with_tokenizer, plain_rope=True)
    out = tmp_path / "sharded"
    write_hf_checkpoint(out, model.state_dict(), read_hf_config(base_with_tokenizer), tokenizer=base_with_tokenizer,
                        max_shard_bytes=200_000)
    index = json.loads((out / INDEX_FILE).read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and all((out / s).is_file() for s in shards)
    hf = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    x = torch.randint(3, 500, (1, 64))
    with torch.no_grad():
        torch.testing.assert_close(load_hf_checkpoint(out)(x), hf(x).logits, rtol=1e-4, atol=1e-4)
    (out / shards[1]).unlink()
    with pytest.raises(FileNotFoundError, match=shards[1]):
        load_hf_checkpoint(out)
    shutil.copy(out / shards[0], out / shards[1])
    (out / INDEX_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="no model.safetensors.index.json"):
        check_checkpoint_folder(out)


@pytest.mark.parametrize("method,kw", [("clex", {"t_max": 2}), ("eabf", {})])
def test_not_representable_methods_are_refused_by_transformers(tmp_path, base_with_tokenizer, method, kw):
    from transformers import AutoModelForCausalLM

    model, out = _saved(tmp_path, base_with_tokenizer, method, **kw)
    with pytest.raises(KeyError, match="not representable in transformers"):
        AutoModelForCausalLM.from_pretrained(str(out))
    x = torch.randint(3, 500, (1, 300))
    with torch.no_grad():
        torch.testing.assert_close(load_hf_checkpoint(out)(x), model.eval()(x), rtol=1e-5, atol=1e-5)


def test_incomplete_or_inconsistent_folders_are_refused(tmp_path, base_with_tokenizer):
    _, clex = _saved(tmp_path, base_with_tokenizer, "clex", t_max=2)
    # missing tokenizer in a folder the project wrote
    no_tok = tmp_path / "no_tok"
    shutil.copytree(clex, no_tok)
    for f in ("tokenizer.model", "tokenizer.json"):
        (no_tok / f).unlink()
    with pytest.raises(FileNotFoundError, match=r"no_tok.*no tokenizer"):
        load_hf_checkpoint(no_tok)
    # missing RoPE side file
    no_side = tmp_path / "no_side"
    shutil.copytree(clex, no_side)
    (no_side / ROPE_SIDE_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=r"clex.*rope_params.safetensors"):
        load_hf_checkpoint(no_side)
    # a side file beside a method that has none
    _, lin = _saved(tmp_path, base_with_tokenizer, "linear", factor=2.0)
    (lin / ROPE_SIDE_FILE).parent.mkdir()
    shutil.copy(clex / ROPE_SIDE_FILE, lin / ROPE_SIDE_FILE)
    with pytest.raises(ValueError, match="disagree"):
        load_hf_checkpoint(lin)
    # transformers entries edited against the spec
    _, yarn = _saved(tmp_path, base_with_tokenizer, "yarn")
    cfg = json.loads((yarn / "config.json").read_text())
    cfg["rope_scaling"]["factor"] = 8.0
    (yarn / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="rope_scaling.*disagrees"):
        load_hf_checkpoint(yarn)


def test_a_stray_weight_file_or_another_head_is_not_loaded_as_the_model(tmp_path, base_with_tokenizer):
    """An older copy beside ``model.safetensors`` (no index) was loaded over it: ``longshort`` and ``hf`` evaluated
    different weights from one folder. Without an index only ``model.safetensors`` is read, as transformers reads
    it (the reference: transformers on the same folder); several files of other names are refused; a folder whose
    ``architectures`` is a classifier is refused when opened, not at a weight key inside torchtune."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "two"
    shutil.copytree(base_with_tokenizer, folder)
    other = {k: torch.randn_like(v) for k, v in load_file(folder / "model.safetensors").items()}
    save_file(other, folder / "model_old.safetensors")
    tokens = torch.randint(0, 512, (1, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = load_hf_checkpoint(folder, plain_rope=True)(tokens)
        want = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)(tokens).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    (folder / "model.safetensors").rename(folder / "model_new.safetensors")
    with pytest.raises(ValueError, match=r"holds 2 weight files \(model_new.safetensors, model_old.safetensors\) and "
                                         r"no model.safetensors.index.json"):
        load_hf_checkpoint(folder)
    head = tmp_path / "head"
    shutil.copytree(base_with_tokenizer, head)
    cfg = json.loads((head / "config.json").read_text())
    (head / "config.json").write_text(json.dumps({**cfg, "architectures": ["LlamaForSequenceClassification"]}))
    with pytest.raises(ValueError, match=r"architectures \['LlamaForSequenceClassification'\] is not a causal "
                                         r"language model"):
        load_hf_checkpoint(head)


def test_corrupted_shard_is_named(tmp_path, base_with_tokenizer):
    _, out = _saved(tmp_path, base_with_tokenizer, "linear", factor=2.0)
    shard = next(out.glob("model-*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(ValueError, match=shard.name):
        load_hf_checkpoint(out)


def test_eval_model_refuses_a_foreign_folder_without_tokenizer(tiny_llama2_dir):
    pytest.importorskip("lm_eval")
    from torchtune_longshort.eval.model.adapter import LongShortLM

    with pytest.raises(FileNotFoundError, match="no tokenizer"):
        LongShortLM(checkpoint_dir=str(tiny_llama2_dir))


def test_saving_a_method_transformers_cannot_run_says_so(tmp_path, base_with_tokenizer, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="torchtune_longshort.models.hf_checkpoint_writer"):
        _saved(tmp_path, base_with_tokenizer, "eabf")
    assert any("'eabf' is not representable in transformers" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="torchtune_longshort.models.hf_checkpoint_writer"):
        _saved(tmp_path, base_with_tokenizer, "yarn")
    assert not caplog.records


def test_a_phi3_folder_transformers_refuses_says_how_its_tokenizer_loads(tmp_path, family_dirs, caplog):
    # Phi3Config checks its RoPE when built, and transformers 5's AutoTokenizer builds it: a Phi-3 + YaRN folder
    # failed AutoTokenizer too, without a word; the warning now names the way that loads it, which gives the ids
    # the source folder's tokenizer gives
    import logging

    import transformers

    src = family_dirs["phi3"]
    with caplog.at_level(logging.WARNING, logger="torchtune_longshort.models.hf_checkpoint_writer"):
        save_hf_checkpoint(load_hf_checkpoint(src, rope="yarn", max_seq_len=512), tmp_path / "out",
                           json.loads((src / "config.json").read_text()), tokenizer=src)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "'yarn' is not representable in transformers' phi3 config" in said
    assert "AutoTokenizer too" in said and "PreTrainedTokenizerFast.from_pretrained(folder)" in said
    with pytest.raises(Exception, match="rope"):
        transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    cls = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())["tokenizer_class"]
    text = "def f(x):\n    return x + 1  # one"
    ids = getattr(transformers, cls).from_pretrained(tmp_path / "out")(text).input_ids
    assert ids == transformers.AutoTokenizer.from_pretrained(src)(text).input_ids


def test_misalignment_cli_reads_the_checkpoints_own_tokenizer(tmp_path, base_with_tokenizer):
    """The README's command: no --tokenizer for a folder that carries one; the result matches an explicit one."""
    from torchtune_longshort.metrics.cli import main

    _, out = _saved(tmp_path, base_with_tokenizer, "linear", factor=2.0)
    args = ["--checkpoint-dir", str(out), "--data", "stdlib", "--length", "128", "--num-samples", "3"]
    assert main(args + ["--output", str(tmp_path / "a.json")]) == 0
    assert main(args + ["--tokenizer", str(out / "tokenizer.model"), "--output", str(tmp_path / "b.json")]) == 0
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert a["summary"] == b["summary"] and a["summary"]["sce"]["mean"] > 0


def test_a_tokenizer_transformers_cannot_convert_is_copied_with_a_warning(tmp_path, caplog):
    """A tiktoken-style tokenizer.model (Llama-3's original/) is copied; no tokenizer.json is invented for it."""
    import logging

    from torchtune_longshort.models.hf_tokenizer import copy_tokenizer

    src = tmp_path / "original"
    src.mkdir()
    (src / "tokenizer.model").write_text("IQ== 0\nIg== 1\n")  # tiktoken's format: base64 token, rank
    out = tmp_path / "out"
    out.mkdir()
    with caplog.at_level(logging.WARNING, logger="torchtune_longshort.models.hf_tokenizer"):
        copy_tokenizer(src / "tokenizer.model", out)
    assert (out / "original" / "tokenizer.model").read_text() == (src / "tokenizer.model").read_text()
    assert not (out / "tokenizer.json").exists()
    assert "could not write transformers' tokenizer files" in caplog.text
