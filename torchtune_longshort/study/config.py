"""The study YAML: what to train, what grid to run, what to evaluate (``configs/study/*.yaml``).

A study is the paper's comparison (Du et al., ICML 2025, Tables 2-7): the same base model, the same RoPE method and
the same tokens, fine-tuned at ``L`` once with cross-entropy alone (``alpha = 0``) and once per ``alpha > 0`` with
``+ alpha * misalignment``, over several seeds, then evaluated at ``L0, L, 2L, 4L``.

Fields (see ``configs/study/cpu_small.yaml`` for a commented example):

``not_a_torchtune_config`` (optional, in every shipped study YAML): ``{_component_: ...NOT_A_TORCHTUNE_CONFIG}``,
which makes torchtune's ``tune validate`` refuse the file with the reason, since it is not a recipe config.

``name``, ``output_dir`` (runs, checkpoints, lm-eval output), ``recipe`` (path of the ``tune run`` recipe),
``recipe_config`` (its base YAML) and ``recipe_overrides`` (nested dict merged over it for every run),
``L0``, ``L``, ``base`` (``checkpoint_dir`` + ``tokenizer`` of a Hugging Face checkpoint, or ``pretrain``),
``model`` (the builder node used both to pre-train and, wrapped in ``rope_scaled``, to fine-tune),
``finetune`` (``max_steps`` + recipe ``overrides``), ``methods`` (name -> ``rope_scaled`` kwargs, ``method`` required),
``alphas``, ``seeds``, ``eval`` (lengths and sample counts per task family), ``quick`` (a nested dict merged over
the whole config by ``--quick``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from torchtune_longshort.eval import long_ppl, misalignment_task, passkey
from torchtune_longshort.eval.lengths import length_label  # noqa: F401  (the task pack's length labels)

# Study family -> its lm-eval task in evals/tasks (lengths from metadata: eval.<family>_lengths).
FAMILY_TASK = {"ppl": "long_ppl", "passkey": "longshort_passkey", "misalignment": "misalignment"}
# Study family -> the prefix of its task's metadata keys (the task module's METADATA_PREFIX).
FAMILY_METADATA_PREFIX = {"ppl": long_ppl.METADATA_PREFIX, "passkey": passkey.METADATA_PREFIX,
                          "misalignment": misalignment_task.METADATA_PREFIX}


# Keys whose ``quick`` value replaces the full config's instead of merging into it.
_QUICK_REPLACES = ("methods",)

# Every study YAML starts with this node, so that torchtune's ``tune validate`` refuses it with a reason instead of
# calling it well-formed (it only binds each top-level ``_component_``'s signature, which this one does not have).
MARKER_KEY = "not_a_torchtune_config"
MARKER_COMPONENT = "torchtune_longshort.study.config.NOT_A_TORCHTUNE_CONFIG"


class _NotATorchtuneConfig:
    """Not callable on purpose: ``tune validate`` then reports ``TypeError: <__name__> <repr> is not a callable
    object``, which reads as the reason below."""

    __name__ = "Not a torchtune config:"

    def __repr__(self) -> str:
        return ("this is a torchtune-longshort study config (run it with `python -m torchtune_longshort.study "
                f"--config <file>`); its marker node {MARKER_KEY}")


NOT_A_TORCHTUNE_CONFIG = _NotATorchtuneConfig()


class StudyConfigError(ValueError):
    """A study YAML field is missing or has a value the runner cannot use."""


def deep_merge(base: Dict[str, Any], over: Dict[str, Any]) -> Dict[str, Any]:
    """``over`` merged into a copy of ``base``; nested dicts merge key by key, anything else is replaced."""
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _need(cfg: Dict[str, Any], key: str, where: str = "") -> Any:
    if key not in cfg or cfg[key] is None:
        raise StudyConfigError(f"study config: field {where}{key} is required")
    return cfg[key]


def _pos_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StudyConfigError(f"study config: {field}={value!r} must be an int >= 1")
    return value


def load_study_config(path: str | Path, quick: bool = False, repo_root: Optional[Path] = None) -> Dict[str, Any]:
    """Read, merge ``quick`` (when asked) and validate a study YAML; returns a plain dict with defaults filled.

    Raises ``StudyConfigError`` naming the field, its value and what is accepted.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"study config {str(path)!r} does not exist")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise StudyConfigError(f"study config {str(path)!r}: expected a mapping at the top level")
    marker = raw.pop(MARKER_KEY, None)
    if marker is not None and (not isinstance(marker, dict) or marker.get("_component_") != MARKER_COMPONENT):
        raise StudyConfigError(f"study config: {MARKER_KEY}={marker!r} must be {{_component_: {MARKER_COMPONENT}}} "
                               "(it makes `tune validate` refuse the file)")
    quick_over = raw.pop("quick", None) or {}
    cfg = deep_merge(raw, quick_over) if quick else raw
    if quick:
        for key in _QUICK_REPLACES:  # a quick grid is smaller: its methods replace the full list, not add to it
            if key in quick_over:
                cfg[key] = copy.deepcopy(quick_over[key])
    cfg["quick"] = bool(quick)
    try:  # recorded in the report: relative to the repo root when it can be
        cfg["config_path"] = str(path.resolve().relative_to(Path(repo_root or Path.cwd()).resolve()))
    except ValueError:
        cfg["config_path"] = str(path)
    return validate(cfg, repo_root=repo_root)


