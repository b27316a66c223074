"""The recipe's data side: the documents source, the one-pass corpus check, and the optional position sampler.

Used by ``LongShortFinetuneRecipe._setup_data`` (``torchtune_longshort/recipes/longshort_finetune.py``).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from omegaconf import DictConfig
from torchtune import config
from torchtune.config._utils import _get_component_from_path

from torchtune_longshort.data.corpus import fixed_length_sequences
from torchtune_longshort.data.dual_window import PackedTokenStream
from torchtune_longshort.data.torchtune_datasets import takes_tokenizer, torchtune_documents


def build_documents(node: DictConfig, tokenizer):
    """``dataset``: a documents source of ``torchtune_longshort.data.corpus``, or a torchtune dataset builder (its
    first parameter ``tokenizer``, e.g. ``torchtune.datasets.text_completion_dataset``), built with the recipe's
    tokenizer and read sample by sample."""
    if takes_tokenizer(_get_component_from_path(node._component_)):
        return torchtune_documents(config.instantiate(node, tokenizer), name=node._component_)
    return config.instantiate(node)


def check_documents(documents, tokenizer, tokenize, vocab_size: int, need: int) -> None:
    """Before step 1: one pass over the documents must hold ``need`` = L + e_max + 1 text tokens (BOS/EOS not
    counted), else training would repeat it (or see only BOS/EOS); then one sample is read, so that a
    tokenizer/model mismatch fails here too."""
    _check_corpus_length(documents, tokenizer, need)
    PackedTokenStream(documents, tokenize=tokenize, vocab_size=vocab_size).take(need - 1)


def validation_sequences(node: Optional[DictConfig], tokenize, vocab_size: int):
    """The fixed-length token sequences of the optional ``validation`` node (None without it)."""
    if node is None:
        return None
    return fixed_length_sequences(config.instantiate(node.dataset), tokenize, node.seq_len, node.num_sequences, vocab_size)


def _check_corpus_length(documents, tokenizer, need: int) -> None:
    got = 0
    specials = {tokenizer.bos_id, tokenizer.eos_id}
    for doc in documents():
        if isinstance(doc, str):
            got += len(tokenizer.encode(doc, add_bos=False, add_eos=False))
        else:  # token ids of a torchtune dataset sample, BOS/EOS included
            got += sum(1 for t in doc if t not in specials)
        if got >= need:
            return
    raise ValueError(
        f"dataset {documents!r} holds {got} text tokens in one pass, fewer than one sample of "
        f"seq_len + e_max + 1 = {need}: training would repeat it (or see only BOS/EOS). Use more data, a "
        "shorter seq_len or a smaller e_range"
    )


def build_position_sampler(
    node: Optional[DictConfig], model_max_len: Optional[int], seed: int, rank: int,
    recipe_state: Optional[Dict[str, Any]],
):
    """``(sampler, generator)`` of the optional ``position_sampler`` (``torchtune_longshort.rope.POSITION_SAMPLERS``:
    random_pos, PoSE): each training window gets sampled position ids instead of 0..L-1. The generator is seeded
    per rank and restored from ``recipe_state`` for exact resume. ``(None, None)`` without the node."""
    if node is None:
        return None, None
    sampler = config.instantiate(node)
    if not hasattr(sampler, "sample"):
        raise ValueError(f"position_sampler: {node._component_} has no sample(batch_size, seq_len, generator)")
    bound = getattr(sampler, "max_position", None) or getattr(sampler, "target_len", None)
    if model_max_len is not None and bound is not None and bound > model_max_len:
        raise ValueError(
            f"position_sampler draws positions up to {bound}, above the model's max_seq_len={model_max_len}: scale "
            "RoPE to at least that length (model.max_seq_len)"
        )
    gen = torch.Generator().manual_seed(seed + 7919 * (rank + 1))
    if recipe_state is not None and recipe_state.get("position_generator") is not None:
        gen.set_state(recipe_state["position_generator"])
    return sampler, gen
