"""A registry of classes by name that also takes the dotted path of a class of one's own (``my_module.MyRoPE``), as
torchtune's ``_component_`` does (:class:`DottedInstances`: of instances, the model families' table rows): an
installed package cannot be edited, and a name put into the dict by hand (``ROPE_METHODS["mine"] = MyRoPE``) lives
only in the process that ran that line; ``tune run``'s config check, torchrun's ranks and ``longshort-eval`` (which
reads the method back from a checkpoint's ``config.json``) each start without it. A path is imported on its first
lookup (``registry[path]``, ``path in registry``, ``registry.get(path)``) in whatever process asks, and kept under
that path."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import types
from typing import Any, Optional, Tuple


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _holder(obj: Any, path: str) -> str:
    """``obj``, found at ``path``, in words: "module m", "class m.C", "m.X (a dict)"."""
    if isinstance(obj, types.ModuleType):
        return f"module {path}"
    return f"class {path}" if isinstance(obj, type) else f"{path} (a {type(obj).__name__})"


def is_dotted_path(name: Any) -> bool:
    """Whether ``name`` reads as ``package.module.Class``: a string of dot-separated identifiers, at least two."""
    return isinstance(name, str) and "." in name and all(p.isidentifier() for p in name.split("."))


class DottedRegistry(dict):
    """``name -> class``; a key that is not there but is a dotted path is imported, checked to be a subclass of
    ``base`` and kept. ``what`` names an entry in messages ("RoPE method"); ``name_attr``: the class attribute set
    to the path it was imported by (the name a saved spec records, so that the process reading it back imports the
    same class), or None; ``used_in``: the processes that import an entry, named in an import refusal's fix."""

    def __init__(self, entries: dict, *, base: Optional[type], what: str, name_attr: Optional[str] = None,
                 used_in: str = "every process that builds or loads the model"):
        super().__init__(entries)
        self.base, self.what, self.name_attr, self.used_in = base, what, name_attr, used_in

    def load(self, path: str) -> Any:
        """The entry at dotted ``path``, imported and kept; ``ValueError`` in one line saying why it cannot be one."""
        entry, holder = self._locate(path)
        if not self.accepts(entry):
            found = (entry.__name__ if isinstance(entry, type) else f"the module {entry.__name__}"
                     if isinstance(entry, types.ModuleType) else type(entry).__name__)
            raise ValueError(f"{path!r} names {found} in {holder}: a {self.what} of your own is {self.wanted()}")
        self.check(entry, path)  # before it is kept: a lookup meanwhile (another thread's) imports and asks anew
        entry = self[path] = self.named(entry, path)
        return entry

    def check(self, entry: Any, path: str) -> None:
        """Refuse an imported ``entry`` that :meth:`accepts` takes but cannot be one (``ValueError``, one line);
        here none. Called before ``entry`` is kept under ``path``."""

    def _locate(self, path: str) -> Tuple[Any, str]:
        """The object at ``path`` and its holder's words ("module m", "class m.C"), found as torchtune's
        ``_component_`` finds one (its ``config._utils._get_component_from_path``, after Hydra's ``_locate``; not
        imported: rope/ does not import torchtune): the first part imported, each next one an attribute of the
        object so far or, where a module has none, its submodule imported; so an attribute inside a class
        (``pkg.mod.Class.Inner``, a classmethod) is found too. ``ValueError`` naming the part that is missing."""
        parts = path.split(".")
        obj = self._import(path, parts[0])
        for i, part in enumerate(parts[1:], 1):
            parent = ".".join(parts[:i])
            holder = _holder(obj, parent)
            try:
                obj = getattr(obj, part)
                continue
            except AttributeError:
                if not isinstance(obj, types.ModuleType) or not self._is_submodule(f"{parent}.{part}"):
                    imports = " imports but" if isinstance(obj, types.ModuleType) else ""
                    raise ValueError(f"{path!r}: {holder}{imports} has no attribute {part!r}: a {self.what} of "
                                     f"your own is {self.wanted()}") from None
            obj = self._import(path, f"{parent}.{part}")
        return obj, holder

    @staticmethod
    def _is_submodule(name: str) -> bool:
        """Whether Python finds module ``name`` (its parent imported already): a module with no such attribute may
        still have it as a submodule its ``__init__`` does not import."""
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    def _import(self, path: str, module_name: str) -> types.ModuleType:
        try:
            return importlib.import_module(module_name)
        except Exception as e:  # noqa: BLE001 - the user's module: ImportError, or its own SyntaxError, NameError...
            raise ValueError(f"{path!r} does not import ({type(e).__name__}: {e}): {self._import_fix(module_name, e)}"
                             ) from None

    def _import_fix(self, module_name: str, e: Exception) -> str:
        """What to do about ``e``, raised importing ``module_name``: put the module where Python finds it, or, when
        it was found and an import inside it failed (a package it needs, not installed here), install that; an
        error of the module's own (a SyntaxError, a NameError at its top level): mend it."""
        if not isinstance(e, ImportError):
            return f"module {module_name} was found, but running it failed: mend it where the error says"
        missing = getattr(e, "name", None)
        if isinstance(e, ModuleNotFoundError) and (missing is None or module_name == missing
                                                   or module_name.startswith(missing + ".")):
            return (f"a {self.what} of your own must be importable in {self.used_in} (pip install its package, or "
                    "put its folder on PYTHONPATH)")
        return (f"module {module_name} was found, but an import in it failed: install what it imports (or mend that "
                f"import) in {self.used_in}")

    def accepts(self, entry: Any) -> bool:
        """Whether an imported ``entry`` can be one (here: a class, a subclass of ``base``)."""
        return isinstance(entry, type) and (self.base is None or issubclass(entry, self.base))

    def wanted(self) -> str:
        return f"a subclass of {_qualified(self.base)}" if self.base else "a class"

    def named(self, entry: Any, path: str) -> Any:
        """``entry`` as kept under ``path``: a class of one's own gets ``name_attr`` set to the path (a shipped
        class keeps its own name)."""
        if self.name_attr is not None and not any(entry is v for v in self.values()):
            setattr(entry, self.name_attr, path)
        return entry

    def __missing__(self, key):
        if not is_dotted_path(key):
            raise KeyError(key)
        return self.load(key)

    def __contains__(self, key) -> bool:
        if dict.__contains__(self, key):
            return True
        try:
            self[key]
        except (KeyError, ValueError, TypeError):
            return False
        return True

    def get(self, key, default=None):
        return self[key] if key in self else default


class DottedInstances(DottedRegistry):
    """``name -> instance`` of ``base`` (a frozen dataclass: a model family is a table row, not a class), with
    :class:`DottedRegistry`'s lookup: a dotted path names a module-level instance of one's own, kept as a copy whose
    ``name_attr`` field is the path (so a checkpoint records the path, and the process reading it imports it)."""

    def accepts(self, entry: Any) -> bool:
        return isinstance(entry, self.base)

    def wanted(self) -> str:
        return f"an instance of {_qualified(self.base)}"

    def named(self, entry: Any, path: str) -> Any:
        if self.name_attr is None or any(entry is v for v in self.values()):
            return entry
        return dataclasses.replace(entry, **{self.name_attr: path})