def validate(cfg: Dict[str, Any], repo_root: Optional[Path] = None) -> Dict[str, Any]:
    """Check every field the runner reads and fill defaults (see the module docstring)."""
    root = Path(repo_root) if repo_root else Path.cwd()
    _need(cfg, "name")
    cfg.setdefault("output_dir", f"outputs/study/{cfg['name']}" + ("_quick" if cfg.get("quick") else ""))
    cfg.setdefault("recipe", "torchtune_longshort/recipes/longshort_finetune.py")
    _need(cfg, "recipe_config")
    for f in ("recipe", "recipe_config"):
        if not (root / cfg[f]).is_file():
            raise StudyConfigError(f"study config: {f}={cfg[f]!r} is not a file (relative to {root})")
    cfg.setdefault("recipe_overrides", {})
    L0, L = _pos_int(_need(cfg, "L0"), "L0"), _pos_int(_need(cfg, "L"), "L")
    if L <= L0:
        raise StudyConfigError(f"study config: L={L} must be greater than L0={L0} (the study extends the context)")

    base = cfg.setdefault("base", {})
    if base.get("checkpoint_dir"):
        if not base.get("tokenizer"):
            raise StudyConfigError("study config: base.checkpoint_dir is set, so base.tokenizer (tokenizer.model path) "
                                   "is required too")
    else:
        pre = _need(base, "pretrain", "base.")
        _pos_int(_need(pre, "max_steps", "base.pretrain."), "base.pretrain.max_steps")
        pre.setdefault("overrides", {})
    model = _need(cfg, "model")
    if not isinstance(model, dict) or "_component_" not in model:
        raise StudyConfigError(f"study config: model={model!r} must be a builder node with a _component_ field")

    ft = _need(cfg, "finetune")
    _pos_int(_need(ft, "max_steps", "finetune."), "finetune.max_steps")
    ft.setdefault("overrides", {})

    methods = _need(cfg, "methods")
    if not isinstance(methods, dict) or not methods:
        raise StudyConfigError(f"study config: methods={methods!r} must map a name to rope_scaled kwargs, "
                               "e.g. {pi: {method: linear}, yarn: {method: yarn}}")
    for name, spec in methods.items():
        if not isinstance(spec, dict) or "method" not in spec:
            raise StudyConfigError(f"study config: methods.{name}={spec!r} needs a 'method' key "
                                   "(a torchtune_longshort.rope.ROPE_METHODS name)")
    alphas = _need(cfg, "alphas")
    if not alphas or any(not isinstance(a, (int, float)) or isinstance(a, bool) or a < 0 for a in alphas):
        raise StudyConfigError(f"study config: alphas={alphas!r} must be a non-empty list of numbers >= 0")
    if 0 not in alphas:
        raise StudyConfigError(f"study config: alphas={alphas!r} must include 0 (the cross-entropy baseline row)")
    cfg["alphas"] = sorted(float(a) for a in alphas)
    seeds = _need(cfg, "seeds")
    if not seeds or any(not isinstance(s, int) or isinstance(s, bool) for s in seeds):
        raise StudyConfigError(f"study config: seeds={seeds!r} must be a non-empty list of ints")

    ev = cfg.setdefault("eval", {})
    ev.setdefault("ppl_lengths", [L0, L, 2 * L, 4 * L])
    ev.setdefault("passkey_lengths", [L, 2 * L, 4 * L])
    ev.setdefault("misalignment_lengths", [L0, L, 2 * L, 4 * L])
    ev.setdefault("ppl_num_samples", 20)
    ev.setdefault("passkey_num_samples", 5)
    from torchtune_longshort.metrics.misalignment import DEFAULT_NUM_SAMPLES

    ev.setdefault("mis_num_samples", DEFAULT_NUM_SAMPLES)
    ev.setdefault("ppl_source", "stdlib")
    ev.setdefault("batch_size", 1)
    ev.setdefault("device", "cpu")
    ev.setdefault("dtype", "float32")
    ev.setdefault("babilong", None)
    ev.setdefault("longbench_e_data_dir", None)
    ev.setdefault("eval_base", True)
    ev.setdefault("include_path", "evals/tasks")
    for fam in FAMILY_TASK:
        for n in ev[f"{fam}_lengths"]:
            _pos_int(n, f"eval.{fam}_lengths[]")
    bab = ev["babilong"]
    if bab:
        from torchtune_longshort.eval.babilong_generator import LENGTHS

        for lab in bab.get("lengths", []):
            if lab not in LENGTHS:
                raise StudyConfigError(f"study config: eval.babilong.lengths has {lab!r}; accepted: {list(LENGTHS)}")
        bab.setdefault("n", 2)
        bab.setdefault("depths", None)
        bab.setdefault("qa", "qa1,qa2,qa3,qa4,qa5")
    return cfg


def grid(cfg: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The fine-tune runs: seeds x methods x alphas, each with its run key (its folder name)."""
    runs = []
    # Seed outermost: an interrupted or time-boxed grid then holds complete alpha comparisons (same method, same
    # seed) before it holds more seeds of any one of them.
    for s in cfg["seeds"]:
        for mname, mspec in cfg["methods"].items():
            for a in cfg["alphas"]:
                runs.append({"key": f"{mname}_a{a:g}_s{s}", "method": mname, "rope": dict(mspec), "alpha": a, "seed": s})
    return runs
