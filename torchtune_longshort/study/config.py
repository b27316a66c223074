"""The study YAML (a shipped ``study/*.yaml``, ``longshort-cp --list``) as one typed, checked object, built once:
:class:`StudyConfig`.

A study is the paper's comparison (Du et al., ICML 2025, Tables 2-7): the same base model, the same RoPE method and
the same tokens, fine-tuned at ``L`` once with cross-entropy alone (``alpha = 0``) and once per ``alpha > 0`` with
``+ alpha * misalignment``, over several seeds, then evaluated at ``L0, L, 2L, 4L``.

Every field is declared once, with its default, its doc and its check, in the section that owns it:
:class:`StudyConfig` (the top level), :class:`~torchtune_longshort.study.base_config.BaseConfig` (``base``),
:class:`~torchtune_longshort.study.grid.FinetuneConfig`, ``methods`` and
:class:`~torchtune_longshort.study.grid.Variants` (what is fine-tuned), and
:class:`~torchtune_longshort.study.eval_config.EvalConfig` (``eval``). See the shipped ``study/cpu_small.yaml``
(``longshort-cp``) for a commented example. Two top-level keys are not fields: ``quick`` (a nested mapping merged over
the whole config by ``--quick``; its ``methods`` and ``variants`` replace the full ones) and
``not_a_torchtune_config`` (``{_component_: ...NOT_A_TORCHTUNE_CONFIG}``, in every shipped study YAML: torchtune's
``tune validate`` then refuses the file with the reason, since it is not a recipe config).

:func:`load_study_config` reads, merges and checks a YAML (unknown keys at every level with "did you mean", each
value with its field named, the rules between fields, the recipe configs of the runs against the recipe's typed
config) before anything is trained; every reader then reads fields, and the grid is computed once
(:attr:`StudyConfig.grid`).
"""

from __future__ import annotations

import copy
import os
import sys
from dataclasses import dataclass
from functools import cached_property
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import yaml
from omegaconf import OmegaConf

from torchtune_longshort.configs_cli import MAIN_CONFIG, resolve_config
from torchtune_longshort.study import values
from torchtune_longshort.study.base_config import BaseConfig
from torchtune_longshort.study.eval_config import EvalConfig
from torchtune_longshort.study.fields import StudySection, setting
from torchtune_longshort.study.grid import FinetuneConfig, MethodSpec, Run, Variants, build_grid, merged, methods
from torchtune_longshort.study.plan import BASE_KEY, PlanConfig
from torchtune_longshort.study.schema import check_keys
from torchtune_longshort.config.fields import build_section
from torchtune_longshort.config.unknown_keys import STUDY_MARKER_KEY
from torchtune_longshort.config.values import boolean, integer, length, number, text

# Keys whose ``quick`` value replaces the full config's instead of merging into it.
QUICK_REPLACES = ("methods", "variants")

# Every study YAML starts with this node, so that torchtune's ``tune validate`` refuses it with a reason instead of
# calling it well-formed (it only binds each top-level ``_component_``'s signature, which this one does not have).
MARKER_KEY = STUDY_MARKER_KEY
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


