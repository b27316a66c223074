"""Code a checkpoint names: a dotted path read from a checkpoint's ``config.json`` (``longshort_family``,
``longshort_rope.method``) is imported, which runs its module's top-level code. A folder one did not make can name any
importable module, so, as transformers asks ``trust_remote_code=True`` before it runs the code a checkpoint's
``auto_map`` names (and lm-eval's ``hf`` passes that argument through ``--model_args``), the readers of someone's
checkpoint (the ``longshort`` eval model, ``longshort-misalignment``,
:func:`~torchtune_longshort.models.load_hf_checkpoint`) read it under :func:`checkpoint_code`: there a path outside this
package that this process has not imported already is refused before it is imported, unless the caller trusts it. So
does the recipe's config check (``tune run``, ``longshort-validate``) for the start checkpoint folders a config names
(``checkpointer.checkpoint_dir=THEIR_FOLDER`` is someone's folder, as ``pretrained=`` is; transformers'
``from_pretrained`` in one's own training script asks too), trusted by ``checkpointer.trust_remote_code: true``; a path
the config names itself (``model.family``, ``model.method``) is the user's and needs no key."""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterable, Iterator, Optional

from torchtune_longshort.rope.registry import is_dotted_path

PACKAGE = "torchtune_longshort"
# How the eval model's callers trust a checkpoint's code (its --model_args, lm-eval's flag, the class's keyword).
EVAL_FIX = ("trust_remote_code=True in --model_args (or lm-eval's --trust_remote_code; from Python, the keyword "
            "trust_remote_code=True)")
# How a recipe config trusts its start folders' code (:func:`~torchtune_longshort.training.recipe_config.
# load_recipe_config`).
RECIPE_FIX = ("checkpointer.trust_remote_code=true on the command line (or checkpointer.trust_remote_code: true in "
              "the config)")
# How the pack's tasks trust a folder they read (lm-eval puts the model's arguments in their metadata).
TASK_FIX = "trust_remote_code=True in --model_args"
# How torchtune's own recipes trust a step folder their hf_decoder model reads (no reader's gate around it).
MODEL_FIX = "model.trust_remote_code=true (hf_decoder's argument; from Python, trust_remote_code=True)"

_GATE: contextvars.ContextVar[Optional[tuple]] = contextvars.ContextVar("checkpoint_code", default=None)


class UntrustedCheckpointCode(ValueError):
    """A checkpoint names code outside the package that its reader was not asked to run."""


@contextlib.contextmanager
def checkpoint_code(trust_remote_code: bool, fix: str = EVAL_FIX, own: Iterable[str] = ()) -> Iterator[None]:
    """Read checkpoints inside this block as someone's: a dotted path one names is imported only when
    ``trust_remote_code`` (``fix``: how the caller says so, named in the refusal), or when it is among ``own`` (the
    paths the caller's own config names)."""
    token = _GATE.set((bool(trust_remote_code), fix, frozenset(own)))
    try:
        yield
    finally:
        _GATE.reset(token)


@contextlib.contextmanager
def component_code(trust_remote_code: Optional[bool], fix: str, own: Iterable[str] = ()) -> Iterator[None]:
    """A config component reading a folder (``hf_decoder``, ``checkpoint_tokenizer``,
    ``FullModelHFRopeCheckpointer``): inside a reader's block (the recipe's config check, ``longshort-eval``) as that
    reader reads it, unless ``trust_remote_code`` is given; outside any (torchtune's own recipes, a script of one's
    own) as someone's folder, trusted by ``trust_remote_code`` alone (``fix``: the component's argument)."""
    if trust_remote_code is None and _GATE.get() is not None:
        yield
        return
    with checkpoint_code(bool(trust_remote_code), fix, own):
        yield


def shipped(path: str) -> bool:
    """Whether dotted ``path`` is in this package (its code runs whatever the checkpoint says): its first part is the
    package, and its lookup does not leave it (:func:`_left_for`)."""
    return path.split(".")[0] == PACKAGE and _left_for(path) is None


def _left_for(path: str) -> Optional[str]:
    """The module outside the package that the lookup of dotted ``path`` (first part the package) reaches through an
    attribute of one of the package's modules, else None: ``torchtune_longshort.models.hf_model.torch.onnx.X`` is
    torch's (hf_model imports torch), whose lazy submodule onnx the lookup would import. The package's modules on the
    way are imported by name, as the lookup imports them (its own code); the attributes found without running any."""
    import importlib
    import importlib.util
    import inspect
    import sys
    import types

    parts, obj = path.split("."), sys.modules[PACKAGE]
    for i, part in enumerate(parts[1:], 1):
        if isinstance(obj, types.ModuleType) and obj.__name__.split(".")[0] != PACKAGE:
            return obj.__name__
        try:
            obj = inspect.getattr_static(obj, part)
            continue
        except AttributeError:
            name = ".".join(parts[:i + 1])
        if not isinstance(obj, types.ModuleType):
            return None  # no such attribute: the lookup says so
        try:
            found = name in sys.modules or importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return None  # a module __getattr__ of the package's, or nothing: the lookup says which
        obj = importlib.import_module(name)
    return obj.__name__ if isinstance(obj, types.ModuleType) and obj.__name__.split(".")[0] != PACKAGE else None


def check_checkpoint_path(path: Any, registry: dict, where: str, key: str) -> None:
    """Refuse ``path`` (``where``'s ``key``, read from a checkpoint) before it is imported, when a reader of
    someone's checkpoint runs (:func:`checkpoint_code`) without trust, and it is a dotted path outside the package
    that ``registry`` does not hold yet (held: imported already, nothing runs)."""
    gate = _GATE.get()
    if (gate is None or gate[0] or not is_dotted_path(path) or shipped(path) or path in gate[2]
            or dict.__contains__(registry, path)):
        return
    # the top-level package (or module) is what one installs and trusts; nothing is imported to tell which of the
    # parts after it are modules (a path may name an attribute inside a class: my_pkg.fam.Holder.MINE)
    top = path.split(".")[0]
    inside = top if top != PACKAGE else f"{_left_for(path)}, reached through a module of {PACKAGE}"
    top = top if top != PACKAGE else _left_for(path)  # torchtune_longshort.models.hf_model.torch.onnx.X: torch
    if _held_already(path):  # subprocess.Popen: nothing new would run, but the checkpoint would pick what is used
        role = "model family" if key.endswith("family") else "RoPE method"
        raise UntrustedCheckpointCode(
            f"{where}: {key}={path!r} names code outside {PACKAGE} (in {inside}, which this process has imported "
            f"already), which reading this checkpoint would use as its {role}: not used; a family or RoPE method is "
            f"taken from a checkpoint only when it is {PACKAGE}'s, your config names it, or you trust the "
            f"checkpoint; if you trust this checkpoint and {top}, pass {gate[1]}")
    raise UntrustedCheckpointCode(
        f"{where}: {key}={path!r} names code outside {PACKAGE} (in {inside}), which reading this checkpoint would "
        f"import, running top-level code of {top}: not imported; if you trust this checkpoint and {top}, pass "
        f"{gate[1]}")


def _held_already(path: str) -> bool:
    """Whether dotted ``path`` names an object reachable from a module this process has imported, without importing
    anything or running any code (``inspect.getattr_static``): reading it would run no module's top-level code."""
    import inspect
    import sys

    parts = path.split(".")
    for n in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:n]))
        if module is None:
            continue
        obj = module
        for part in parts[n:]:
            try:
                obj = inspect.getattr_static(obj, part)
            except AttributeError:
                return False
        return True
    return False
