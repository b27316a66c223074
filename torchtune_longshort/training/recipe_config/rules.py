"""Rules between fields of different sections, in one place: the ones the config alone decides run before any folder
exists (:func:`check_rules`); the ones only the built model can decide run right after it is built, with the same
length rule (:func:`check_built_model`). The model node against its start checkpoint and its tokenizer is
:mod:`.model_match`'s.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
from typing import Any, Optional

import torch

from torchtune_longshort.models.families import check_torchtune_model_type, family_named
from torchtune_longshort.models.s2_attn import check_s2_length
from torchtune_longshort.rope.base import rope_modules
from torchtune_longshort.rope.samplers import check_position_bound
from torchtune_longshort.training.checkpointing import StepCheckpoints
from torchtune_longshort.training.equal_compute import trained_steps
from torchtune_longshort.training.recipe_config.model_match import check_checkpoint_dimensions, check_tokenizer_vocab
from torchtune_longshort.training.recipe_config.recipe import RecipeConfig
from torchtune_longshort.training.recipe_config.validation_overlap import warn_validation_overlap
from torchtune_longshort.config.fields import with_own_defaults
from torchtune_longshort.config.values import named_once, resolve_component
from torchtune_longshort.windows import aligned_positions, resolve_e_range, resolve_min_context

logger = logging.getLogger(__name__)


def check_rules(config: RecipeConfig, world_size: int, local: bool = True) -> None:
    """Raise ``ValueError`` naming the fields when two of them cannot go together (``local=False``: not those that
    read a checkpoint folder)."""
    most = 2**32 - world_size  # torchtune's set_seed: each process seeds numpy with seed + rank, a uint32
    if config.seed is not None and config.seed > most:
        raise ValueError(f"seed={config.seed} is too large for {world_size} process(es): each seeds numpy with seed + "
                         f"rank, which must be below 2**32; accepted: 0 .. {most}, or null (one drawn)")
    _check_resumed_batch_split(config, world_size, local)
    bs, ga = config.batch_size, config.gradient_accumulation_steps
    if bs % (world_size * ga):
        raise ValueError(f"batch_size={bs} is not divisible by world_size ({world_size}) x gradient_accumulation_steps "
                         f"({ga}) = {world_size * ga}; accepted: a multiple of {world_size * ga} (batch_size here is "
                         "global, sequences per optimizer step; torchtune's is per process and micro-batch: its "
                         f"batch_size={bs} with these is batch_size={bs * world_size * ga} here)")
    alpha = config.loss.alpha
    if config.windows.window_bos and alpha != 0:
        raise ValueError(f"window_bos=True with loss.alpha={alpha}: BOS written over each window's first token makes "
                         "windows A and B differ in context, which the alignment loss must not see; use it to "
                         "pre-train (alpha 0) only")
    if world_size > 1 and ":" in config.device:  # torchtune's get_device gives each process cuda:<LOCAL_RANK>
        raise ValueError(f"device={config.device!r} with {world_size} processes: under torchrun each process takes "
                         "the GPU of its LOCAL_RANK, and an index is refused (torchtune's get_device); set "
                         "device=cuda (choose the GPUs with CUDA_VISIBLE_DEVICES)")
    problem = offloading_refusal(config.enable_activation_offloading, config.enable_activation_checkpointing,
                                 config.device)
    if problem is not None:
        raise ValueError(problem)
    learned = config.model.learned_rope(local) if world_size > 1 else None
    if learned is not None and not fsdp_ignores_params():
        raise ValueError(
            f"{learned[0]} gives RoPE method {learned[1]!r}, whose learned parameters every layer shares: across "
            f"{world_size} processes FSDP2 must leave them unsharded (fully_shard's ignored_params, torch >= 2.7), "
            f"which torch {torch.__version__} lacks: upgrade torch, or train in one process (tune run without "
            "--nproc_per_node)")
    _check_stop_after_step(config)
    _check_shuffle(config)
    _check_min_context(config)
    _check_s2_groups(config)
    _check_checkpointer_output(config)
    if local:
        config.model.open_folders(world_size)
        warn_validation_overlap(config)  # files listed on this machine
    declared = config.model.declared_positions(local)
    check_positions(config, declared, "the model node's max_seq_len")
    _check_sampler_reach(config, declared)
    _check_scratch_lora(config)
    _check_scratch_model_type(config)
    _check_scratch_dimensions(config)
    if local:
        check_checkpoint_dimensions(config)
    _check_scheduler(config)
    _check_profiler_schedule(config)


def _check_resumed_batch_split(config: RecipeConfig, world_size: int, local: bool) -> None:
    """``resume=True`` of a run in ``output_dir``: its ``batch_size`` and ``gradient_accumulation_steps`` cannot change
    (exact on resume), so only the process counts that divide them can continue it. Refused naming those counts (the
    split's own refusal advised another batch_size, which the resume then refused)."""
    state = StepCheckpoints(config.output_dir).newest_state() if local and config.resume else None
    saved = None if state is None or state.get("config") is None else with_own_defaults(RecipeConfig, state["config"])
    if saved is None:
        return
    bs, ga = int(saved["batch_size"]), int(saved["gradient_accumulation_steps"])
    if bs % (world_size * ga) == 0:
        return
    counts = [str(n) for n in range(1, bs // ga + 1) if bs % (n * ga) == 0]
    raise ValueError(f"batch_size={bs} is fixed for this run: resume=True continues the run in output_dir="
                     f"{str(config.output_dir)!r}, which trains batch_size={bs} with gradient_accumulation_steps={ga} "
                     f"(neither can change on resume), and {bs} sequences do not split over {world_size} processes x "
                     f"{ga}; resume it with --nproc_per_node {', '.join(counts[:-1])}{' or ' if counts[:-1] else ''}"
                     f"{counts[-1]} (the process counts that divide it), or start a new run in another output_dir")


def _check_shuffle(config: RecipeConfig) -> None:
    """``shuffle`` and the stdlib's ``dataset.shuffle_seed`` are two orders for one stream (a new permutation each
    pass, seeded data_seed; one permutation for every pass, after cutting ``piece_chars`` pieces): one of them."""
    seed = config.dataset.args.get("shuffle_seed")
    if config.shuffle and seed is not None:
        raise ValueError(f"shuffle=True with dataset.shuffle_seed={seed}: two shuffles of the same documents; use one: "
                         "shuffle=True (torchtune's order, a new one each pass, seeded data_seed) with "
                         "dataset.shuffle_seed=null, or dataset.shuffle_seed (one order for every pass; needed for "
                         "piece_chars) with shuffle=False")


def _check_stop_after_step(config: RecipeConfig) -> None:
    """A ``stop_after_step`` past the run's last step would never stop it: the run would train to its end where the
    user asked for an early stop."""
    stop, steps = config.stop_after_step, trained_steps(config.max_steps, config.equal_compute_overhead,
                                                        config.loss.alpha)
    if stop is None or stop <= steps:
        return
    last = f"max_steps={config.max_steps}" if steps == config.max_steps else (
        f"{steps}: max_steps={config.max_steps} over equal_compute_overhead={config.equal_compute_overhead:g}, "
        f"loss.alpha={config.loss.alpha:g} > 0")
    raise ValueError(f"stop_after_step={stop} is past this run's last step ({last}): it would never stop the run; "
                     f"set it to a step before that, or stop_after_step=null to train to the end")


def _check_profiler_schedule(config: RecipeConfig) -> None:
    """An enabled profiler without CPU activity on a CPU run, or whose schedule reaches no traced step in the steps
    this run trains (``max_steps``, or ``stop_after_step``, or Appendix F's fewer steps): torchtune's recipes then
    write no trace, silently."""
    prof = config.profiler
    if prof is None or not prof.enabled:
        return
    steps = trained_steps(config.max_steps, config.equal_compute_overhead, config.loss.alpha)
    if config.stop_after_step is not None:
        steps = min(steps, config.stop_after_step)
    if prof.cpu is False and config.device == "cpu":
        raise ValueError("profiler.cpu=False with device=cpu: the profiler would trace no activity of this run (its "
                         "cuda / xpu activities trace those devices); set profiler.cpu=True, or profiler.enabled=False")
    s = prof.schedule()
    before = s["wait_steps"] + s["warmup_steps"]
    if steps <= before:
        raise ValueError(f"profiler: wait_steps ({s['wait_steps']}) + warmup_steps ({s['warmup_steps']}) = {before} "
                         f"optimizer steps come before the first traced one, and this run trains {steps}: no step "
                         "would be traced; lower profiler.wait_steps / warmup_steps, or train more steps")


def fsdp_ignores_params() -> bool:
    """Whether this torch's FSDP2 ``fully_shard`` can leave parameters out of the sharding (``ignored_params``,
    torch >= 2.7), which a learned RoPE under several processes needs."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6 kept it private; a build without torch.distributed
        return False
    return "ignored_params" in inspect.signature(fully_shard).parameters


def offloading_refusal(offloading: bool, checkpointing: bool, device: str) -> Optional[str]:
    """Why ``enable_activation_offloading`` cannot run with ``enable_activation_checkpointing=checkpointing`` on
    ``device``, in one line naming the keys and the fix; None when it can (see
    :mod:`torchtune_longshort.training.activation_memory`)."""
    if not offloading:
        return None
    if not checkpointing:
        return ("enable_activation_offloading=True needs enable_activation_checkpointing=True: without checkpointing "
                "every op's saved activations would be copied to host memory and back (torchtune refuses it too); set "
                "enable_activation_checkpointing=True, or enable_activation_offloading=False")
    if device.split(":")[0] != "cuda":
        return (f"enable_activation_offloading=True is not accepted with device={device}: offloading moves saved "
                "activations from GPU memory to host memory, and on a CPU they are in host memory already; set "
                "enable_activation_offloading=False")
    return None


def _check_min_context(config: RecipeConfig) -> None:
    try:
        resolve_min_context(config.loss.min_context, config.seq_len)
    except ValueError as e:
        raise ValueError(named_once("loss.min_context", config.loss.min_context, e,
                                    f" at seq_len={config.seq_len}")) from None
    if config.loss.alpha != 0:
        _check_alignment_reach(config)


def _check_alignment_reach(config: RecipeConfig) -> None:
    """With ``loss.alpha > 0``: refuse an ``e_range`` none of whose shifts leaves a position to compare under
    ``loss.min_context`` (the term is 0 at every step: the alpha set does nothing), and warn when some shifts below
    L leave none (those steps train CE alone): ``e >= L/2`` under the default ``listing`` floor. (``e = L`` leaves no
    overlap under any floor: the paper's Table 7 ``[1, L]`` draws it too.)"""
    L, (lo, hi) = config.seq_len, resolve_e_range(list(config.windows.e_range), config.seq_len)
    empty = [e for e in range(lo, hi + 1) if aligned_positions(L, e, config.loss.min_context).n == 0]
    where = (f"e_range={list(config.windows.e_range)} (shifts {lo}..{hi} at seq_len={L}) with "
             f"loss.min_context={config.loss.min_context!r}")
    if len(empty) == hi - lo + 1:
        raise ValueError(f"{where}: no shift leaves a position to compare, so the alignment term is 0 at every step "
                         f"and loss.alpha={config.loss.alpha} does nothing; lower e_range, or set "
                         "loss.min_context=none (the whole overlap), or loss.alpha=0")
    below_l = [e for e in empty if L // 2 < e < L]  # e = L/2 compares nothing under the listing floor by design
    if below_l:
        logger.warning("%s: %d of the %d shifts (%d..%d) leave no position to compare (%d with e = L/2 and e = L, "
                       "which compare nothing by design); the steps that draw them train CE alone (the paper's Table 7 "
                       "[1, L] runs set loss.min_context: none)", where, len(below_l), hi - lo + 1, below_l[0],
                       below_l[-1], len(empty))


def _check_checkpointer_output(config: RecipeConfig) -> None:
    """``checkpointer.output_dir`` (torchtune's configs set it to ``${output_dir}``) other than ``output_dir``: the
    recipe writes every checkpoint under ``output_dir`` and never builds that checkpointer, so the value would be
    ignored and the checkpoints found elsewhere than where the config says."""
    given = config.checkpointer.args.get("output_dir")
    if given is not None and os.path.abspath(str(given)) != os.path.abspath(str(config.output_dir)):
        raise ValueError(f"checkpointer.output_dir={str(given)!r} is not output_dir={str(config.output_dir)!r}: this "
                         "recipe writes every checkpoint under output_dir (step_<k>/); set checkpointer.output_dir: "
                         "${output_dir} or drop it (or make that folder output_dir)")


def _check_s2_groups(config: RecipeConfig) -> None:
    """A model node with ``s2_attn: True`` (at any depth): its groups at ``seq_len`` are even and divide it (both
    windows are ``seq_len`` tokens; validation runs in eval mode, with full attention)."""
    node, where = dict(config.model.args), "model"
    while True:
        if node.get("s2_attn"):
            check_s2_length(config.seq_len, node.get("s2_group_size"), node.get("s2_group_size_ratio", 0.25), where)
        elif node.get("s2_group_size") is not None or node.get("s2_group_size_ratio", 0.25) != 0.25:
            # not refused: s2_attn=False is how an ablation of a LongLoRA config turns S2-Attn off
            logger.warning("%s.s2_group_size / s2_group_size_ratio given while %s.s2_attn is off: ignored (full "
                           "attention in training too); set %s.s2_attn=True to train with S2-Attn", where, where, where)
        if not isinstance(node.get("model"), dict):
            return
        node, where = node["model"], f"{where}.model"


def check_positions(config: RecipeConfig, max_len: Optional[int], how: str) -> None:
    """``seq_len`` and ``validation.seq_len`` fit the model's positions ``max_len`` (None: not known yet); ``how``
    says where ``max_len`` comes from."""
    if max_len is None:
        return
    L = config.seq_len
    if L > max_len:
        raise ValueError(
            f"seq_len={L} is above the range of the model's RoPE ({how}): max_seq_len={max_len}. Lower seq_len or "
            "scale RoPE to a longer max_seq_len (model: rope_scaled ... max_seq_len)")
    val = config.validation
    if val is not None and val.seq_len > max_len:
        raise ValueError(f"validation.seq_len={val.seq_len} is above the model's max_seq_len={max_len} ({how})")


def _check_sampler_reach(config: RecipeConfig, max_len: Optional[int]) -> None:
    """The ``position_sampler``, built as the setup builds it (a sampler is a few numbers), asked what the setup asks
    of it: that its positions stay inside the model's ``max_len`` (None: not known yet)."""
    node = config.position_sampler
    if node is None or max_len is None:
        return
    try:
        sampler = resolve_component("position_sampler._component_", node.component)(**node.args)
    except (TypeError, ValueError) as e:
        raise ValueError(f"position_sampler: {e}") from None
    check_position_bound(sampler, max_len)


def _check_scratch_lora(config: RecipeConfig) -> None:
    """LoRA from random weights (no start checkpoint) was refused only when ``step_0`` was written, after the run had
    claimed its folder, with a message (merge the adapters with ``get_merged_lora_ckpt``) a config cannot act on."""
    lora = config.model.lora_settings()
    if config.checkpointer.checkpoint_dir is None and lora:
        raise ValueError(f"{lora[0]} with checkpointer.checkpoint_dir=null: LoRA trains adapters over a pre-trained "
                         "model's weights, and this config starts from random ones; set checkpointer.checkpoint_dir "
                         "to a checkpoint folder (as the shipped tiny/lora_from_checkpoint.yaml does), or drop the "
                         "model's lora_* settings to train every weight")


def _check_scratch_model_type(config: RecipeConfig) -> None:
    """From random weights ``checkpointer.model_type`` is checked against the model node's ``family``, as it is
    against a start folder's (``model_type: FOO`` passed without a word)."""
    model_type = config.checkpointer.model_type
    if config.checkpointer.checkpoint_dir is not None or model_type is None:
        return
    # deferred: torchtune (model_setup imports it; importing the config kit does not need it)
    from torchtune_longshort.training.model_setup import model_kwargs

    family = model_kwargs(config.model.args).get("family")
    if family is not None:
        check_torchtune_model_type(family_named(family), model_type, "checkpointer.model_type", "model.family")


def _check_scratch_dimensions(config: RecipeConfig) -> None:
    """From random weights (no start checkpoint, not resuming) the model node must give a ``config.json``: its
    family and dimensions (the one ``step_0`` gets)."""
    if config.checkpointer.checkpoint_dir is not None or config.resume:
        return
    # deferred: torchtune (model_setup imports it; importing the config kit does not need it)
    from torchtune_longshort.training.model_setup import scratch_config

    scratch_config(config.model.args)  # the family writes config.json, checking the dimensions


def _check_scheduler(config: RecipeConfig) -> None:
    """The LR scheduler built once on a stand-in optimizer, so its own argument checks run now."""
    sched = config.lr_scheduler
    if sched is None:
        return
    import torch

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    try:
        built = resolve_component("lr_scheduler._component_", sched.component)(
            opt, num_training_steps=config.max_steps, last_epoch=-1, **sched.args)
        # a LambdaLR's rule at the steps that take each branch of a warm-up + decay schedule (num_cycles='abc' raised
        # only past the warm-up, mid-run)
        for rule in getattr(built, "lr_lambdas", ()):
            for step in sorted({0, 1, config.max_steps // 2, config.max_steps}):
                factor = rule(step)
                if not math.isfinite(factor):
                    raise ValueError(f"its learning-rate factor at step {step} is {factor}")
    except (ValueError, TypeError, IndexError) as e:
        args = ", ".join(f"lr_scheduler.{k}={v!r}" for k, v in sched.args.items())
        raise ValueError(f"lr_scheduler: {e} (its arguments: {args})") from None


def check_built_model(config: RecipeConfig, model: Any, tokenizer: Any, rope_spec: Optional[dict]) -> int:
    """After the build: the tokenizer's vocabulary fits the embedding table, and the lengths fit the built model's
    positions. Returns the model's vocabulary size."""
    model_vocab = model.tok_embeddings.num_embeddings
    check_tokenizer_vocab(config, tokenizer, model_vocab, "as built")
    method = (rope_spec or {}).get("method", "default (no RoPE scaling)")
    check_positions(config, getattr(model, "max_seq_len", None), f"{method}, as built")
    for m in rope_modules(model):  # the method's own rule (CLEX: a draw past its positions failed mid-run)
        m.check_training_length(config.seq_len)
    return model_vocab
