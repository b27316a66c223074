"""What the study fine-tunes: ``finetune`` (steps and recipe keys), ``methods`` (RoPE methods), the ``variants`` on
one method (Table 7's e ranges, divergences, equal compute), and the runs they make (:class:`Run`, built once per
config by :func:`build_grid`: :attr:`StudyConfig.grid <torchtune_longshort.study.config.StudyConfig.grid>`).

A run is one fine-tune: seeds x methods x alphas (the main grid), then each variant's runs, per seed. Its key
(``pi_a0.1_s0``, ``pi_a0.1_e1-L_4_s0``) names its folder; its configuration (the key less the seed,
:func:`config_key`) is what the report compares.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Dict, Iterator, List, Optional, Tuple

from torchtune_longshort.study import values
from torchtune_longshort.study.fields import StudySection, setting
from torchtune_longshort.config.values import integer, number, text
from torchtune_longshort.windows import resolve_e_range

METHOD_OVERRIDES = "overrides"  # in a ``methods`` entry: recipe keys for that method's runs only


def merged(base: Dict[str, Any], over: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``over`` merged into a copy of ``base`` by OmegaConf, as torchtune merges its command-line overrides: nested
    mappings key by key, anything else (lists included) replaced; ``${...}`` interpolations are kept unresolved."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.merge(base, over or {}), resolve=False)
    except (TypeError, ValueError) as e:  # e.g. a mapping over a list
        raise ValueError(f"cannot merge {over!r} into the config: {e}") from None


@dataclass(frozen=True)
class FinetuneConfig(StudySection):
    """``finetune``: every fine-tune of the grid, at ``L``."""

    max_steps: int = setting(doc="fine-tuning steps per run", check=integer(1))
    overrides: Dict[str, Any] = setting({}, doc="recipe keys for every fine-tune (over recipe_overrides)",
                                        check=values.recipe_keys)


@dataclass(frozen=True)
class MethodSpec:
    """A ``methods`` entry: ``method`` (a :data:`~torchtune_longshort.rope.ROPE_METHODS` name), the other
    ``rope_scaled`` kwargs, and ``overrides`` (recipe keys for that method's runs only)."""

    method: str
    kwargs: Dict[str, Any]
    overrides: Optional[Dict[str, Any]] = None

    @classmethod
    def parse(cls, path: str, node: Any) -> "MethodSpec":
        if not isinstance(node, dict) or "method" not in node:
            raise ValueError(f"{path}={node!r} needs a 'method' key (a torchtune_longshort.rope.ROPE_METHODS name)")
        over = node.get(METHOD_OVERRIDES)
        if over is not None:
            values.recipe_keys(f"{path}.{METHOD_OVERRIDES}", over)
        kwargs = {k: v for k, v in node.items() if k not in ("method", METHOD_OVERRIDES)}
        return cls(values.rope_method(f"{path}.method", node["method"]), kwargs, over)

    @property
    def rope(self) -> Dict[str, Any]:
        """Its ``rope_scaled`` kwargs."""
        return {"method": self.method, **self.kwargs}

    def as_dict(self) -> Dict[str, Any]:
        return {**self.rope, **({METHOD_OVERRIDES: self.overrides} if self.overrides is not None else {})}


def methods(path: str, value: Any) -> Dict[str, MethodSpec]:
    """``methods``: a name (its runs' key prefix) -> :class:`MethodSpec` per entry."""
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{path}={value!r} must map a name to rope_scaled kwargs, e.g. "
                         "{pi: {method: linear}, yarn: {method: yarn}}")
    return {name: MethodSpec.parse(f"{path}.{name}", spec) for name, spec in value.items()}


def _bound_tag(b: Any) -> str:
    return str(b).replace("/", "_").replace("*", "").replace(" ", "")


class Variant(StudySection):
    """A ``variants`` entry: ``method`` (a ``methods`` name), ``runs(L)`` (``(config tag, alpha, recipe overrides)``
    of each of its runs for one seed, fine-tuning at ``L``) and its rules against ``L`` (none by default)."""

    method: str

    def runs(self, L: int) -> Iterator[Tuple[str, float, Dict[str, Any]]]:
        raise NotImplementedError

    def check_with(self, where: str, L: int) -> None:
        """Rules that need the fine-tuning length ``L``; ``where`` is the variant's path."""


@dataclass(frozen=True)
class ERangeVariant(Variant):
    """Table 7: the same alpha with other ``e ~ U[lo, hi]`` ranges (the main grid holds the config's own range). A
    range up to ``L`` (``L``, or the number it stands for) is the paper's setting (4), "no floor on the shorter
    window": its runs compare the whole overlap (``loss.min_context: none``); under the default listing floor every
    shift past L/2 compares nothing, and half its steps trained CE alone (the cpu_medium study's [1, L] runs, before
    this rule)."""

    method: str = setting(doc="the methods entry it runs on", check=text)
    alpha: float = setting(doc="its alpha (> 0)", check=number(0.0, inclusive=False))
    ranges: List[list] = setting(doc="[lo, hi] e ranges (the windows' grammar: 1, L/4, L/2, L)", check=values.e_ranges)

    def runs(self, L: int) -> Iterator[Tuple[str, float, Dict[str, Any]]]:
        for lo, hi in self.ranges:
            no_floor = {"loss": {"min_context": "none"}} if resolve_e_range([lo, hi], L)[1] == L else {}
            yield f"e{_bound_tag(lo)}-{_bound_tag(hi)}", self.alpha, {"e_range": [lo, hi], **no_floor}

    def check_with(self, where: str, L: int) -> None:
        seen: Dict[Tuple[int, int], list] = {}
        for r in self.ranges:
            try:
                lo, hi = resolve_e_range(r, L)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{where}.ranges has {r!r}: {e}") from None
            # one range written two ways ([1, L] and [1, 256] at L = 256) trained the same runs twice under two
            # names; written the same way twice, it named one run twice
            if (lo, hi) in seen:
                raise ValueError(f"{where}.ranges has {seen[lo, hi]!r} and {r!r}, both U[{lo}, {hi}] at L={L}: "
                                 "give each range once")
            seen[lo, hi] = r