@dataclass(frozen=True)
class StudyConfig(StudySection):
    """A checked study config (:func:`~torchtune_longshort.study.load.load_study_config`). Frozen: a changed config
    is a new one (``dataclasses.replace``), so that :attr:`grid`, computed once, always matches it."""

    name: str = setting(doc="the study's name (report title, default output folder)", check=text)
    output_dir: str = setting(None, doc="runs, checkpoints, lm-eval output (default: outputs/study/<name>[_quick])",
                              check=text)
    recipe: str = setting("torchtune_longshort/recipes/longshort_finetune.py",
                          doc="the `tune run` recipe: a path tune run imports as a module of an installed package",
                          check=text)
    recipe_config: str = setting(doc="its base YAML: a shipped config (`longshort-cp --list`) or a file (relative "
                                 "to the working directory)", check=text)
    recipe_overrides: Dict[str, Any] = setting({}, doc="recipe keys merged over recipe_config for every run",
                                               check=values.recipe_keys)
    L0: int = setting(doc="the base's training length", check=length(1))
    L: int = setting(doc="the fine-tuning length (> L0)", check=length(1))
    base: BaseConfig = setting(doc="the model every fine-tune starts from", section=BaseConfig)
    model: Dict[str, Any] = setting(doc="the builder node: pre-trained as is, fine-tuned inside rope_scaled "
                                    "(max_seq_len set by the study; a checkpoint_dir entry set to the base's)",
                                    check=values.builder_node)
    finetune: FinetuneConfig = setting(doc="every fine-tune's steps and recipe keys", section=FinetuneConfig)
    methods: Dict[str, MethodSpec] = setting(doc="name -> rope_scaled kwargs (method required; overrides: recipe "
                                             "keys for that method's runs)", check=methods, names=True)
    alphas: List[float] = setting(doc="misalignment weights; 0 (the CE baseline) required", check=values.alphas)
    seeds: List[int] = setting(doc="seeds of every configuration", check=values.seeds)
    eval: EvalConfig = setting(None, doc="what lm-eval runs on every checkpoint", section=EvalConfig)
    jobs: int = setting(1, doc="fine-tunes at once, each with cpu_count // jobs threads (the base runs alone)",
                        check=integer(1))
    variants: Variants = setting(None, doc="extra runs on one method", section=Variants)
    timeout_s: Optional[float] = setting(None, doc="a limit on each subprocess (train, lm-eval), in seconds",
                                         check=number(0.0, inclusive=False), written_if_set=True)
    plan: Optional[PlanConfig] = setting(None, doc="the study as commands that each fit one device call, with the "
                                         "measured parts their estimates are made of (study.plan)",
                                         section=PlanConfig, written_if_set=True)
    quick: bool = setting(False, doc="whether this is the --quick variant (set by the loader)", check=boolean)
    config_path: Optional[str] = setting(None, doc="the YAML it was read from (set by the loader)", check=text)

    def __post_init__(self) -> None:
        default_output_dir(self)
        if self.L0 is not None and self.L is not None:
            ev = self.eval or build_section(EvalConfig, {}, "eval")
            object.__setattr__(self, "eval", ev.with_default_lengths(self.L0, self.L))
        if self.variants is None:
            object.__setattr__(self, "variants", Variants())

    def check(self, where: str) -> None:
        """The rules between fields: ``L > L0``, each variant on a method of ``methods`` with its e ranges at L."""
        if self.L <= self.L0:
            raise ValueError(f"L={self.L} must be greater than L0={self.L0} (the study extends the context)")
        for name, v in self.variants.items():
            if v.method not in self.methods:
                raise ValueError(f"variants.{name}.method={v.method!r} must name one of methods "
                                 f"{sorted(self.methods)}")
            v.check_with(f"variants.{name}", self.L)
        if self.plan is not None and not self.quick:  # --quick: a CPU smoke of its own grid, no plan
            self.plan.check_with([BASE_KEY] + [r.key for r in self.grid], self.jobs)

    @classmethod
    def from_mapping(cls, node: Dict[str, Any]) -> "StudyConfig":
        """A checked config from a plain mapping of the YAML's keys (``quick`` already merged, its ``quick`` a
        bool); :func:`~torchtune_longshort.study.load.load_study_config` also checks the files and the runs'
        recipe configs."""
        return build_section(cls, node)

    def check_files(self, root: Path) -> None:
        """The recipe is importable as ``tune run`` imports it and its config is found (a file relative to ``root``
        or a shipped config), from a checkout and from an installed wheel alike."""
        recipe_module(self.recipe, root)
        self.recipe_config_file(root)

    def recipe_config_file(self, root: Path) -> Path:
        """The file ``recipe_config`` names (:func:`~torchtune_longshort.configs_cli.resolve_config`)."""
        return resolve_config(self.recipe_config, root, "recipe_config", example=MAIN_CONFIG)

    @cached_property
    def grid(self) -> List[Run]:
        """The fine-tune runs (:func:`~torchtune_longshort.study.grid.build_grid`): seeds x methods x alphas, then
        the variants' runs per seed."""
        return build_grid(self.methods, self.alphas, self.seeds, self.variants, self.L)

    @cached_property
    def main_grid(self) -> List[Run]:
        """The runs of :attr:`grid` outside the variants (methods x alphas x seeds): the paper-layout tables' rows."""
        return [r for r in self.grid if r.variant is None]

    def runs_of(self, method: str, alpha: float) -> List[Run]:
        """The main grid's runs of one method and alpha (one per seed)."""
        return [r for r in self.main_grid if r.method == method and r.alpha == alpha]

    def to_dict(self) -> Dict[str, Any]:
        """The config as the study records it (``study.json``): YAML keys, defaults filled."""
        return self.as_dict()


def default_output_dir(cfg) -> None:
    """A study config without ``output_dir`` writes to ``outputs/study/<name>`` (``_quick`` for its quick variant)."""
    if cfg.output_dir is None and cfg.name is not None:
        object.__setattr__(cfg, "output_dir", f"outputs/study/{cfg.name}" + ("_quick" if cfg.quick else ""))


