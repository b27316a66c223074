"""The recipe's weights on disk: where the start weights come from, and what each ``step_<k>`` holds.

Reading and writing go through the checkpoint folder (``models.hf_checkpoint.CheckpointFolder``: its model family
converts the weights with torchtune's own functions, the ones torchtune's ``FullModelHFCheckpointer`` dispatches on
``model_type``), and ``training.checkpointing`` (staged, atomic ``step_<k>`` folders, the resumable state beside
them); a LoRA run's adapters are the step folder's PEFT ``adapter/`` (``models.peft_adapter``). The config's
``checkpointer`` node names the start folder (``checkpoint_dir``); its ``model_type``, when given, must be one that
converts the folder's family (``training.recipe_config.components.CheckpointerConfig``). Used by
``torchtune_longshort/recipes/longshort_finetune.py``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torchtune import training
from torchtune.config import instantiate
from torchtune.modules.peft import get_merged_lora_ckpt

from torchtune_longshort.devices import rng_states
from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
from torchtune_longshort.models.hf_model import decoder_config
from torchtune_longshort.models.hf_rope import native_positions
from torchtune_longshort.models.peft_adapter import ADAPTER_DIR, lora_modules, write_peft_adapter
from torchtune_longshort.training.checkpointing import (
    RESTART, STEP_PATTERN, StepCheckpoints, staged_state_path,
)
from torchtune_longshort.training.data_setup import POSITION_DRAW
from torchtune_longshort.training.durable_save import atomic_torch_save
from torchtune_longshort.training.model_setup import LoRAInfo, model_kwargs
from torchtune_longshort.training.recipe_config import RecipeConfig
from torchtune_longshort.training.staging import own_staged, start_staged, started_mark
from torchtune_longshort.training.step_tokenizer import lost_tokenizer_fix


def tokenizer_source(config: RecipeConfig) -> Optional[str]:
    """Where the tokenizer files that go into every checkpoint come from: ``tokenizer.path`` (the tokenizer the run
    trains with; its folder's tokenizer files are copied unchanged, a Llama-3 ``original/tokenizer.model`` with the
    files of the model folder above it), else the start checkpoint folder."""
    if config.tokenizer.path is not None:
        return str(config.tokenizer.path)
    start = config.checkpointer.checkpoint_dir
    return str(start) if start is not None else None


def discard_scratch_start(ckpts: StepCheckpoints) -> None:
    """What a start from scratch writes in ``.staging`` (``step_0/``) removed, and ``.staging`` once empty: before it
    writes it (a killed start left one) and when its setup refuses. Only that: what an earlier run that ``overwrite``
    replaces staged stays until the setup has passed (that run is deleted then, and what it staged with it), as its
    ``step_<k>.pt`` may be its resume point (:func:`~.checkpointing.state_file`).
    :meth:`~.checkpointing.StepCheckpoints.clean_staging` here finished that run's commit before a refusal."""
    staged = ckpts.staging_root / "step_0"
    if own_staged(staged):
        shutil.rmtree(staged)
    elif staged.is_dir() and not staged.is_symlink() and not any(staged.iterdir()):
        staged.rmdir()  # holds nothing of anyone's (a run stopped in its setup: output_aside.nothing_written)
    if not os.path.lexists(staged) and own_staged(started_mark(staged)) and started_mark(staged).is_file():
        started_mark(staged).unlink()  # a folder that stays (a user's file in it) keeps its mark
    if ckpts.staging_root.is_dir() and not ckpts.staging_root.is_symlink() and not any(ckpts.staging_root.iterdir()):
        ckpts.staging_root.rmdir()


def write_scratch_start(config: RecipeConfig, seed: int, ckpts: StepCheckpoints, commit: bool = True) -> Path:
    """Training from scratch: build ``config.model`` in float32 with ``seed`` and write it as ``step_0``, a checkpoint
    folder like every ``step_k`` (so every later path loads the same way); its ``config.json`` is the one the model
    node's family built the model from (``models.hf_model.decoder_config``). Returns the folder: committed, or with
    ``commit=False`` left in ``.staging`` for :meth:`StepCheckpoints.commit` once the run's setup has succeeded."""
    with training.set_default_dtype(torch.float32):
        torch.manual_seed(seed)
        scratch = instantiate(config.model.node())
    start_staged(ckpts.staging_root / "step_0")
    write_hf_checkpoint(
        ckpts.staging_root / "step_0",
        scratch.state_dict(),
        decoder_config(model_kwargs(config.model.args)),
        rope_spec=getattr(scratch, "rope_scaling", None),
        tokenizer=tokenizer_source(config),
        shown_as=ckpts.root / "step_0",
    )
    return ckpts.commit(ckpts.staging_root / "step_0", 0) if commit else ckpts.staging_root / "step_0"


