"""What a resumed run reads (the step's recipe state, ``recipe_state/step_<k>.pt``, and a LoRA run's adapters from the
step folder's ``adapter/``) and may change: the saved config against the new one.

Exact resume needs the same model, data, windows and loss; a change there would silently train another run, so it
is refused. Changes a user means (more steps, another learning rate after a NaN, logging, checkpoint period) are
applied and logged. Which is which, each field of the typed config declares (``setting(resume=...)``,
:data:`~torchtune_longshort.config.fields.RESUME_POLICIES`); :data:`RESUME_POLICY` is read from those declarations, so a
new field cannot be left out.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from torchtune_longshort.config.values import resolve_component
from torchtune_longshort.models.families import converted_alike
from torchtune_longshort.models.hf_checkpoint import CheckpointFolder, read_hf_config
from torchtune_longshort.models.peft_adapter import ADAPTER_DIR, read_peft_adapter
from torchtune_longshort.plural import counted
from torchtune_longshort.training.checkpointing import StepCheckpoints, read_recipe_state
from torchtune_longshort.config.fields import resume_policies, with_checked_values, with_own_defaults
from torchtune_longshort.training.recipe_config.paths import resolved_config
from torchtune_longshort.training.recipe_config.recipe import RecipeConfig
from torchtune_longshort.training.recipe_config.rope_node import ROPE_SCALED, scaling_start_of_node
from torchtune_longshort.training.moved_data import moved_data
from torchtune_longshort.training.moved_sources import SamePlace, moved_folders, moved_sources
from torchtune_longshort.training.tokenizer_unchanged import check_tokenizer_unchanged
from torchtune_longshort.rope import ROPE_METHODS
from torchtune_longshort.windows import resolve_e_range

# {top-level key (or nested key a section ignores): exact / applied / ignored}, from the typed config's declarations.
# A nested node follows its top-level key (compared whole); a key the config does not declare (one an older version
# saved) is applied.
RESUME_POLICY = resume_policies(RecipeConfig)
# a component's argument that permits importing code, not what the run trains (:func:`_policy`)
TRUST_KEY = "trust_remote_code"
OUTPUT_DIR = "<output_dir>"  # paths inside the run's folder are compared relative to it
ABSENT = "<absent>"  # a key one of the two configs does not have
MODEL_TYPE = "checkpointer.model_type"


def _as_run_sees_it(config: Dict[str, Any], step_spec: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``config`` with its paths resolved (:func:`~.recipe_config.paths.resolved_config`; a config saved before
    paths were resolved is read against the working directory) and those inside its ``output_dir`` written relative
    to it, the top-level fields it leaves out set to their defaults (:func:`~torchtune_longshort.config.fields.
    with_own_defaults`) and their values as the typed config reads them (:func:`~torchtune_longshort.config.fields.
    with_checked_values`: ``clip_grad_norm: inf`` is null), and each component node's arguments to their defaults
    (:func:`_with_argument_defaults`), so that two spellings of one run compare equal."""
    from omegaconf import OmegaConf

    resolved = with_own_defaults(RecipeConfig, OmegaConf.to_container(resolved_config(config), resolve=True))
    resolved = with_checked_values(RecipeConfig, resolved)
    resolved = {k: _with_argument_defaults(v, step_spec if k == "model" else None) for k, v in resolved.items()}
    out = resolved.get("output_dir")

    def relative(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: relative(x) for k, x in v.items()}
        if isinstance(v, list):
            return [relative(x) for x in v]
        if isinstance(out, str) and isinstance(v, str) and (v == out or v.startswith(out.rstrip("/") + "/")):
            return OUTPUT_DIR + v[len(out.rstrip("/")):]
        return v

    return relative(resolved)


# what apply_rope_scaling takes from the model, not from a method's own default
_FROM_THE_MODEL = ("dim", "max_seq_len", "base", "layout", "original_max_seq_len")


