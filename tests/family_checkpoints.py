"""Tiny random checkpoints of every model family in ``torchtune_longshort.models.MODEL_FAMILIES``, each in its real
Hugging Face layout, written by transformers itself (its own config and model classes, ``save_pretrained``): an
independent writer, so that the project's reader is tested against what the hub holds, tokenizer format included.

==============  ===================  ==========================================================================
layout          family               what it holds (besides random weights from transformers)
==============  ===================  ==========================================================================
llama2          llama                SentencePiece ``tokenizer.model`` (+ transformers' files), untied, MHA
llama3          llama                Llama-3.1 layout: ``tokenizer.json`` + tiktoken ``original/tokenizer.model``
                                     with Llama-3's special tokens, rope type ``llama3``, GQA, base 500000
smollm2         llama_tied           byte-level BPE ``tokenizer.json`` that adds no BOS, ``<|im_start|>`` as BOS,
                                     tied embeddings, GQA 6/2 (SmolLM2's ratios), base 1e5
mistral         mistral              SentencePiece tokenizer, GQA, no sliding window
qwen2           qwen2                byte-level BPE ``tokenizer.json``, ``bos_token: null``, q/k/v biases, tied
gemma           gemma                SentencePiece tokenizer, head_dim 32 != hidden / heads, tied, GeGLU
phi3            phi3                 SentencePiece tokenizer, fused qkv / gate_up
phi3_5          phi3                 Phi-3.5-mini layout: ``phi3`` with LongRoPE as its hub config.json spells it
                                     (``rope_scaling: {type: longrope, short_factor, long_factor}``, top-level
                                     ``original_max_position_embeddings`` 64 of 256 positions, ``rope_theta``)
phi4            phi3                 Phi-4 (14B) layout: ``phi3`` with a byte-level BPE ``tokenizer.json`` (Llama-3's
                                     split regex, ``tokenizer_class: GPT2Tokenizer``, no BOS added,
                                     ``<|endoftext|>`` BOS, ``<|im_end|>`` EOS), GQA, base 250000
==============  ===================  ==========================================================================
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path
from typing import Dict, Iterable, List

LAYOUTS = ("llama2", "llama3", "smollm2", "mistral", "qwen2", "gemma", "phi3", "phi3_5", "phi4")
POSITIONS = 256  # max_position_embeddings of every tiny checkpoint
# The Phi-3.5 layout's LongRoPE (head_dim 16: 8 divisors each), switching to the long factors past 64 positions.
PHI3_5_ORIGINAL = 64
PHI3_5_SHORT = [1.0, 1.0, 1.02, 1.05, 1.1, 1.2, 1.35, 1.5]
PHI3_5_LONG = [1.0, 1.1, 1.5, 2.2, 3.3, 4.5, 6.0, 8.0]
# Llama-3's pre-tokenizer pattern (the one torchtune's and transformers' tiktoken readers use).
_CL100K = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
                   "<|image|>"]


def _texts(limit: int = 30) -> List[str]:
    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents

    return list(iter_stdlib_documents(limit=limit, include_tests=False))


# Qwen2's pre-tokenizer pattern (its hub tokenizer.json; transformers' Qwen2Tokenizer applies it whatever the file).
QWEN2_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def byte_bpe_tokenizer(out: Path, texts: Iterable[str], vocab_size: int, specials: List[str], *, bos, eos,
                       add_bos: bool, pattern=None) -> None:
    """A byte-level BPE ``tokenizer.json`` trained here (the ``tokenizers`` library), saved by transformers'
    ``PreTrainedTokenizerFast`` with the given BOS/EOS (``bos=None``: none, as Qwen2); ``add_bos``: a post-processor
    that prepends BOS (Llama-3), else none (Qwen2, SmolLM2); ``pattern``: a split regex before the byte-level step
    (Qwen2's)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if pattern is not None:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=eos)
    fast.save_pretrained(str(out))


def phi4_tokenizer(out: Path, texts: Iterable[str]) -> None:
    """Phi-4's layout: a byte-level BPE ``tokenizer.json`` with Llama-3's split regex, ``<|endoftext|>`` as BOS (not
    added) and pad, ``<|im_end|>`` as EOS, and ``tokenizer_class: GPT2Tokenizer`` in its ``tokenizer_config.json``
    (as the hub's microsoft/phi-4 has it)."""
    import json

    byte_bpe_tokenizer(out, texts, 500, ["<|endoftext|>", "<|im_start|>", "<|im_sep|>", "<|im_end|>"],
                       bos="<|endoftext|>", eos="<|im_end|>", add_bos=False, pattern=_CL100K)
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(tokenizer_class="GPT2Tokenizer", pad_token="<|endoftext|>", add_bos_token=False, add_eos_token=False)
    path.write_text(json.dumps(cfg, indent=2))


def own_code_tokenizer(out: Path, **config) -> Path:
    """A tokenizer folder whose ``tokenizer_config.json`` names its own class (``auto_map`` to code the folder would
    ship, a ``tokenizer_class`` transformers lacks): a small BPE ``tokenizer.json`` with ``<unk>`` / ``<s>`` /
    ``</s>``, ``config`` added to the config (a ``chat_template``, ...). Asked about it, transformers offers to run
    the code (``Do you wish to run the custom code? [y/N]``)."""
    import json

    from tokenizers import Tokenizer, models, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.train_from_iterator(["hello world"] * 4, trainers.BpeTrainer(vocab_size=40,
                                                                      special_tokens=["<unk>", "<s>", "</s>"]))
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "OwnTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_own.OwnTokenizer", None]},
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", **config}))
    return out