def full_state_dicts(model, optimizer, distributed: bool, is_rank_zero: bool, device: torch.device):
    """``(model state dict on CPU, optimizer state dict)``, gathered from every rank when sharded."""
    if distributed:
        model_sd = training.gather_cpu_state_dict(model, is_rank_zero, device=device)
        opt_sd = training.get_full_optimizer_state_dict(model, optimizer, is_rank_zero, device=device)
        return model_sd, opt_sd
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, optimizer.state_dict()


def stage_step(
    staged: Path,
    model_sd: Dict[str, torch.Tensor],
    lora: LoRAInfo,
    hf_config: Dict[str, Any],
    rope_spec: Optional[Dict[str, Any]],
    tokenizer: Optional[str],
    recipe_state: Dict[str, Any],
) -> None:
    """Write one step into the staging area: the checkpoint folder ``staged`` with the weights (LoRA: merged, the
    adapted ones in float32) and, for LoRA, its PEFT ``adapter/`` (the adapters and other trainable weights, which a
    resumed run reads back), and the recipe state beside it
    (:func:`~torchtune_longshort.training.checkpointing.staged_state_path`)."""
    start_staged(staged)  # its mark first: a folder there without one is a user's (.staging)
    if lora.enabled:
        write_peft_adapter(staged / ADAPTER_DIR, model_sd, hf_config, alpha=lora.alpha, dropout=lora.dropout,
                           trainable=lora.trainable_names, base_model=lora.base_dir,
                           quantized_base=lora.quantized_base, rope_spec=rope_spec)
        model_sd = get_merged_lora_ckpt(_float32_copies(model_sd), rank=lora.rank, alpha=lora.alpha)
    # messages name the step folder it becomes, not the staging folder the commit renames away
    write_hf_checkpoint(staged, model_sd, hf_config, rope_spec=rope_spec, tokenizer=tokenizer,
                        shown_as=staged.parent.parent / staged.name)
    atomic_torch_save({**recipe_state, "adapter": lora.enabled}, staged_state_path(staged))