def _with_argument_defaults(node: Any, step_spec: Optional[Dict[str, Any]] = None) -> Any:
    """``node`` with each ``_component_`` node in it (nested ones included) given the arguments it leaves out (a
    ``rope_scaled`` node: or sets null) at the value the build uses: the component's signature default; for a
    ``rope_scaled`` node, the method's own keyword defaults, and for the top-level model node over a step of the
    same learned method (``step_spec``, the resumed step's ``longshort_rope``) the settings its learned parameters
    were trained with (what the resumed build keeps, :meth:`~.recipe_config.components.ModelSection.resumed_node`).
    A learned setting with no step to say it (it is the start checkpoint's) and a component that does not import
    stay as given. ``model.act: silu`` then equals a node without ``act`` whose run trained under silu."""
    if isinstance(node, list):
        return [_with_argument_defaults(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _with_argument_defaults(v) for k, v in node.items()}
    component = out.get("_component_")
    if not isinstance(component, str):
        return out
    defaults: Dict[str, Any] = {}
    method = ROPE_METHODS.get(out.get("method")) if component == ROPE_SCALED else None
    if method is not None:
        # not those apply_rope_scaling derives when left out (a factor L'/L, CLEX's t_max): Llama3RoPE's factor
        # default 8.0 is not what a node without factor builds
        derived = set(method.default_kwargs(2, 1, {}))
        defaults.update({n: d for n, d in _signature_defaults(method).items()
                         if n not in _FROM_THE_MODEL and n not in method.learned_settings and n not in derived})
        defaults.update(_derived_arguments(method, out, derived))
        defaults.update(method.kept_learned_settings(step_spec, out)[0])
    elif component != ROPE_SCALED:
        try:
            defaults = _signature_defaults(resolve_component("_component_", component))
        except Exception:  # noqa: BLE001 - a node that does not import is compared as given (the build refuses it)
            defaults = {}
    for name, default in defaults.items():
        # a rope_scaled node's null is a setting left out (derived, or kept from the learned parameters); any other
        # component is handed the null itself, which equals its default only where that is null
        if name not in out or (method is not None and out[name] is None):
            out[name] = default
    return out


def _derived_arguments(method: Any, node: Dict[str, Any], derived: set) -> Dict[str, Any]:
    """The ``derived`` arguments (YaRN's ``factor``, CLEX's ``t_max``, ``original_max_seq_len``) a ``rope_scaled``
    node leaves out, as ``apply_rope_scaling`` derives them from the node: its ``max_seq_len`` over the length it
    scales from (an inner ``hf_decoder`` folder's positions, :func:`~.recipe_config.rope_node.scaling_start_of_node`),
    so ``model.factor=2`` on a run whose factor was 16384/8192 is no change. None where the node does not say it."""
    start, target = scaling_start_of_node(node), node.get("max_seq_len")
    if not isinstance(start, int) or not isinstance(target, int) or isinstance(target, bool):
        return {}
    given = {n: node[n] for n in derived if node.get(n) is not None}
    try:
        built = method.default_kwargs(target, start, given)
    except (ValueError, TypeError, ZeroDivisionError):  # refused by the config check, not compared here
        return {}
    return {n: built[n] for n in derived if n not in given and n in built}


def _signature_defaults(target: Any) -> Dict[str, Any]:
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return {}
    # a tuple default as YAML spells it (AdamW's betas: [0.9, 0.999])
    return {p.name: list(p.default) if isinstance(p.default, tuple) else p.default for p in params
            if p.default is not inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def _flat(d: Any, prefix: str = "") -> Dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: Dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _policy(key: str) -> str:
    """The resume policy of a flattened key: its own (a nested key a section ignores), else its top-level key's. A
    component's ``trust_remote_code`` (``hf_decoder``'s, ``checkpoint_tokenizer``'s, the checkpointers': whether a
    folder's code of one's own may be imported, as ``checkpointer.trust_remote_code``) is never compared."""
    if key.rsplit(".", 1)[-1] == TRUST_KEY and "." in key:
        return "ignored"
    return RESUME_POLICY.get(key) or RESUME_POLICY.get(key.split(".", 1)[0], "applied")


def _same_shifts(old: Dict[str, Any], new: Dict[str, Any]) -> bool:
    """Whether two flattened configs' ``e_range`` stand for the same shifts at their ``seq_len`` (``[1, "L/2"]`` and
    ``[1, 32]`` at 64): one range written two ways, not a change. One that does not resolve is compared as written."""
    try:
        return resolve_e_range(old["e_range"], old["seq_len"]) == resolve_e_range(new["e_range"], new["seq_len"])
    except (KeyError, TypeError, ValueError):
        return False


def compare_resume_config(saved: Dict[str, Any], new: Dict[str, Any], step_spec: Optional[Dict[str, Any]] = None,
                          notes: Optional[Dict[str, str]] = None, moved: Optional[SamePlace] = None
                          ) -> List[Tuple[str, Any, Any]]:
    """Refuse changes that break exact resume (``ValueError`` listing each); return the others as
    ``(key, old, new)`` for the caller to apply and log. Both configs are plain dicts (interpolations resolved),
    compared with their paths resolved, those inside the run's folder relative to it and the defaults they leave
    out filled (:func:`_as_run_sees_it`; ``step_spec``: the resumed step's ``longshort_rope``, which says what a
    learned RoPE's settings left out were; ``notes``: words said after a key's refused change; ``moved``: which
    changed paths name a start or tokenizer moved as it was, :func:`~.moved_sources.moved_sources`)."""
    old_flat, new_flat = _flat(_as_run_sees_it(saved, step_spec)), _flat(_as_run_sees_it(new, step_spec))
    broken, (applied, moved_notes) = [], (moved(old_flat, new_flat) if moved else ([], {}))
    new_flat.update({key: a for key, a, _ in applied})
    notes = {**(notes or {}), **moved_notes}
    if _same_shifts(old_flat, new_flat):
        new_flat["e_range"] = old_flat["e_range"]
    if converted_alike(old_flat.get(MODEL_TYPE), new_flat.get(MODEL_TYPE)):
        new_flat[MODEL_TYPE] = old_flat[MODEL_TYPE]  # llama2 and LLAMA2, LLAMA3_2 and LLAMA3: one conversion
    for key in sorted(set(old_flat) | set(new_flat)):
        a, b = old_flat.get(key, ABSENT), new_flat.get(key, ABSENT)
        if a == b or _policy(key) == "ignored":
            continue
        if _policy(key) == "exact":
            # The lr schedule's shape is fixed by the run; its length follows max_steps and is not a change here.
            broken.append((key, ABSENT in (a, b), f"{key}: {a!r} -> {b!r}{(notes or {}).get(key, '')}"))
        else:
            applied.append((key, a, b))
    if broken:
        # a default that one side lacks and neither config writes (another RoPE method's, a node set to null) follows
        # from a change named beside it; named alone where nothing else differs
        written = set(_flat(saved)) | set(_flat(new))
        named = ([(key, text) for key, gone, text in broken if key in written or not gone]
                 or [(key, text) for key, _, text in broken])
        # a key whose note says how to resume (dataset.path: the data back in place) is not told it again
        rest = [key for key, _ in named if key not in (notes or {})]
        values = "values" if len(rest) == len(named) else f"value{'s' * (len(rest) > 1)} of {', '.join(rest)}"
        advice = (f"Resume with the saved {values} (the recipe state's 'config'), or start a new run in another "
                  "output_dir" if rest else "Otherwise, start a new run in another output_dir")
        raise ValueError(
            "resume=True with a config that changes what the run trains, which would not continue the same run "
            f"exactly: {'; '.join(text for _, text in named)}. {advice}"
        )
    return applied


def apply_resume_changes(changes: List[Tuple[str, Any, Any]], optimizer, lr_scheduler,
                         log: Callable[[str], None], schedule_at: Optional[Callable[[int], Tuple[Any, Any]]] = None
                         ) -> None:
    """Apply (and ``log``) what a resumed run changes on purpose, after the saved optimizer state is loaded: its
    param groups would otherwise keep the old values (an lr lowered after a NaN would silently not apply). An
    optimizer argument the new config leaves out takes the optimizer's own default. Then the groups' lr is the
    (new) schedule's at the resumed step (:func:`scheduled_lr`). ``schedule_at(max_steps)``: the run's
    ``(optimizer, lr_scheduler)`` built for ``max_steps`` on a stand-in optimizer, which says whether a ``max_steps``
    change leaves the steps made on another schedule (:func:`_schedule_note`). The keys a folder's move changed
    (:func:`~.moved_sources.moved_folders`) are logged in one line naming the folder."""
    moves, changes = moved_folders(changes)
    for move in moves:
        log(f"resume: {move} (applied)")
    for key, old, new in changes:
        if key.startswith("optimizer.") and key != "optimizer._component_":
            name = key.split(".", 1)[1]
            if new == ABSENT:
                new = _default_argument(optimizer, name)
            for group in optimizer.param_groups:
                if name in group:
                    group[name] = new
                    if name == "lr":
                        group["initial_lr"] = new
            if name == "lr" and lr_scheduler is not None:
                lr_scheduler.base_lrs = [new for _ in lr_scheduler.base_lrs]
        made = 0 if lr_scheduler is None or key != "max_steps" else lr_scheduler.last_epoch
        log(f"resume: {key} changed {old!r} -> {new!r} (applied{_schedule_note(old, new, made, schedule_at)})")
    scheduled_lr(optimizer, lr_scheduler)


def _schedule_note(old: Any, new: Any, made: int, schedule_at: Optional[Callable[[int], Tuple[Any, Any]]]) -> str:
    """What a ``max_steps`` change from ``old`` to ``new``, resumed after ``made`` steps, means for the losses where
    the lr schedule depends on it: the steps made trained on the ``old``-step schedule and the rest follow the
    ``new``-step one (:func:`scheduled_lr`), so the losses are not an uninterrupted ``new``-step run's (exact losses
    are promised for an unchanged config only). "" without a schedule, when the steps made had the same lrs under
    both (a warmup not over yet), or when no step is left."""
    if schedule_at is None or not (isinstance(old, int) and isinstance(new, int) and 0 < made < new):
        return ""
    if _first_lrs(*schedule_at(old), made) == _first_lrs(*schedule_at(new), made):
        return ""
    done = "step 1 was" if made == 1 else f"steps 1-{made} were"
    rest = f"step {new} follows" if made + 1 == new else f"steps {made + 1}-{new} follow"
    return (f": {done} made on the {old}-step schedule, {rest} the {new}-step one; the losses are not an "
            f"uninterrupted {new}-step run's")


def _first_lrs(optimizer, lr_scheduler, steps: int) -> List[List[float]]:
    """The lrs of ``optimizer``'s groups at each of its first ``steps`` steps, the scheduler stepped as the recipe
    steps it (once per optimizer step)."""
    out = []
    for _ in range(steps):
        out.append([group["lr"] for group in optimizer.param_groups])
        optimizer.step()
        lr_scheduler.step()
    return out


def _default_argument(optimizer, name: str) -> Any:
    """The default of ``name`` in the optimizer class's constructor (a key the resumed config no longer gives)."""
    param = inspect.signature(type(optimizer).__init__).parameters.get(name)
    if param is None or param.default is inspect.Parameter.empty:
        raise ValueError(f"resume=True without optimizer.{name}: {type(optimizer).__name__} has no default for it; "
                         "give its value")
    return param.default


def scheduled_lr(optimizer, lr_scheduler) -> None:
    """Set each param group's lr to the schedule's value at the scheduler's step (``base_lr * lambda(step)`` for a
    ``LambdaLR``, torchtune's cosine and linear schedules; a scheduler's own closed form otherwise). The loaded
    optimizer state holds the lr the *saved* schedule gave the next step: with ``max_steps`` or ``optimizer.lr``
    changed, the first resumed step trained at that stale lr (0 after a finished cosine run, the full lr inside a
    warmup). A scheduler with neither form keeps the loaded value."""
    if lr_scheduler is None:
        return
    if isinstance(lr_scheduler, torch.optim.lr_scheduler.LambdaLR):
        lrs = [base * fn(lr_scheduler.last_epoch) for base, fn in zip(lr_scheduler.base_lrs, lr_scheduler.lr_lambdas)]
    elif hasattr(lr_scheduler, "_get_closed_form_lr"):
        lrs = lr_scheduler._get_closed_form_lr()
    else:
        return
    for group, lr in zip(optimizer.param_groups, lrs):
        group["lr"] = lr
    lr_scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]


def recorded_seed(recipe_state: Dict[str, Any]) -> Optional[int]:
    """The seed the run of ``recipe_state`` trained with (its saved config's ``seed``, its default where left out; a
    ``seed: null`` run saved the seed it drew); None for a state saved without its config."""
    saved = recipe_state.get("config")
    if saved is None:
        return None
    seed = with_own_defaults(RecipeConfig, saved).get("seed")
    return None if seed is None else int(seed)


def read_resume_state(resume_dir: Path, new_config: Dict[str, Any], seed_from_state: bool = False,
                      restart: Optional[Callable[[], str]] = None) -> Tuple[Dict[str, Any], List[Tuple[str, Any, Any]]]:
    """``(recipe state of the step folder resume_dir, the config changes the resumed run applies)``; a change that
    breaks exact resume is refused (:func:`compare_resume_config`), and so is a tokenizer source replaced since the
    save (:func:`check_tokenizer_unchanged`). ``seed_from_state``: the new config says
    ``seed: null``, which continues with the run's recorded seed (:func:`recorded_seed`), not a change. A LoRA run's
    trainable weights are read from the step's adapter folder into ``recipe_state["trainable"]`` (refused, naming
    the folder, when its files are gone; ``restart``: how that refusal says to train anew, as
    :func:`read_peft_adapter` takes it)."""
    resume_dir = Path(resume_dir)
    recipe_state = read_recipe_state(resume_dir)  # onto the CPU: a torchrun resume's every rank, a CPU machine
    saved = recipe_state.get("config")
    if seed_from_state and saved is not None:
        new_config = {**new_config, "seed": recorded_seed(recipe_state)}
    changes = _compared(saved, new_config, recipe_state, resume_dir) if saved is not None else []
    check_tokenizer_unchanged(resume_dir, new_config)
    if recipe_state.get("adapter"):
        recipe_state["trainable"] = read_peft_adapter(resume_dir / ADAPTER_DIR, read_hf_config(resume_dir), restart)
    return recipe_state, changes


def resume_changes(output_dir: Path, new_config: Dict[str, Any]) -> List[Tuple[str, Any, Any]]:
    """What ``resume=True`` with ``new_config`` would apply to ``output_dir``'s newest resumable step, its refusal
    raised as the run's setup raises it (:func:`compare_resume_config`, :func:`check_tokenizer_unchanged`), read without
    its tensors (the state file memory-mapped: a large run's optimizer state is not loaded to check a config). None to
    compare: ``[]``."""
    steps = StepCheckpoints(output_dir)
    state = steps.newest_state()
    saved = None if state is None else state.get("config")
    if saved is None:
        return []
    if new_config.get("seed") is None:  # seed: null continues with the run's recorded seed
        new_config = {**new_config, "seed": recorded_seed(state)}
    step_dir = steps.latest(resumable=True)
    changes = _compared(saved, new_config, state, step_dir)
    check_tokenizer_unchanged(step_dir, new_config)
    return changes


def _compared(saved: Dict[str, Any], new_config: Dict[str, Any], state: Dict[str, Any], step_dir: Path
              ) -> List[Tuple[str, Any, Any]]:
    """:func:`compare_resume_config` of ``step_dir``'s saved config, a ``local_text`` folder moved with its files as
    they were (:func:`~.moved_data.moved_data`) taken as the run's data and a start checkpoint or tokenizer moved as
    it was (:func:`~.moved_sources.moved_sources`) as the run's, the moves among the changes applied."""
    data = state.get("data") or {}  # the batcher's state, its stream's inside
    compared, moved, notes = moved_data(saved, new_config, data.get("stream"))
    changes = compare_resume_config(saved, compared, CheckpointFolder.open(step_dir).rope_spec, notes,
                                    moved_sources(state, step_dir))
    return changes + ([moved] if moved else [])


def check_skipped_records(recipe_state: Dict[str, Any], skip_bad_records: bool) -> None:
    """A run that skipped unreadable records counts them in its data position; resumed without skipping, the stream
    would stop at the first of them while it seeks that position. Refused, naming the key."""
    skipped = int(recipe_state.get("data", {}).get("stream", {}).get("records_skipped", 0))
    if skipped and not skip_bad_records:
        raise ValueError(f"resume=True with dataset.skip_bad_records=False: the run skipped "
                         f"{counted(skipped, 'unreadable record')} before step {recipe_state['step']} with "
                         "dataset.skip_bad_records=True, and its data position counts them; resume with "
                         "dataset.skip_bad_records=True")


def restore_optimizer(recipe_state: Dict[str, Any], model, optimizer, lr_scheduler, distributed: bool, device) -> None:
    """Optimizer and LR schedule from the recipe state (gathered state spread over the ranks when sharded).

    Call after the scheduler is built: its constructor writes the step-0 lr into the param groups, which the saved
    optimizer state (param groups included) must overwrite."""
    if distributed:
        _load_sharded_optimizer(model, optimizer, recipe_state["optimizer"], device)
    else:
        optimizer.load_state_dict(recipe_state["optimizer"])
    if lr_scheduler is not None:
        lr_scheduler.load_state_dict(recipe_state["lr_scheduler"])


def _load_sharded_optimizer(model, optimizer, full_sd: Dict[str, Any], device) -> None:
    """torchtune's ``load_from_full_optimizer_state_dict``, for a saved state that lacks some parameters: those that
    had no gradient at any step before the save (CLEX's ODE while every step drew t = 1), which the optimizer had
    not begun to track. torchtune's loader needs an entry for each; they get the one its zero-gradient initial step
    makes, and are then dropped from the optimizer's state, so they start afresh as they do in one process."""
    from torch.distributed.checkpoint.state_dict import _init_optim_state
    from torchtune import training

    _init_optim_state(optimizer)
    untracked = []
    for group, saved_group in zip(optimizer.param_groups, full_sd["param_groups"]):
        for param, name in zip(group["params"], saved_group["params"]):
            if name not in full_sd["state"] and param in optimizer.state:
                full_sd["state"][name] = {k: v.full_tensor() if hasattr(v, "full_tensor") else v
                                          for k, v in optimizer.state[param].items()}
                untracked.append(param)
    training.load_from_full_optimizer_state_dict(model, optimizer, full_sd, device)
    for param in untracked:
        optimizer.state.pop(param, None)
