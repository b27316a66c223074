"""The model-family table and the tokenizer formats against transformers on the same folders: every family's tiny
checkpoint in its real Hugging Face layout (``tests/family_checkpoints.py``, written by transformers) loads into the
same logits as transformers' own model, its tokenizer gives the ids ``AutoTokenizer`` gives (BOS/EOS included),
and a checkpoint the project writes loads back in transformers with the source's tokenizer files unchanged. Bad input
(an unsupported family, a GGUF file, a folder without config.json, a tokenizer past the model's vocabulary, a
checkpointer model_type of another family) is refused before any model is built, naming what is wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from family_checkpoints import LAYOUTS

TEXT_FILES = ("os.py", "json/decoder.py")
EXPECTED_FAMILY = {"llama2": "llama", "llama3": "llama", "smollm2": "llama_tied", "mistral": "mistral",
                   "qwen2": "qwen2", "gemma": "gemma", "phi3": "phi3", "phi3_5": "phi3", "phi4": "phi3"}
EXPECTED_TOKENIZER = {"llama2": "sentencepiece", "llama3": "hf_json", "smollm2": "hf_json", "mistral": "sentencepiece",
                      "qwen2": "hf_json", "gemma": "sentencepiece", "phi3": "sentencepiece", "phi3_5": "sentencepiece",
                      "phi4": "hf_json"}


def _text() -> str:
    import os

    root = Path(os.__file__).parent
    return "".join((root / f).read_text()[:6000] for f in TEXT_FILES)


def test_family_table_covers_what_the_issue_names():
    from torchtune_longshort.models import MODEL_FAMILIES

    assert set(EXPECTED_FAMILY.values()) == set(MODEL_FAMILIES)
    assert set(LAYOUTS) == set(EXPECTED_FAMILY)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_family_loads_into_the_logits_of_transformers(family_dirs, layout):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from torchtune_longshort.models import CheckpointFolder, load_hf_checkpoint

    folder = CheckpointFolder.open(family_dirs[layout])
    assert folder.family.name == EXPECTED_FAMILY[layout]
    ids = AutoTokenizer.from_pretrained(str(folder.path))(_text()).input_ids[:200]
    x = torch.tensor([ids])
    ref = AutoModelForCausalLM.from_pretrained(str(folder.path), dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(load_hf_checkpoint(folder)(x), ref(x).logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tokenizer_ids_and_specials_match_autotokenizer(family_dirs, layout):
    """The ids the recipe packs (``encode(add_bos=True, add_eos=False)``: BOS only where the source adds one) are
    ``AutoTokenizer``'s on the same text, and BOS/EOS are the ids transformers names."""
    from transformers import AutoTokenizer

    from torchtune_longshort.models import checkpoint_tokenizer

    d = family_dirs[layout]
    ours, ref = checkpoint_tokenizer(str(d)), AutoTokenizer.from_pretrained(str(d))
    assert ours.format == EXPECTED_TOKENIZER[layout]
    text = _text()
    assert ours.encode(text, add_bos=True, add_eos=False) == ref(text).input_ids
    assert ours.encode_plain(text) == ref(text, add_special_tokens=False).input_ids
    assert (ours.bos_id, ours.eos_id) == (ref.bos_token_id, ref.eos_token_id)
    assert ours.decode(ours.encode(text)) == ref.decode(ref(text).input_ids, skip_special_tokens=True)
    assert ours.vocab_size == len(ref)