def recipe_module(recipe: str, root: Path) -> str:
    """The module ``tune run <recipe>`` (run in ``root``) imports: torchtune turns the path into a dotted name and
    imports it, from the installed packages first and from the working directory, which it appends to ``sys.path``,
    last (so ``torchtune_longshort/recipes/longshort_finetune.py`` runs from a wheel and from a checkout alike, and
    ``recipes/...`` finds torchtune's own top-level ``recipes`` package). The module is looked up on that search
    path, as ``tune run``'s process would, without importing anything; ``ValueError`` naming ``recipe`` when nothing
    would be found."""
    dotted = os.path.splitext(str(recipe))[0].replace("/", ".")
    here = {"", str(Path(root).resolve()), str(Path.cwd().resolve())}
    path = [p for p in sys.path if (str(Path(p).resolve()) if p else "") not in here] + [str(Path(root).resolve())]
    spec = None
    if dotted and all(part.isidentifier() for part in dotted.split(".")):
        head, *rest = dotted.split(".")
        for finder in sys.meta_path:  # the editable finder of a checkout's install answers here too
            find = getattr(finder, "find_spec", None)
            spec = (PathFinder.find_spec(head, path) if finder is PathFinder
                    else find(head, None) if find is not None else None)
            if spec is not None:
                break
        for i in range(len(rest)):
            locations = spec.submodule_search_locations if spec is not None else None
            spec = PathFinder.find_spec(".".join([head, *rest[:i + 1]]), list(locations)) if locations else None
    if spec is None or spec.origin is None:
        raise ValueError(f"recipe={recipe!r}: `tune run` would import it as module {dotted!r}, which is not "
                         f"importable (from the installed packages or {root}); name the recipe as shipped: "
                         "torchtune_longshort/recipes/longshort_finetune.py")
    return dotted


def recipe_values(path: Path, kind: str) -> dict:
    """The mapping of YAML file ``path`` with its values read as ``tune run`` reads a recipe config (``OmegaConf.load``:
    ``lr: 3e-4``, as torchtune's configs write it, is a float, where plain YAML 1.1 reads the string '3e-4'), its
    ``${...}`` left as written; what OmegaConf refuses (a key used twice, a key that is not a name) is a
    ``StudyConfigError`` naming the file."""
    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as e:  # noqa: BLE001 - yaml's and OmegaConf's errors alike: one line, the file named
        raise StudyConfigError(f"{kind} config {str(path)!r}: {' '.join(str(e).split())}") from None


def read_config(path: str | Path, cls: type, kind: str, quick: bool = False, repo_root: Optional[Path] = None,
                quick_replaces: Sequence[str] = ()) -> Any:
    """A YAML of one of the study's experiments as section ``cls`` (a :class:`StudySection` with ``quick`` and
    ``config_path`` fields), checked: unknown keys at every level and in the ``quick`` overlay, the
    :data:`MARKER_KEY` node, every field. With ``quick`` the overlay is merged over the whole config (the keys of
    ``quick_replaces`` replace the full config's instead). ``StudyConfigError`` (``<kind> config: ...``) naming the
    field, its value and what is accepted; ``FileNotFoundError`` for a missing file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{kind} config {str(path)!r} does not exist")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise StudyConfigError(f"{kind} config {str(path)!r} is not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(raw, dict):
        raise StudyConfigError(f"{kind} config {str(path)!r}: expected a mapping at the top level")
    raw = recipe_values(path, kind) if raw else raw
    refused(lambda: check_keys(cls, raw), kind)
    marker = raw.pop(MARKER_KEY, None)
    if marker is not None and (not isinstance(marker, dict) or marker.get("_component_") != MARKER_COMPONENT):
        raise StudyConfigError(f"{kind} config: {MARKER_KEY}={marker!r} must be {{_component_: {MARKER_COMPONENT}}} "
                               "(it makes `tune validate` refuse the file)")
    quick_over = raw.pop("quick", None) or {}
    quick_node = refused(lambda: merged(raw, quick_over), kind)
    for key in quick_replaces:  # a quick grid is smaller: its list replaces the full one, not adds to it
        if key in quick_over:
            quick_node[key] = copy.deepcopy(quick_over[key])
    node, other = (quick_node, raw) if quick else (raw, quick_node)
    root = Path(repo_root or Path.cwd()).resolve()
    try:  # recorded in the report: relative to the repo root when it can be
        config_path = str(path.resolve().relative_to(root))
    except ValueError:
        config_path = str(path)
    checked = refused(lambda: build_section(cls, {**node, "quick": bool(quick), "config_path": config_path}), kind)
    if quick:  # the full study's values are checked too (not what they name on this machine): CI runs --quick, and
        # a full config it never built passed there broken (alphas without 0)
        refused(lambda: build_section(cls, {**other, "quick": False, "config_path": config_path}, local=False),
                f"{kind} (full variant)")
    return checked


def refused(check: Callable[[], Any], kind: str = "study") -> Any:
    """Run ``check``; its refusal (an unknown key, a bad value) becomes a :class:`StudyConfigError`."""
    try:
        return check()
    except (KeyError, ValueError) as e:
        raise StudyConfigError(f"{kind} config: {e.args[0] if isinstance(e, KeyError) and e.args else e}") from None
