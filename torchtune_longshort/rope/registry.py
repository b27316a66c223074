"""A registry of classes by name that also takes the dotted path of a class of one's own (``my_module.MyRoPE``), as
torchtune's ``_component_`` does: an installed package cannot be edited, and a name put into the dict by hand
(``ROPE_METHODS["mine"] = MyRoPE``) lives only in the process that ran that line; ``tune run``'s config check,
torchrun's ranks and ``longshort-eval`` (which reads the method back from a checkpoint's ``config.json``) each
start without it. A path is imported on its first lookup (``registry[path]``, ``path in registry``,
``registry.get(path)``) in whatever process asks, and kept under that path."""

from __future__ import annotations

import importlib
from typing import Any, Optional


def is_dotted_path(name: Any) -> bool:
    """Whether ``name`` reads as ``package.module.Class``: a string of dot-separated identifiers, at least two."""
    return isinstance(name, str) and "." in name and all(p.isidentifier() for p in name.split("."))


class DottedRegistry(dict):
    """``name -> class``; a key that is not there but is a dotted path is imported, checked to be a subclass of
    ``base`` and kept. ``what`` names an entry in messages ("RoPE method"); ``name_attr``: the class attribute set
    to the path it was imported by (the name a saved spec records, so that the process reading it back imports the
    same class), or None."""

    def __init__(self, entries: dict, *, base: Optional[type], what: str, name_attr: Optional[str] = None):
        super().__init__(entries)
        self.base, self.what, self.name_attr = base, what, name_attr

    def load(self, path: str) -> type:
        """The class at dotted ``path``, imported and kept; ``ValueError`` in one line saying why it cannot be one."""
        module_name, _, attr = path.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(f"{path!r} does not import ({type(e).__name__}: {e}): a {self.what} of your own must be "
                             "importable in every process that builds or loads the model (pip install its package, or "
                             "put its folder on PYTHONPATH)") from None
        cls = getattr(module, attr, None)
        if not isinstance(cls, type) or (self.base is not None and not issubclass(cls, self.base)):
            found = "nothing" if cls is None else type(cls).__name__ if not isinstance(cls, type) else cls.__name__
            need = f"a subclass of {self.base.__module__}.{self.base.__qualname__}" if self.base else "a class"
            raise ValueError(f"{path!r} names {found} in module {module_name}: a {self.what} of your own is {need}")
        if self.name_attr is not None and cls not in self.values():  # a shipped class keeps its own name
            setattr(cls, self.name_attr, path)
        self[path] = cls
        return cls

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