def test_tiktoken_format_matches_transformers_conversion_of_the_same_file(family_dirs):
    """Llama-3's ``original/tokenizer.model`` read as tiktoken (torchtune's llama3 tokenizer) gives the ids of the
    ``tokenizer.json`` transformers converted from it (an independent implementation of the same BPE)."""
    from transformers import AutoTokenizer

    from torchtune_longshort.models import load_tokenizer

    d = family_dirs["llama3"]
    tik = load_tokenizer(d / "original" / "tokenizer.model")
    assert tik.format == "tiktoken"
    ref = AutoTokenizer.from_pretrained(str(d))
    text = _text()
    assert tik.encode(text, add_bos=True, add_eos=True) == ref(text).input_ids + [ref.eos_token_id]
    assert (tik.bos_id, tik.eos_id) == (ref.bos_token_id, ref.eos_token_id)
    assert load_tokenizer(d, order=("tiktoken",)).format == "tiktoken"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_saved_checkpoint_loads_in_transformers_with_the_source_tokenizer_unchanged(family_dirs, layout, tmp_path):
    """Save a loaded model (the Qwen2 biases and tied output included, which the checkpointer once crashed on) and
    reload it in transformers: same logits; the tokenizer files are the source's bytes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from torchtune_longshort.models import CheckpointFolder, load_hf_checkpoint, save_hf_checkpoint
    from torchtune_longshort.models.tokenizer_formats import TOKENIZER_FILES

    src = CheckpointFolder.open(family_dirs[layout])
    model = load_hf_checkpoint(src)
    out = save_hf_checkpoint(model, tmp_path / "out", src)
    for rel in TOKENIZER_FILES:
        if (src.path / rel).is_file():
            assert (out / rel).read_bytes() == (src.path / rel).read_bytes(), rel
    assert CheckpointFolder.open(out).family is src.family
    x = torch.tensor([AutoTokenizer.from_pretrained(str(out))(_text()).input_ids[:100]])
    ref = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x).logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["mistral", "phi3"])
def test_a_sliding_window_the_model_does_not_apply_is_said_and_written_as_full_attention(
        family_dirs, layout, tmp_path, caplog):
    """Mistral v0.1 (4096) and Phi-3-mini-4k (2047) set sliding_window; torchtune's builders attend to every
    position, transformers to the window only, and the folder kept the window: the two differed by ~8.5 in the
    logits past it (a families audit). Said when built; the written folder says null, and transformers then runs
    the model trained here, past the window too."""
    from transformers import AutoModelForCausalLM

    from torchtune_longshort.models import CheckpointFolder, load_hf_checkpoint, save_hf_checkpoint

    windowed = _copy_with_config(family_dirs[layout], tmp_path / "src", sliding_window=16)
    with caplog.at_level("WARNING"):
        model = load_hf_checkpoint(windowed)
    assert "sliding_window=16 is not applied" in caplog.text and "from position 16 on" in caplog.text
    x = torch.randint(3, 200, (1, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = AutoModelForCausalLM.from_pretrained(str(windowed), dtype=torch.float32).eval()(x).logits
        ours = model(x)
        assert (ours[0, 16:] - theirs[0, 16:]).abs().max() > 1e-2  # the window does change transformers' logits
        out = save_hf_checkpoint(model, tmp_path / "out", CheckpointFolder.open(windowed))
        assert json.loads((out / "config.json").read_text())["sliding_window"] is None
        reloaded = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()(x).logits
    torch.testing.assert_close(ours, reloaded, rtol=1e-4, atol=1e-4)


def _copy_with_config(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("model_type,why", [
    ("gpt2", None), ("gemma2", "soft-caps"),
    # torchtune 0.6.1's llama3_2_vision, and a hub family it has no builder for: refused without the reason before
    ("mllama", "Llama-3.2-Vision: torchtune 0.6.1 builds it as a vision encoder fused into a decoder"),
    ("qwen3", "torchtune 0.6.1 has no Qwen3 builder")])
def test_an_unsupported_family_is_refused_listing_the_supported_ones(family_dirs, tmp_path, model_type, why):
    from torchtune_longshort.models import MODEL_FAMILIES, CheckpointFolder, UnsupportedModelError

    d = _copy_with_config(family_dirs["llama2"], tmp_path / "x", model_type=model_type)
    with pytest.raises(UnsupportedModelError) as err:
        CheckpointFolder.open(d)
    msg = str(err.value)
    assert f"model_type={model_type!r}" in msg and all(name in msg for name in MODEL_FAMILIES)
    if why:
        assert why in msg
    # a text family transformers runs names lm-eval's hf as the way to evaluate it; the vision one does not
    assert ("lm-eval's --model hf evaluates it" in msg) == (model_type in ("gemma2", "qwen3"))


def test_llama_with_biases_or_another_head_size_or_a_windowed_qwen2_is_refused_naming_the_folder(family_dirs, tmp_path):
    from torchtune_longshort.models import UnsupportedModelError, load_hf_checkpoint

    with pytest.raises(UnsupportedModelError, match="attention_bias=true"):
        load_hf_checkpoint(_copy_with_config(family_dirs["llama2"], tmp_path / "b", attention_bias=True))
    with pytest.raises(UnsupportedModelError, match="head_dim=32 differs") as e:
        load_hf_checkpoint(_copy_with_config(family_dirs["llama2"], tmp_path / "h", head_dim=32))
    # the builders know only the config: the folder is named where it is opened, with what to do instead
    assert str(e.value).startswith(f"checkpoint {str(tmp_path / 'h')!r}: llama: ") and "--model hf" in str(e.value)
    with pytest.raises(UnsupportedModelError, match="use_sliding_window=true") as e:
        load_hf_checkpoint(_copy_with_config(family_dirs["qwen2"], tmp_path / "w", use_sliding_window=True))
    assert str(e.value).startswith(f"checkpoint {str(tmp_path / 'w')!r}: qwen2: ") and "--model hf" in str(e.value)


def test_a_phi3_rotating_part_of_each_head_is_refused_in_either_spelling(family_dirs, tmp_path):
    # transformers 5 writes partial_rotary_factor inside rope_parameters (Phi3Config reads it there first): a
    # re-saved Phi-4-mini-style folder was built rotating every dimension and scored 3.5e-5 off hf's perplexity
    from torchtune_longshort.models import UnsupportedModelError, load_hf_checkpoint

    src = family_dirs["phi3"]
    params = dict(json.loads((src / "config.json").read_text()).get("rope_parameters") or {"rope_type": "default"})
    v5 = _copy_with_config(src, tmp_path / "v5", rope_parameters={**params, "partial_rotary_factor": 0.75})
    with pytest.raises(UnsupportedModelError, match=r"rope_parameters\.partial_rotary_factor=0\.75 != 1"):
        load_hf_checkpoint(v5)
    v4 = _copy_with_config(src, tmp_path / "v4", rope_parameters=None, partial_rotary_factor=0.75)
    with pytest.raises(UnsupportedModelError, match=r"json partial_rotary_factor=0\.75 != 1"):
        load_hf_checkpoint(v4)


def test_an_activation_the_builder_does_not_compute_is_refused_in_every_family(family_dirs, tmp_path):
    # each builder computes one activation whatever config.json says: a llama folder with hidden_act gelu loaded and
    # gave logits 1.2 away from transformers'; the swish spelling of SiLU loads
    from torchtune_longshort.models import UnsupportedModelError, load_hf_checkpoint

    for layout, folder in family_dirs.items():
        cfg = json.loads((folder / "config.json").read_text())
        key = "hidden_activation" if cfg.get("hidden_activation") else "hidden_act"
        wrong = "relu"
        with pytest.raises(UnsupportedModelError, match=f"config.json {key}='relu': torchtune's"):
            load_hf_checkpoint(_copy_with_config(folder, tmp_path / f"{layout}_bad", **{key: wrong}))
        if cfg.get(key) == "silu":
            load_hf_checkpoint(_copy_with_config(folder, tmp_path / f"{layout}_swish", **{key: "swish"}))


def test_a_gguf_file_or_a_folder_without_config_says_what_is_expected_and_how_to_convert(tmp_path):
    from torchtune_longshort.models import CheckpointFolder

    gguf = tmp_path / "m" / "model.Q4_1.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    for path in (gguf, gguf.parent):
        with pytest.raises(FileNotFoundError) as err:
            CheckpointFolder.open(path)
        msg = str(err.value)
        assert "expected a Hugging Face checkpoint folder (config.json" in msg
        assert "python -m torchtune_longshort.models.gguf --gguf" in msg
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="has no config.json: expected a Hugging Face checkpoint folder"):
        CheckpointFolder.open(tmp_path / "empty")
    # a training run's output folder (evaluated instead of its step_<k>): the newest checkpoint is named
    run = tmp_path / "run"
    (run / "step_4").mkdir(parents=True)
    (run / "step_4" / "config.json").write_text("{}")
    (run / "latest").write_text("step_4\n")
    with pytest.raises(FileNotFoundError, match=r"has no config.json: .* It is a training run's folder: its newest "
                                                rf"checkpoint is '{run / 'step_4'}'"):
        CheckpointFolder.open(run)


def test_a_tokenizer_past_the_model_vocabulary_is_refused_with_both_numbers(family_dirs, tmp_path):
    """The eval model's ``tokenizer=``, and the recipe before any step (its vocabulary check names both sizes)."""
    from torchtune_longshort.eval.model.args import parse_model_args

    small = _copy_with_config(family_dirs["smollm2"], tmp_path / "small", vocab_size=300)
    with pytest.raises(ValueError, match=r"has 500 ids \(up to 499\), past the 300 rows"):
        parse_model_args(pretrained=str(small))
    with pytest.raises(ValueError, match=r"tokenizer= .*has 500 ids .* past the 300 rows"):
        parse_model_args(pretrained=str(small), tokenizer=str(family_dirs["qwen2"]))


