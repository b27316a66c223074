"""The recipe's data side: the documents source, the one-pass corpus check, the optional position sampler, and the
state a step starts from (kept, so that a bad record found mid-step is answered with a checkpoint of the last good
step, as on a signal).

Used by the recipe's ``_setup`` / ``_setup_data`` (``torchtune_longshort/training/recipe_setup.py``) and its step
(``torchtune_longshort/recipes/longshort_finetune.py``).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Sequence

import torch
from torchtune import config

from torchtune_longshort.data.fixed_length import TooFewSequences, fixed_length_sequences
from torchtune_longshort.data.source_names import SourceNames, source_names
from torchtune_longshort.data.dual_window import PackedTokenStream, check_random_access
from torchtune_longshort.devices import rng_states, set_rng_states
from torchtune_longshort.data.torchtune_datasets import build_torchtune_dataset, text_column_of, torchtune_documents
from torchtune_longshort.plural import counted
from torchtune_longshort.rope import ScaledRoPE
from torchtune_longshort.rope.samplers import check_position_bound
from torchtune_longshort.training.recipe_config.data import DataSourceConfig, ValidationConfig
from torchtune_longshort.config.values import resolve_component

log = logging.getLogger(__name__)


def build_documents(source: DataSourceConfig, tokenizer, where: str = "dataset"):
    """A documents source of ``torchtune_longshort.data.corpus``, or a torchtune dataset builder (its first parameter
    ``tokenizer``, e.g. ``torchtune.datasets.text_completion_dataset``) built with the recipe's tokenizer and read
    sample by sample, each record checked as it is read."""
    if source.takes_tokenizer:
        builder = resolve_component(f"{where}._component_", source.component)
        dataset = build_torchtune_dataset(builder, tokenizer, source.builder_args, where)
        return torchtune_documents(dataset, name=source.component, args=source.builder_args, where=where,
                                   skip_bad_records=source.skip_bad_records, column=text_column_of(builder))
    with source_names(SourceNames(where)):  # a corpus source's messages name this section's keys
        return config.instantiate(source.node())


def check_shuffle_source(documents, shuffle: bool) -> None:
    """With ``shuffle=True``, before any folder exists: the source must have random access
    (:func:`~torchtune_longshort.data.dual_window.check_random_access`)."""
    if shuffle:
        check_random_access(documents)


def check_first_sample(documents, tokenize, vocab_size: int, need: int) -> None:
    """Before step 1, once the model exists: one sample of ``need`` tokens is read, so that a tokenizer/model
    mismatch (an id past the embedding table) fails here."""
    PackedTokenStream(documents, tokenize=tokenize, vocab_size=vocab_size).take(need - 1)


def validation_sequences(validation: Optional[ValidationConfig], tokenizer, tokenize, vocab_size: Optional[int]):
    """The fixed-length token sequences of the optional ``validation`` section (None without it), read before the
    output folder is claimed (a source that holds too few is refused naming both fields); ``vocab_size``: the
    model's, where the config declares it (ids past it are refused). One that reads files of the ``training`` documents
    is said by the config check (:mod:`~torchtune_longshort.training.recipe_config.validation_overlap`)."""
    if validation is None:
        return None
    documents = build_documents(validation.dataset, tokenizer, "validation.dataset")
    try:
        return fixed_length_sequences(documents, tokenize, validation.seq_len, validation.num_sequences, vocab_size,
                                      where="validation.dataset")
    except TooFewSequences as e:
        raise ValueError(f"validation.num_sequences={validation.num_sequences} at validation.seq_len="
                         f"{validation.seq_len}: {e}. Lower either, or give validation.dataset more text") from None


def check_corpus_length(documents, tokenizer, need: int) -> None:
    """Before the output folder exists: one pass over the documents must hold ``need`` = L + e_max + 1 text tokens
    (BOS/EOS not counted), else training would repeat it (or see only BOS/EOS)."""
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


def data_summary(documents, batcher, accumulation: int, shuffle: bool) -> str:
    """The run's data in one line, for the log at setup (a run said what model it built, never what it read): the
    source (its files, and its records where it counts them), the windows and the samples a step (the batcher's
    micro-batch and processes, times ``accumulation``)."""
    count = getattr(documents, "count", None)
    # a source that reads files counts their records; a torchtune dataset's samples are in its description
    records = f", {count:,} records" if count is not None and getattr(documents, "files", None) else ""
    micro, world_size = batcher.batch_size, batcher.world_size
    batch_size = micro * accumulation * world_size
    return (f"Data ready: {documents.description}{records}{', shuffled' if shuffle else ''}; windows A = tokens "
            f"[0, {batcher.L}) and B = [e, {batcher.L} + e), e ~ U[{batcher.e_lo}, {batcher.e_hi}]; "
            f"{counted(batch_size, 'sample')} a step ({micro} a micro-batch x "
            f"{counted(accumulation, 'accumulation step')} x {counted(world_size, 'process', 'processes')})")


def build_position_sampler(
    node: Optional[Any], model_max_len: Optional[int], seed: int, recipe_state: Optional[Dict[str, Any]],
):
    """``(sampler, generator)`` of the optional ``position_sampler`` node (``torchtune_longshort.rope.
    POSITION_SAMPLERS``: random_pos, PoSE): each training window gets sampled position ids instead of 0..L-1. The
    sampler's ``position_bound`` (every position it draws is below it) must not pass the model's positions. The
    generator is the same on every rank (:func:`window_positions` draws the global batch's rows with it) and is
    restored from ``recipe_state`` for exact resume. ``(None, None)`` without it."""
    if node is None:
        return None, None
    sampler = config.instantiate(node)
    check_position_bound(sampler, model_max_len)
    gen = torch.Generator().manual_seed(seed + 7919)
    if recipe_state is not None and recipe_state.get("position_generator") is not None:
        gen.set_state(recipe_state["position_generator"])
    return sampler, gen


# The recipe state's mark of :func:`window_positions`' draw order (since 2026-12-05: sample by sample); a state
# without it was saved by a version that drew a micro-batch's every window A, then every B.
POSITION_DRAW = "per_sample"


def earlier_position_draw(recipe_state: Optional[Dict[str, Any]], sampler: Any, global_rows: int) -> Optional[str]:
    """One line for the log when a run resumed from ``recipe_state`` with a position sampler was saved by a version
    that drew its position ids in another order (no :data:`POSITION_DRAW` mark) and the order matters (``global_rows``,
    the samples of a micro-batch over all processes, is 2 or more): from here on its samples get other positions
    than that version would have given them, so its losses leave the uninterrupted run's (they did without a word).
    ``None`` otherwise."""
    if sampler is None or not recipe_state or recipe_state.get("position_generator") is None:
        return None
    if recipe_state.get("position_draw") == POSITION_DRAW or global_rows < 2:
        return None
    step = recipe_state.get("step")
    return (f"resume: step {step} was saved by an earlier torchtune_longshort, which drew a micro-batch's position "
            "ids (position_sampler) every window A, then every B; this version draws them sample by sample, so "
            f"from step {step + 1 if isinstance(step, int) else '?'} on the samples get other positions, and other "
            "losses, than that version would have continued with (the run goes on; to continue it exactly, finish it "
            "with the version that started it)")


def window_positions(sampler, generator: torch.Generator, rows: int, seq_len: int, rank: int,
                     world_size: int) -> torch.Tensor:
    """Position ids ``[2 rows, seq_len]`` for this rank's ``rows`` samples, windows A then B: drawn for the global
    micro-batch sample by sample (each sample's window A, then its window B, in the batch's order), this rank's rows
    kept.

    Every rank draws the same rows from the same generator, so a sample gets the same positions whatever the
    number of processes, and the one generator state a checkpoint saves serves every rank on resume (a generator
    per rank gave the samples of rank 1 other positions than one process did, and resumed from rank 0's state).
    Drawn sample by sample, a sample's positions do not depend on how the step's batch is split into micro-batches
    either: ``gradient_accumulation_steps`` 1 and 2 give the same positions (one draw of every A row, then every B
    row, gave the second sample's window A the positions of the first sample's window B once the batch was split).
    """
    drawn = torch.stack([sampler.sample(2, seq_len, generator=generator) for _ in range(rows * world_size)])
    mine = drawn[rank * rows:(rank + 1) * rows]
    return torch.cat([mine[:, 0], mine[:, 1]])


def positions_on(device: torch.device, drawn: torch.Tensor, ropes: Sequence[ScaledRoPE]) -> torch.Tensor:
    """Host position ids ``drawn`` on ``device``; their range, read on the host, is noted in each of ``ropes``
    (:meth:`~torchtune_longshort.rope.ScaledRoPE.note_position_range`), so that the RoPE's bounds check reads
    nothing back from the device (one sync per forward on a GPU)."""
    found = (int(drawn.min()), int(drawn.max())) if drawn.numel() else None  # read before the copy is made
    moved = drawn.to(device)
    if found is not None:
        for rope in ropes:
            rope.note_position_range(moved, *found)
    return moved


class StepStart:
    """What a step starts from on the data side (the batcher's position and e-sampler, the RNGs): taken before each
    step and put back when a bad record stops it, so the checkpoint then saved is exactly the last good step's.
    ``generators``: the run's shared generators by name (None where unused)."""

    def __init__(self, batcher, generators: Dict[str, Optional[torch.Generator]]) -> None:
        self.data = batcher.state_dict()
        self.rng = rng_states()
        self.generators = {k: g.get_state() for k, g in generators.items() if g is not None}

    def restore(self, batcher, generators: Dict[str, Optional[torch.Generator]]) -> None:
        batcher.load_state_dict(self.data)
        set_rng_states(self.rng)
        for k, state in self.generators.items():
            generators[k].set_state(state)