def as_transformers_class(own: Path, out: Path) -> Path:
    """``out``: the files of :func:`own_code_tokenizer`'s folder ``own``, its tokenizer named as transformers' own
    class (``PreTrainedTokenizerFast``, no ``auto_map``): the reference transformers loads without running code."""
    import json
    import shutil

    out.mkdir()
    shutil.copy(own / "tokenizer.json", out)
    config = json.loads((own / "tokenizer_config.json").read_text())
    del config["auto_map"]
    (out / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "PreTrainedTokenizerFast"}))
    return out


def tiktoken_llama3_tokenizer(out: Path, texts: List[str], merges: int = 300) -> None:
    """Llama-3's layout: a tiktoken BPE ``original/tokenizer.model`` (ranks trained here by tiktoken's own reference
    trainer) and the ``tokenizer.json`` transformers converts from it (``TikTokenConverter``), with Llama-3's special
    tokens after the base vocabulary and a post-processor that prepends ``<|begin_of_text|>``."""
    import base64

    import tiktoken._educational as tiktoken_ref
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    with contextlib.redirect_stdout(io.StringIO()):  # the reference trainer prints every merge
        ranks = tiktoken_ref.bpe_train("".join(texts)[:40_000], 256 + merges, _CL100K)
    (out / "original").mkdir(parents=True, exist_ok=True)
    model_file = out / "original" / "tokenizer.model"
    model_file.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in sorted(ranks.items(),
                                                                                            key=lambda kv: kv[1])))
    tok = TikTokenConverter(str(model_file), pattern=_CL100K, extra_special_tokens=LLAMA3_SPECIALS).converted()
    bos = LLAMA3_SPECIALS[0]
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=LLAMA3_SPECIALS[1])
    fast.save_pretrained(str(out))


def _config_and_model(layout: str, vocab_size: int, **overrides):
    import transformers as tf

    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=POSITIONS)
    spec = {
        "llama2": (tf.LlamaConfig, tf.LlamaForCausalLM, dict(num_key_value_heads=4, bos_token_id=1, eos_token_id=2)),
        "llama3": (tf.LlamaConfig, tf.LlamaForCausalLM, dict(
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 4.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
        "smollm2": (tf.LlamaConfig, tf.LlamaForCausalLM, dict(
            hidden_size=96, num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1e5)),
        "mistral": (tf.MistralConfig, tf.MistralForCausalLM, dict(sliding_window=None, bos_token_id=1, eos_token_id=2)),
        "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM, dict(tie_word_embeddings=True, rope_theta=1e6)),
        "gemma": (tf.GemmaConfig, tf.GemmaForCausalLM, dict(head_dim=32, bos_token_id=1, eos_token_id=2, pad_token_id=0)),
        "phi3": (tf.Phi3Config, tf.Phi3ForCausalLM, dict(bos_token_id=1, eos_token_id=2, pad_token_id=2)),
        "phi3_5": (tf.Phi3Config, tf.Phi3ForCausalLM, dict(
            bos_token_id=1, eos_token_id=2, pad_token_id=2, original_max_position_embeddings=PHI3_5_ORIGINAL,
            rope_scaling=phi3_5_rope_scaling())),
        "phi4": (tf.Phi3Config, tf.Phi3ForCausalLM, dict(rope_theta=250000.0, sliding_window=None)),
    }[layout]
    cfg_cls, model_cls, extra = spec
    return cfg_cls(**{**common, **extra, **overrides}), model_cls


def phi3_5_rope_scaling(short=PHI3_5_SHORT, long=PHI3_5_LONG) -> dict:
    """``rope_scaling`` as Phi-3.5-mini's hub config.json holds it (no ``factor``, no original length inside)."""
    return {"long_factor": list(long), "short_factor": list(short), "type": "longrope"}


def as_hub_phi3_5_config(folder: Path) -> None:
    """Rewrite a saved Phi-3 ``config.json`` in the spelling of Phi-3.5-mini's on the hub (transformers 4.x):
    ``rope_scaling`` with ``type``, ``rope_theta`` at the top level, no ``rope_parameters``."""
    import json

    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    params = cfg.pop("rope_parameters")
    cfg["rope_theta"] = params["rope_theta"]
    cfg["rope_scaling"] = phi3_5_rope_scaling(params["short_factor"], params["long_factor"])
    path.write_text(json.dumps(cfg, indent=2))


def write_family_checkpoint(layout: str, out: Path, sp_tokenizer_dir: Path, seed: int = 0) -> Path:
    """Write the ``layout`` checkpoint (see the module table) into ``out``; returns ``out``."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    texts = _texts()
    if layout in ("llama2", "mistral", "gemma", "phi3", "phi3_5"):
        for f in sp_tokenizer_dir.iterdir():
            shutil.copy(f, out / f.name)
    elif layout == "llama3":
        tiktoken_llama3_tokenizer(out, texts)
    elif layout == "smollm2":
        byte_bpe_tokenizer(out, texts, 500, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], bos="<|im_start|>",
                           eos="<|im_end|>", add_bos=False)
    elif layout == "qwen2":
        byte_bpe_tokenizer(out, texts, 500, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], bos=None,
                           eos="<|endoftext|>", add_bos=False, pattern=QWEN2_PATTERN)
    elif layout == "phi4":
        phi4_tokenizer(out, texts)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out))
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    config, model_cls = _config_and_model(layout, len(tok), **(ids if layout == "phi4" else {}))
    torch.manual_seed(seed)
    model = model_cls(config)
    model.save_pretrained(str(out), safe_serialization=True)
    if layout == "phi3_5":
        as_hub_phi3_5_config(out)
    return out


def write_all(root: Path, sp_tokenizer_dir: Path) -> Dict[str, Path]:
    return {name: write_family_checkpoint(name, root / name, sp_tokenizer_dir) for name in LAYOUTS}