def test_a_checkpointer_model_type_of_another_family_is_refused(family_dirs):
    from torchtune_longshort.models import CheckpointFolder, UnsupportedModelError
    from torchtune_longshort.models.families import check_torchtune_model_type

    qwen = CheckpointFolder.open(family_dirs["qwen2"]).family
    check_torchtune_model_type(qwen, "QWEN2", "checkpointer.model_type")
    check_torchtune_model_type(qwen, None, "checkpointer.model_type")
    with pytest.raises(UnsupportedModelError, match="model_type='LLAMA2' does not convert a 'qwen2' checkpoint"):
        check_torchtune_model_type(qwen, "LLAMA2", "checkpointer.model_type")


@pytest.mark.parametrize("layout,model_type", [("phi4", "PHI4"), ("phi4", "PHI3_MINI"), ("smollm2", "LLAMA3"),
                                               ("smollm2", "LLAMA2"), ("llama2", "LLAMA3_2")])
def test_a_checkpointer_model_type_torchtune_converts_the_folder_with_is_accepted(family_dirs, layout, model_type,
                                                                                 tmp_path):
    """torchtune's phi4 configs say ``model_type: PHI4``, which its FullModelHFCheckpointer converts as PHI3_MINI, and
    it converts a Llama folder, tied or not, alike under LLAMA2 / LLAMA3 / LLAMA3_2: a Phi-4 config copied from
    torchtune's, or a Llama-3.2 one copied from llama3_8b (LLAMA3), was refused by longshort-validate as
    "model_type=... does not convert a 'phi3' ('llama_tied') checkpoint". The reference: torchtune's checkpointer
    reads the folder under that model_type into our loader's weights."""
    from torchtune.training import FullModelHFCheckpointer

    from torchtune_longshort.models import CheckpointFolder, load_hf_checkpoint
    from torchtune_longshort.models.families import check_torchtune_model_type

    folder = CheckpointFolder.open(family_dirs[layout])
    ours = load_hf_checkpoint(folder).state_dict()
    theirs = FullModelHFCheckpointer(str(folder.path), [p.name for p in folder.weight_files], model_type,
                                     str(tmp_path / "tt")).load_checkpoint()["model"]
    assert theirs.keys() <= ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    check_torchtune_model_type(folder.family, model_type, "checkpointer.model_type")