def _float32_copies(model_sd: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """What a LoRA run merges: ``model_sd`` with each adapted weight and its ``A`` / ``B`` as float32 copies (the
    other weights as they are). A copy, because ``get_merged_lora_ckpt`` adds ``B @ A`` into the base weights in
    place and on one CPU process the state dict's tensors are the live model's (every save added the adapters to
    the frozen base the run went on training against; a resumed run, which loads the clean base, then diverged).
    Float32, because ``base + alpha / r * B @ A`` rounded again to bf16 would not be the model the run trained (its
    PEFT adapter on the same base gives the merged logits within 1e-4 only this way); those weights are written in
    float32."""
    out = dict(model_sd)
    for m in lora_modules(model_sd):
        for key in (f"{m}.weight", f"{m}.lora_a.weight", f"{m}.lora_b.weight"):
            out[key] = model_sd[key].to(torch.float32, copy=True)
    return out


def start_state_dict(config: RecipeConfig, ckpts: StepCheckpoints, resume_dir: Optional[Path], lora: LoRAInfo,
                     seed: int, is_rank_zero: bool, barrier) -> Tuple[Dict[str, torch.Tensor], Path, Path]:
    """``(torchtune state dict to start from, the start checkpoint folder, where it is read now)``.

    From scratch (``checkpointer.checkpoint_dir: null``) rank 0 first writes the model as ``step_0`` into
    ``.staging`` (:func:`write_scratch_start`), every rank waits at ``barrier()`` and reads it there; the recipe
    commits it once its setup has succeeded, so a setup that refuses leaves an earlier run that ``overwrite``
    replaces whole. Full fine-tuning resumes from the saved weights; LoRA from the base weights (its adapters come
    from the step's ``adapter/``, which names this start folder as its base: ``lora.base_dir``)."""
    start_dir = config.checkpointer.checkpoint_dir
    read_dir = None
    if start_dir is None:
        if resume_dir is None:
            if is_rank_zero:
                discard_scratch_start(ckpts)  # what a killed start of an earlier run left there
                write_scratch_start(config, seed, ckpts, commit=False)
            read_dir = ckpts.staging_root / "step_0"
        barrier()
        start_dir = str(ckpts.path(0))
        if (resume_dir is not None and not lora.enabled and not ckpts.path(0).is_dir()
                and CheckpointFolder.open(resume_dir).rope_spec is None):
            # step_0, the random start, deleted to save disk: the resumed step's config.json (plain RoPE: step_0's,
            # its length the model's) is the base its next steps are written with
            start_dir = read_dir = resume_dir
        elif resume_dir is not None and not ckpts.path(0).is_dir():
            why = "its LoRA adapters' base" if lora.enabled else "the base its RoPE-scaled steps are written with"
            raise ValueError(f"resume=True: {start_dir} (this run's random start, {why}) is missing: put it back, "
                             f"or train anew: {ckpts.restart()}")
        elif resume_dir is not None:
            check_start_tokenizer(ckpts, resume_dir)
    lora.base_dir = str(Path(start_dir).resolve())
    read_dir = read_dir or Path(start_dir)
    load_dir = str(resume_dir) if (resume_dir is not None and not lora.enabled) else str(read_dir)
    return CheckpointFolder.open(load_dir).tune_state_dict(), Path(start_dir), read_dir


def check_start_tokenizer(ckpts: StepCheckpoints, resume_dir: Path) -> None:
    """A resume from scratch reads ``step_0`` (the random start, the base its steps are written with): where it lost
    its tokenizer files, refused as the newest step's loss is (``StepCheckpoints.why_not_resumable``), naming the
    step or tokenizer source to copy them from (it was the checkpoint's refusal alone, no fix)."""
    start = ckpts.path(0)
    try:
        CheckpointFolder.open(start)
    except FileNotFoundError as e:
        steps = sorted((int(m.group(1)), p) for p in ckpts.root.iterdir()
                       if (m := STEP_PATTERN.match(p.name)) and p.is_dir() and int(m.group(1)) > 0)
        fix = lost_tokenizer_fix(start, [p for _, p in reversed(steps)], StepCheckpoints._saved_config(resume_dir)) \
            if "tokenizer" in str(e) else None
        if not fix:
            raise
        raise FileNotFoundError(f"resume=True: {' '.join(str(e).split())}; {fix}") from None


def hf_config_for_save(base: Dict[str, Any], rope_spec: Optional[Dict[str, Any]], model) -> Dict[str, Any]:
    """The start folder's config.json ``base``; for plain RoPE its length is the model's where that is longer (a
    run at more positions than the start's), else the start's: a run at fewer (``max_seq_len: 1024`` on an 8k
    checkpoint, to save memory) leaves the model's RoPE and positions as they were, and wrote the shorter length,
    which ``hf`` and ``longshort`` then held every later evaluation to. RoPE specs set their own."""
    hf_cfg = dict(base)
    if not rope_spec:
        hf_cfg["max_position_embeddings"] = max(int(getattr(model, "max_seq_len", 0)), native_positions(base))
    return hf_cfg


def check_start_unchanged(recipe_state: Optional[Dict[str, Any]], start: Path, read_dir: Path, lora: LoRAInfo,
                          restart: Callable[[], str] = lambda: RESTART) -> \
        Optional[str]:
    """A LoRA run's resume reads its base weights from the start folder again: refused when that folder's content is
    not the one the saved adapters were trained on (another checkpoint of the same shapes copied over it would train
    on without a word). Returns the digest to record in this run's states, a full fine-tune's too (it resumes from
    its own saved weights, but a resume that names its start elsewhere, the folder moved, goes on where the digest is
    the same: :mod:`~torchtune_longshort.training.moved_sources`). ``restart``: how the run starts anew (the recipe's
    ``StepCheckpoints.restart``, a user's file in output_dir named to move out before the overwrite, which the
    overwrite advised alone refused). A saved digest is compared by the formula that made it
    (:meth:`~CheckpointFolder.holds_digest`: a state saved before the ``v2:`` digest resumes as before); the one
    returned is the current formula's."""
    folder = CheckpointFolder.open(read_dir)
    digest = folder.content_digest()
    saved = (recipe_state or {}).get("start_digest")  # a state saved before the v2 digest: the first formula's
    if lora.enabled and saved is not None and not folder.holds_digest(saved, digest):
        raise ValueError(f"resume=True: the start checkpoint {str(start)!r} (checkpointer.checkpoint_dir) is not the "
                         f"one step {recipe_state['step']}'s adapters were trained on: its config.json or weights "
                         f"changed since; resume with that checkpoint back in place, or train anew: {restart()}")
    return digest


def training_state(step: int, optimizer_sd, lr_scheduler, batcher, generators: Dict[str, Optional[torch.Generator]],
                   run_config: Dict[str, Any], start_digest: Optional[str] = None,
                   rank_rngs: Optional[list] = None) -> Dict[str, Any]:
    """What the recipe state (``recipe_state/step_<k>.pt``) holds: everything an exact resume needs besides the
    weights (optimizer, LR schedule, data position, RNG states), the run's config as given, interpolations
    resolved, and a LoRA run's start checkpoint's :meth:`~CheckpointFolder.content_digest` (both compared on
    resume)."""
    return {
        "start_digest": start_digest,
        "step": step,
        "optimizer": optimizer_sd,
        "lr_scheduler": lr_scheduler.state_dict() if lr_scheduler else None,
        "data": batcher.state_dict(),
        **rng_states(),  # torch_rng, and cuda_rng on a GPU
        "rank_rngs": rank_rngs,  # several processes: each rank's (devices.rank_rng_states)
        **{k: g.get_state() if g is not None else None for k, g in generators.items()},  # position, rope
        "position_draw": POSITION_DRAW,  # the order window_positions draws in (earlier_position_draw)
        "config": run_config,
    }