@dataclass(frozen=True)
class DivergenceVariant(Variant):
    """SCE (Eq. 3, the main grid) against other divergences at the same alphas."""

    method: str = setting(doc="the methods entry it runs on", check=text)
    alphas: List[float] = setting(doc="its alphas (> 0)", check=values.positive_alphas)
    divergences: List[str] = setting(doc="loss.divergence values (jeffreys, js, or a function's dotted path: its runs "
                                         "are named by its last part)", check=values.divergences)

    def runs(self, L: int) -> Iterator[Tuple[str, float, Dict[str, Any]]]:
        for d in self.divergences:
            for a in self.alphas:
                yield values.divergence_tag(d), a, {"loss": {"divergence": d}}


@dataclass(frozen=True)
class EqualComputeVariant(Variant):
    """Tables 9-10: ``alpha > 0`` with ``floor(max_steps / overhead)`` steps (the recipe's equal_compute_overhead)."""

    method: str = setting(doc="the methods entry it runs on", check=text)
    alpha: float = setting(doc="its alpha (> 0)", check=number(0.0, inclusive=False))
    overhead: float = setting(doc="the step-time ratio (the paper's Appendix F: 1.0526)", check=number(1.0))

    def runs(self, L: int) -> Iterator[Tuple[str, float, Dict[str, Any]]]:
        yield "eqc", self.alpha, {"equal_compute_overhead": self.overhead}


@dataclass(frozen=True)
class Variants(StudySection):
    """``variants``: extra runs on one method of ``methods``, every seed, after the main grid's (in this order)."""

    e_range: Optional[ERangeVariant] = setting(None, doc="Table 7: other e ranges at one alpha",
                                               section=ERangeVariant, written_if_set=True)
    divergence: Optional[DivergenceVariant] = setting(None, doc="Jeffreys / JS against SCE at given alphas",
                                                      section=DivergenceVariant, written_if_set=True)
    equal_compute: Optional[EqualComputeVariant] = setting(None, doc="Tables 9-10: fewer steps for alpha > 0",
                                                           section=EqualComputeVariant, written_if_set=True)

    def items(self) -> List[Tuple[str, Variant]]:
        """``(name, variant)`` of the variants the config sets."""
        return [(f.name, getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None]


@dataclass(frozen=True)
class Run:
    """One fine-tune: ``rope`` (the method's ``rope_scaled`` kwargs), ``overrides`` (recipe keys merged over the
    fine-tune config: the method's own ``overrides``, then the variant's); ``variant`` is None in the main grid."""

    key: str
    config: str
    method: str
    rope: Dict[str, Any]
    alpha: float
    seed: int
    variant: Optional[str]
    overrides: Dict[str, Any]

    def record(self) -> Dict[str, Any]:
        """What a run's ``result.json`` says of it."""
        return {"method": self.method, "alpha": self.alpha, "seed": self.seed, "variant": self.variant,
                "overrides": self.overrides, "rope": self.rope}


def config_key(method: str, alpha: float, tag: Optional[str] = None) -> str:
    """A configuration's name (a run key less its seed): ``pi_a0.1``, ``pi_a0.1_js``, ``pi_a0.1_e1-L_4``; the run
    folders and the report's comparisons both use it."""
    return f"{method}_a{alpha:g}" + (f"_{tag}" if tag else "")


def _run(method: str, spec: MethodSpec, alpha: float, seed: int, tag: Optional[str] = None,
         variant: Optional[str] = None, overrides: Optional[Dict[str, Any]] = None) -> Run:
    config = config_key(method, alpha, tag)
    over = merged(dict(spec.overrides or {}), overrides or {})
    return Run(f"{config}_s{seed}", config, method, spec.rope, float(alpha), seed, variant, over)


def build_grid(methods: Dict[str, MethodSpec], alphas: List[float], seeds: List[int],
               variants: Variants, L: int) -> List[Run]:
    """The fine-tunes at length ``L``: per seed, methods x alphas (the main grid), then each variant's runs."""
    runs = []
    # Seed outermost: an interrupted or time-boxed grid then holds complete comparisons (same seed) before it holds
    # more seeds of any one of them.
    for s in seeds:
        for name, spec in methods.items():
            runs += [_run(name, spec, a, s) for a in alphas]
        for vname, v in variants.items():
            runs += [_run(v.method, methods[v.method], a, s, tag, vname, over) for tag, a, over in v.runs(L)]
    return runs
