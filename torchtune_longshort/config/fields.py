"""A config field declared once (:func:`setting`: YAML key, default, doc, check) and the one function that turns a
plain mapping into a typed section (:func:`build_section`).

``build_section`` refuses unknown keys (with "did you mean"), asks for required ones, fills defaults and runs each
field's check with the field's full name (``batch_size=-1 is not accepted: ...``), then the section's own
``check(where)`` for rules between its fields. A :class:`ComponentSection` is a ``_component_`` node: its other keys
are the component's arguments, bound against its signature, and a typed field may take its default from that
signature (:data:`FROM_COMPONENT`), so the component stays the one owner of its defaults.

Each top-level field also declares what a resumed run may do with it (``resume=``, one of :data:`RESUME_POLICIES`);
:func:`resume_policies` collects those declarations for ``training/resume.py`` and refuses a field without one.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Dict, Mapping, Optional, Tuple

from torchtune_longshort.config.annotations import check_annotated_args
from torchtune_longshort.config.unknown_keys import ConfigKeyError, refuse_unknown
from torchtune_longshort.config.values import Check, resolve_component
from torchtune_longshort.plural import counted


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


REQUIRED = _Marker("required")  # no default: the key must be given
FROM_COMPONENT = _Marker("the component's default")  # the default of the component's own signature

# What a resumed run (resume=True) does when the new config changes a top-level field; a nested node's keys follow
# their top-level field, unless its section lists them in RESUME_IGNORED or RESUME_APPLIED.
RESUME_POLICIES = {
    "exact": "must equal the saved run's value: a change would train another run, so it is refused",
    "applied": "a change is applied and logged (more steps, another lr after a NaN, logging, checkpoint period)",
    "ignored": "where the run's folder sits or how it was started, not what it trains: never compared",
}


def setting(default: Any = REQUIRED, *, doc: str, check: Optional[Check] = None, key: Optional[str] = None,
            section: Optional[type] = None, flat: bool = False, nullable: bool = False,
            resume: Optional[str] = None, null: Optional[Callable[[], Any]] = None) -> Any:
    """A dataclass field of a config section.

    Args:
        default: used when the key is absent (or null, unless ``nullable``); :data:`REQUIRED` or
            :data:`FROM_COMPONENT`.
        doc: one line for the README's table.
        check: ``(path, value) -> value``; raises naming ``path`` when the value is not accepted.
        key: the YAML key when it is not the field's name (``_component_``).
        section: a nested section class (the value is a mapping built with :func:`build_section`).
        flat: the nested ``section``'s keys sit in this mapping itself (the windows keys are top-level keys).
        nullable: an explicit null is a value (``clip_grad_norm: null``: no clipping), not "use the default".
        resume: a top-level field's policy on resume, a key of :data:`RESUME_POLICIES` (a flat section's fields
            declare their own; a nested section's fields follow their top-level field).
        null: what an explicit null is, asked when the config is read, where torchtune reads null otherwise than as
            this recipe's default (``device: null``: torchtune's ``get_device(None)``, the available accelerator).
    """
    if resume is not None and resume not in RESUME_POLICIES:
        raise ValueError(f"setting(resume={resume!r}) is not accepted: expected one of {sorted(RESUME_POLICIES)}")
    meta = dict(default=default, doc=doc, check=check, key=key, section=section, flat=flat, nullable=nullable,
                resume=resume, null=null)
    return field(default=None, metadata=meta)


def yaml_key(f) -> str:
    return f.metadata.get("key") or f.name


def section_keys(cls: type) -> Dict[str, Any]:
    """``{yaml key: field}`` a section reads from its own mapping (flat sub-sections' keys included)."""
    out: Dict[str, Any] = {}
    for f in fields(cls):
        if f.metadata.get("flat"):
            out.update(section_keys(f.metadata["section"]))
        elif "doc" in f.metadata:
            out[yaml_key(f)] = f
    return out


def resume_policies(cls: type) -> Dict[str, str]:
    """``{key: policy}`` of the top-level config section ``cls``: every top-level key (a flat section's keys
    included) with its declared :data:`RESUME_POLICIES` entry, and ``<key>.<arg>`` for the args a nested section
    lists in ``RESUME_IGNORED`` (ignored), ``RESUME_APPLIED`` (applied) or ``RESUME_EXACT`` (exact). Raises
    ``TypeError`` naming a field that declares none."""
    out: Dict[str, str] = {}
    for f in fields(cls):
        if f.metadata.get("flat"):
            out.update(resume_policies(f.metadata["section"]))
        elif "doc" in f.metadata:
            if f.metadata.get("resume") not in RESUME_POLICIES:
                raise TypeError(f"{cls.__name__}.{f.name} declares no resume policy: pass setting(..., resume=...) "
                                f"one of {sorted(RESUME_POLICIES)}")
            out[yaml_key(f)] = f.metadata["resume"]
            section = f.metadata["section"]
            out.update({f"{yaml_key(f)}.{k}": "ignored" for k in getattr(section, "RESUME_IGNORED", ())})
            out.update({f"{yaml_key(f)}.{k}": "applied" for k in getattr(section, "RESUME_APPLIED", ())})
            out.update({f"{yaml_key(f)}.{k}": "exact" for k in getattr(section, "RESUME_EXACT", ())})
    return out


def with_own_defaults(cls: type, node: Mapping[str, Any]) -> Dict[str, Any]:
    """``node`` (a plain mapping of the top-level section ``cls``) with every key that is absent, or null where null
    is not a value, set to its field's own default (flat sections' keys included; a required key, a component's
    default and a section are left as they are): two configs that differ only in spelling a default out compare
    equal."""
    out = dict(node)
    for f in fields(cls):
        if f.metadata.get("flat"):
            out.update(with_own_defaults(f.metadata["section"], out))
        elif "doc" in f.metadata and f.metadata["section"] is None:
            default, key = f.metadata["default"], yaml_key(f)
            if key in out and out[key] is None and f.metadata.get("null") is not None:
                out[key] = f.metadata["null"]()
            elif default is not REQUIRED and default is not FROM_COMPONENT and out.get(key) is None and not (
                    key in out and f.metadata["nullable"]):
                out[key] = default
    return out


def with_checked_values(cls: type, node: Mapping[str, Any]) -> Dict[str, Any]:
    """``node`` (a plain mapping of the top-level section ``cls``) with each value of a field that is no section (flat
    sections' keys included) as the field's check reads it: ``clip_grad_norm: inf`` and ``.inf`` are null (no
    clipping), ``max_steps: '4'`` is 4. Two configs that spell one value two ways then compare equal. A value the
    check refuses (one an older version saved) stays as given."""
    out = dict(node)
    for f in fields(cls):
        if f.metadata.get("flat"):
            out.update(with_checked_values(f.metadata["section"], out))
        elif "doc" in f.metadata and f.metadata["section"] is None and f.metadata["check"] is not None:
            key = yaml_key(f)
            if out.get(key) is not None:
                try:
                    out[key] = f.metadata["check"](key, out[key])
                except (ValueError, TypeError):
                    pass
    return out


class Section:
    """A config section: a frozen dataclass of :func:`setting` fields."""

    LOCAL_CHECKS = False  # whether ``check`` asks this machine (files, devices): skipped with ``local=False``
    RESUME_IGNORED: ClassVar[Tuple[str, ...]] = ()  # nested keys never compared on resume (:func:`resume_policies`)
    RESUME_APPLIED: ClassVar[Tuple[str, ...]] = ()  # nested keys a resumed run may change (applied, logged)

    def check(self, where: str) -> None:
        """Rules between this section's fields (none by default); ``where`` is the section's path."""


@dataclass(frozen=True)
class ComponentSection(Section):
    """A ``_component_`` node: ``component`` (the dotted path) and ``args`` (every other key, as given)."""

    component: str = setting(doc="dotted path of the callable that builds it", key="_component_")
    args: Dict[str, Any] = field(default_factory=dict)
    # Parameters the recipe itself passes (positional or by name): not config keys.
    PASSED_BY_RECIPE: ClassVar[Tuple[str, ...]] = ()
    # False for a node the recipe reads but never builds: its component's arguments without a default may be absent.
    BUILT: ClassVar[bool] = True
    # What to say when the node is a list (torchtune reads a list of datasets as their ConcatDataset); None: the
    # generic "expected a mapping" refusal.
    LIST_HINT: ClassVar[Optional[str]] = None
    # The component a node without a `_component_` key stands for (torchtune's recipes fill in the profiler's), or
    # None: refused as missing.
    DEFAULT_COMPONENT: ClassVar[Optional[str]] = None
    # Components (module.qualname) whose **kwargs are dropped, not read: a key they do not name is refused as unknown.
    DROPS_KWARGS: ClassVar[Tuple[str, ...]] = ()

    def node(self):
        """The node to build with torchtune's ``config.instantiate``."""
        from omegaconf import OmegaConf

        return OmegaConf.create({"_component_": self.component, **self.args})


def _component_params(component: str, where: str) -> Tuple[Dict[str, inspect.Parameter], bool]:
    """``(parameters by name, accepts **kwargs)`` of a dotted path, refusing one that does not import."""
    target = resolve_component(f"{where}._component_" if where else "_component_", component)
    try:
        params = dict(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return {}, True
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return {n: p for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}, open_ended


def _default(f, path: str, signature: Dict[str, inspect.Parameter]) -> Any:
    default = f.metadata["default"]
    if default is REQUIRED:
        raise ConfigKeyError(f"config is missing required key {path!r}: {f.metadata['doc']}")
    if default is FROM_COMPONENT:
        p = signature.get(yaml_key(f))
        return None if p is None or p.default is inspect.Parameter.empty else p.default
    return default


def _null_checked(check: Check, path: str, key: str, param: inspect.Parameter) -> Any:
    """``check`` of an explicit null handed to a component as its parameter ``param``, its refusal saying what the
    component does without the key."""
    try:
        return check(path, None)
    except ValueError as e:
        fix = ("and it has no default: set a value" if param.default is inspect.Parameter.empty else
               f"not its default: leave {key} out, or ~{path} on the command line, for its default {param.default!r}")
        raise ValueError(f"{e} (null is handed to the component as None, {fix})") from None


def _value(f, node: Mapping[str, Any], where: str, signature: Dict[str, inspect.Parameter], local: bool) -> Any:
    key = yaml_key(f)
    path = f"{where}.{key}" if where else key
    value = node.get(key)
    if value is None:
        if key in node and f.metadata["default"] is REQUIRED and not f.metadata["nullable"]:
            # `output_dir=~` on a command line: YAML reads `~` (and `null`) as null, not as the home folder
            raise ConfigKeyError(f"config key {path!r} is null, and it needs a value: {f.metadata['doc']} (YAML reads "
                                 f"'~' and 'null' as null; write a home folder out, e.g. {key}=$HOME/...)")
        if key in node and f.metadata["nullable"]:
            return None
        if key in node and f.metadata.get("null") is not None:
            return f.metadata["null"]()
        handed = signature.get(key)
        if (key in node and f.metadata["default"] is FROM_COMPONENT and f.metadata["check"] is not None
                and handed is not None and handed.default is not None):
            # torchtune's instantiate hands the component None, not its default (loss.alpha: null, read as 0.1 here,
            # was LongShortLoss(alpha=None) once the run had loaded the model): checked as the value it is
            return _null_checked(f.metadata["check"], path, key, handed)
        return _default(f, path, signature)
    section = f.metadata["section"]
    if section is not None:
        if (f.metadata["default"] is None and issubclass(section, ComponentSection) and isinstance(value, Mapping)
                and "_component_" in value and value["_component_"] is None):
            # an optional component turned off: `tune run ... lr_scheduler=null` sets its _component_ to null
            # (torchtune's override of a component node), and torchtune cannot remove the node (`~lr_scheduler`)
            return None
        try:
            return build_section(section, value, path, local)
        except ConfigKeyError as e:
            if f.metadata["default"] is not None or not str(e).startswith(f"config is missing required key '{path}."):
                raise
            # `~validation validation.seq_len=128`: torchtune deletes the section, then sets the key back into it
            raise ConfigKeyError(f"{e} ({path} is optional: to turn it off, give '~{path}' (or {path}=null) with no "
                                 f"{path}.* override on the same command line: torchtune applies the ~ deletions "
                                 "first, then each key=value, which puts the section back)") from None
    check = f.metadata["check"]
    return check(path, value) if check is not None else value


def build_section(cls: type, node: Any, where: str = "", local: bool = True) -> Any:
    """A ``cls`` instance from the plain mapping ``node`` (interpolations resolved); ``where`` is its path.
    ``local=False`` checks keys and values only, not what they name on this machine (files, devices): a study checks
    the recipe configs of runs whose start checkpoint does not exist yet, for a machine it may not run on."""
    hint = getattr(cls, "LIST_HINT", None)
    if isinstance(node, (list, tuple)) and hint is not None:
        raise ValueError(f"{where} is a list of {counted(len(node), 'node')}, torchtune's ConcatDataset of them, which "
                         f"this recipe does not take: {hint}")
    if not isinstance(node, Mapping):
        raise ValueError(f"{where or 'the config'}={node!r} is not accepted: expected a mapping of keys to values")
    known = set(section_keys(cls))
    signature: Dict[str, inspect.Parameter] = {}
    open_ended = False
    if issubclass(cls, ComponentSection):
        if "_component_" not in node and cls.DEFAULT_COMPONENT is not None:
            node = {"_component_": cls.DEFAULT_COMPONENT, **node}
        if node.get("_component_") is None:
            raise ConfigKeyError(f"{where}._component_ is missing: the dotted path of what builds {where}")
        signature, open_ended = _component_params(str(node["_component_"]), where)
        target = resolve_component(f"{where}._component_", node["_component_"])
        named = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"
        open_ended = open_ended and named not in cls.DROPS_KWARGS
        known |= set(signature) - set(cls.PASSED_BY_RECIPE)
    unknown = [k for k in node if k not in known]
    if unknown and not open_ended:
        refuse_unknown(unknown, known, where)
    missing = [n for n, p in signature.items() if p.default is inspect.Parameter.empty and cls.BUILT
               and n not in node and n not in cls.PASSED_BY_RECIPE and p.kind is not p.POSITIONAL_ONLY]
    if missing:
        names = ", ".join(f"{where}.{n}" for n in missing)
        raise ConfigKeyError(f"{where}: {node['_component_']} needs {names}, which the config does not give: "
                             f"add {'it' if len(missing) == 1 else 'them'}")
    if issubclass(cls, ComponentSection):  # this package's components: each value of the kind its annotation says
        check_annotated_args(resolve_component(f"{where}._component_", node["_component_"]),
                             {k: v for k, v in node.items() if k != "_component_"}, where)
    values: Dict[str, Any] = {}
    for f in fields(cls):
        if f.metadata.get("flat"):
            sub = f.metadata["section"]
            values[f.name] = build_section(sub, {k: v for k, v in node.items() if k in section_keys(sub)}, where,
                                           local)
        elif f.name == "args":
            values["args"] = {k: v for k, v in node.items() if k != "_component_"}
        elif "doc" in f.metadata:
            values[f.name] = _value(f, node, where, signature, local)
    out = cls(**values)
    if local or not cls.LOCAL_CHECKS:
        out.check(where)
    return out