def test_a_folder_is_opened_once_and_reopened_when_it_changes(family_dirs, tmp_path):
    from torchtune_longshort.models import CheckpointFolder

    d = _copy_with_config(family_dirs["llama2"], tmp_path / "c")
    first = CheckpointFolder.open(d)
    assert CheckpointFolder.open(d) is first and CheckpointFolder.open(first) is first
    cfg = json.loads((d / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-6
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    again = CheckpointFolder.open(d)
    assert again is not first and again.config["rms_norm_eps"] == 1e-6


@pytest.mark.parametrize("add_bos_token", [None, True, False], ids=["default", "bos_on", "bos_off"])
def test_eval_model_encodes_like_lm_eval_hf_for_a_model_without_bos(family_dirs, add_bos_token):
    """Qwen2 has no BOS: the prefix of an empty context is EOS (lm-eval hf's rule) and nothing is prepended, even
    with ``add_bos_token=true`` (its EOS was, and scored as the text's first token); ``add_bos_token=false`` keeps
    Llama-2's BOS off even where a caller asks for special tokens, as ``hf``'s tokenizer built without it does."""
    pytest.importorskip("lm_eval")
    from lm_eval.models.huggingface import HFLM

    from torchtune_longshort.eval.model.adapter import LongShortLM

    kw = {} if add_bos_token is None else {"add_bos_token": add_bos_token}
    text = _text()[:2000]
    for layout in ("qwen2", "llama2"):
        d = str(family_dirs[layout])
        ours = LongShortLM(pretrained=d, **kw)
        ref = HFLM(pretrained=d, device="cpu", dtype="float32", **kw)
        assert ours.prefix_token_id == ref.prefix_token_id
        for special in (None, True, False):
            assert ours.tok_encode(text, add_special_tokens=special) == ref.tok_encode(
                text, add_special_tokens=special), (layout, special)
        ctx, cont = text[:500], text[500:700]
        assert ours._encode_pair(ctx, cont) == ref._encode_pair(ctx, cont)


def test_recipe_refuses_a_tokenizer_past_the_model_vocabulary_before_any_step(family_dirs, tmp_path):
    """A model read from its folder (``hf_decoder``) with another folder's larger tokenizer
    (``checkpoint_tokenizer``): refused in setup, both sizes named, no step written."""
    from omegaconf import OmegaConf
    from recipe_config import make_cfg

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    cfg = make_cfg(family_dirs["llama2"], family_dirs["llama2"], tmp_path / "out")
    cfg.model = OmegaConf.create({"_component_": "torchtune_longshort.models.hf_decoder",
                                  "checkpoint_dir": str(family_dirs["llama2"])})
    cfg.tokenizer = OmegaConf.create({"_component_": "torchtune_longshort.models.checkpoint_tokenizer",
                                      "path": str(family_dirs["llama3"])})
    with pytest.raises(ValueError, match=r"tokenizer vocabulary \(566 ids.*512 rows.*do not match"):
        LongShortFinetuneRecipe(cfg).setup()
    assert not list((tmp_path / "out").glob("step_*"))


def test_recipe_refuses_window_bos_for_a_tokenizer_without_bos_before_any_step(family_dirs, tmp_path):
    """Qwen2's tokenizer has no BOS: ``window_bos=True`` wrote nothing over the windows, silently (the run trained as
    ``window_bos=False``). Refused in setup, naming both, before the output folder exists; Llama-2's has one."""
    from omegaconf import OmegaConf
    from recipe_config import make_cfg

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    def cfg(layout):
        c = make_cfg(family_dirs[layout], family_dirs[layout], tmp_path / layout, window_bos=True, max_steps=1)
        c.loss.alpha = 0.0
        c.checkpointer.model_type = layout.upper()
        c.model = OmegaConf.create({"_component_": "torchtune_longshort.models.hf_decoder",
                                    "checkpoint_dir": str(family_dirs[layout])})
        c.tokenizer = OmegaConf.create({"_component_": "torchtune_longshort.models.checkpoint_tokenizer",
                                        "path": str(family_dirs[layout])})
        return c

    with pytest.raises(ValueError, match=r"window_bos=True: the tokenizer .* has no BOS token"):
        LongShortFinetuneRecipe(cfg("qwen2")).setup()
    assert not (tmp_path / "qwen2").exists()
    from torchtune_longshort.models.tokenizer_formats import checkpoint_tokenizer

    assert checkpoint_tokenizer(str(family_dirs["qwen2"])).bos_id is None  # the reference: no id to write
    assert checkpoint_tokenizer(str(family_dirs["llama2"])).bos_id is not None


def test_readme_family_table_is_the_generated_one():
    from torchtune_longshort.models.families import families_table_markdown

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("<!-- families-table:", 1)[1].split("<!-- /families-table -->", 1)[0]
    assert block.split("\n", 1)[1].strip() == families_table_markdown().strip()


def test_a_qwen2_folder_with_another_byte_level_tokenizer_gets_autotokenizers_ids(tmp_path):
    """transformers 5 builds its own ``Qwen2Tokenizer`` pipeline (Qwen2's split regex, NFC) for every folder whose
    config.json says ``qwen2``, whatever its tokenizer.json and tokenizer_config say. A Qwen2 model with another
    byte-level tokenizer.json (SmolLM2's here, in miniature) was trained and scored by ``longshort`` on the file's
    ids, and by lm-eval's ``hf`` on transformers' others: a 256-token perplexity sample re-encoded to 262-269 tokens
    and ``hf`` stopped on ``assert len(continuation_enc) <= self.max_length``. Reference: ``AutoTokenizer``."""
    from family_checkpoints import _config_and_model, _texts, byte_bpe_tokenizer
    from transformers import AutoTokenizer

    from torchtune_longshort.models import checkpoint_tokenizer

    byte_bpe_tokenizer(tmp_path, _texts(), 500, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], bos="<|im_start|>",
                       eos="<|im_end|>", add_bos=False)  # SmolLM2's layout: byte-level, no Qwen2 split regex
    ref = AutoTokenizer.from_pretrained(str(tmp_path))
    config, _ = _config_and_model("qwen2", len(ref))
    config.save_pretrained(str(tmp_path))
    ref = AutoTokenizer.from_pretrained(str(tmp_path))
    assert type(ref).__name__ == "Qwen2Tokenizer"
    text = _text() + "\nx = 1234567  # ÅÅ café\r\n\t  done"
    ours = checkpoint_tokenizer(str(tmp_path))
    assert ours.encode_plain(text) == ref(text, add_special_tokens=False).input_ids
    assert ours.encode(text, add_bos=True, add_eos=False) == ref(text).input_ids
    assert ours.decode(ours.encode_plain(text)) == ref.decode(ref(text).input_ids, skip_special_tokens=True)
