"""``--model hf --model_args pretrained=<folder>,peft=<adapter>`` whose adapters do not fit the folder's weights,
refused before lm-eval starts (:func:`refuse_unfitting_adapter`).

An adapter trained on another model (a LoRA run's ``step_<k>/adapter`` given with the start checkpoint of another
run: other KV heads, another MLP width) failed once lm-eval had loaded the model, in PEFT's ``RuntimeError: Error(s)
in loading state_dict for PeftModelForCausalLM: size mismatch for ...`` traceback, one line per LoRA matrix, exit 1.
Only the safetensors headers are read (shapes, no weight): each ``<module>.lora_A.weight`` (``r x in``) and
``<module>.lora_B.weight`` (``out x r``) of ``adapter_model.safetensors`` against ``<module>.weight`` of the
folder's weight files. What cannot be read here (a hub name, ``.bin`` files, a module the folder does not hold, such
as a tied ``lm_head``) is left to PEFT.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional, Tuple

from torchtune_longshort.models.hf_checkpoint import CONFIG_FILE, CheckpointFolder, located_weight_files, read_hf_config
from torchtune_longshort.models.peft_adapter import PEFT_PREFIX, WEIGHTS_FILE as ADAPTER_WEIGHTS


def refuse_unfitting_adapter(pretrained: Optional[str], peft: str) -> None:
    """``ValueError`` (one line) where a LoRA matrix of ``peft`` does not fit the weight it adapts in ``pretrained``."""
    if not pretrained:
        return
    base, adapter = Path(pretrained).expanduser(), Path(peft).expanduser()
    theirs = _shapes(sorted(base.glob("*.safetensors"))) if base.is_dir() else {}
    ours = _shapes([adapter / ADAPTER_WEIGHTS]) if adapter.is_dir() else {}
    if not theirs or not ours:
        return
    for key, shape in sorted(ours.items()):
        for part, (axis, side) in {".lora_A.weight": (1, "columns"), ".lora_B.weight": (0, "rows")}.items():
            if not key.endswith(part) or len(shape) != 2:
                continue
            module = key[len(PEFT_PREFIX):-len(part)] if key.startswith(PEFT_PREFIX) else key[:-len(part)]
            weight = theirs.get(f"{module}.weight")
            if weight is None or len(weight) != 2 or weight[axis] == shape[axis]:
                continue
            raise ValueError(f"--model_args peft={peft} with pretrained={pretrained}: the adapters do not fit that "
                             f"model ({module}: its weight is {weight[0]} x {weight[1]}, the adapter's "
                             f"{part[1:7]} has {shape[axis]} {side} where it needs {weight[axis]}): they were "
                             f"trained on {_trained_on(adapter)}; give that {_what(adapter)} as pretrained=, or the "
                             "adapter of a run on this one")


def _shapes(files) -> Dict[str, Tuple[int, ...]]:
    """Every tensor's shape in ``files`` (their headers); {} where one cannot be read (PEFT or transformers say)."""
    from safetensors import safe_open

    shapes: Dict[str, Tuple[int, ...]] = {}
    try:
        for f in files:
            with safe_open(str(f), framework="pt") as handle:
                for key in handle.keys():
                    shapes[key] = tuple(handle.get_slice(key).get_shape())
    except Exception:  # noqa: BLE001 - a file cut short or no safetensors: the loaders name it
        return {}
    return shapes


def recorded_base_name(adapter: Path) -> Optional[str]:
    """The adapter's recorded base (``base_model_name_or_path``), None where its config names none."""
    return _recorded(adapter, "base_model_name_or_path")


def recorded_revision(adapter: Path) -> Optional[str]:
    """The revision of its base the adapter records (``revision``: PEFT loads the base at it), None: ``main``."""
    return _recorded(adapter, "revision")


def _recorded(adapter: Path, key: str) -> Optional[str]:
    import json

    try:
        value = json.loads((adapter / "adapter_config.json").read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return str(value) if value else None


def _trained_on(adapter: Path) -> str:
    name = recorded_base_name(adapter)
    return recorded_base_said(name, recorded_base_found(adapter, name), recorded_revision(adapter)) if name else \
        "another model (its adapter_config.json names none)"


def _what(adapter: Path) -> str:
    """What the adapter's record names, for "give that ... as pretrained=": a hub model (cached here, or a relative
    name of a hub id's shape no folder here matches: :func:`recorded_base_arg` advises it as written), else a
    folder."""
    name = recorded_base_name(adapter)
    found = recorded_base_found(adapter, name) if name else None
    arg = recorded_base_arg(name, found, recorded_revision(adapter)) if name else None
    return "model" if name and _relative(name) and arg == name else "folder"


def hub_model(recorded: str, revision: Optional[str] = None) -> bool:
    """Whether a recorded base names a model of the Hugging Face hub that the cache here holds at ``revision`` (the
    adapter's: :func:`recorded_revision`) (:func:`hub_cached_folder`, as peft-base looks it up: PEFT records the name
    a user loaded the base by, ``from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct")``, which loaded it into that
    cache)."""
    return hub_cached_folder(recorded, revision) is not None


def hub_cached_folder(recorded: str, revision: Optional[str] = None) -> Optional[Path]:
    """The Hugging Face cache's folder of a recorded base that names a hub model, as transformers loads it offline
    (``HF_HUB_OFFLINE=1``): a repository id (huggingface_hub's rule) that is no folder here, whose snapshot of
    ``revision`` (the adapter's ``revision``, as PEFT passes it; None: ``main``) holds a ``config.json``. None: no such
    model in the cache."""
    if Path(recorded).is_dir() or not hub_named(recorded):
        return None
    # deferred: huggingface_hub (transformers' dependency; asked only of an adapter's recorded base)
    from huggingface_hub import try_to_load_from_cache

    try:
        config = try_to_load_from_cache(recorded, CONFIG_FILE, revision=revision)
    except (OSError, ValueError):
        return None
    return Path(config).parent if isinstance(config, str) else None


def _relative(recorded: str) -> bool:
    return not Path(recorded).expanduser().is_absolute()


def recorded_base_said(recorded: str, found: Optional[Path] = None, revision: Optional[str] = None) -> str:
    """An adapter's recorded base (``base_model_name_or_path``) for a message: a relative one (PEFT records the path
    its user loaded the base by, or the hub name) says so, as it names a folder from where they trained, not from
    here, and names the folder it was found as above the adapter (``found``: :func:`recorded_base_found`); one no
    folder here matches that a hub repository may be named (``HuggingFaceTB/SmolLM2-135M``) may be either
    (:func:`recorded_base_arg`); a hub model's name in the cache here at the adapter's ``revision``
    (:func:`hub_model`) is said as such."""
    if found is not None:
        link = f", a link to {found.resolve()}" if found.resolve() != Path(os.path.abspath(found)) else ""
        return f"{recorded} (relative to the folder they were trained in: {found}{link}, found above the adapter)"
    if hub_model(recorded, revision):
        return f"{recorded} (a model of the Hugging Face hub)"
    if not _relative(recorded):
        return recorded
    if recorded_base_arg(recorded, revision=revision) == recorded:
        return f"{recorded} (a local path relative to where they were trained, or a hub model)"
    return f"{recorded} (a path relative to the folder they were trained in)"


def recorded_base_arg(recorded: str, found: Optional[Path] = None, revision: Optional[str] = None) -> str:
    """The ``pretrained=`` a message advises for an adapter's recorded base: the folder found above the adapter
    (``found``: :func:`recorded_base_found`); the record as written where it is absolute, or relative with no folder
    here and the shape of a hub name (what transformers then loads); else ``<that folder>``, a folder of the
    training's that the user names. A hub model in the cache here (at ``revision``): its name."""
    if found is not None:
        return str(found)
    if hub_model(recorded, revision) or not _relative(recorded):
        return recorded
    if not Path(recorded).expanduser().is_dir() and hub_shaped(recorded):
        return recorded
    return "<that folder>"


def hub_named(name: str) -> bool:
    """Whether ``name``, as typed, may name a hub repository: not written as a path (``/``, ``./``, ``../``, ``~``)
    and of a repository id's shape (:func:`hub_shaped`)."""
    return not name.startswith(("/", "./", "../", "~")) and hub_shaped(name)


def hub_shaped(name: str) -> bool:
    """Whether ``name`` may name a hub repository (huggingface_hub's own rule, which transformers applies)."""
    # deferred: huggingface_hub (transformers' dependency; asked only of a --model_args pretrained= or peft=)
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def recorded_base_found(adapter: Path, recorded: str) -> Optional[Path]:
    """The folder a relative recorded base names, found from the adapter's own place: a folder of that name with a
    ``config.json`` entry (transformers loads no model from a folder without one, so a folder of that name without
    it, ``/models`` for a base recorded as ``models``, is not the one the training loaded). PEFT records the path
    relative to the folder the training ran in, which nothing records, and its ``AutoPeftModel`` loads it as
    transformers' ``from_pretrained`` reads any name (``os.path.isdir(base_model_name_or_path)``): from the current
    folder. So where this command runs in a folder above the adapter (the training's, which saved it below), the
    record is read from there, as PEFT reads it; else under the nearest folder above ``adapter`` (as given, then as
    links resolve) that holds it (``run_a/chained`` of a base ``step_2`` finds ``run_a/step_2``, the same from any
    folder not above it: another run's ``step_2`` in the current folder is not taken). None: an absolute record,
    ``.``, or no such folder."""
    path = Path(recorded).expanduser()
    if path.is_absolute() or os.path.normpath(path) == ".":
        return None
    aboves = (Path(os.path.abspath(adapter)), adapter.resolve())
    here = Path.cwd()
    if any(here in above.parents for above in aboves) and path.is_dir() and os.path.lexists(path / CONFIG_FILE):
        return here / path
    for above in aboves:
        for top in above.parents:
            if (top / path).is_dir() and os.path.lexists(top / path / CONFIG_FILE):
                return top / path
    return None


def same_checkpoint(base: Path, other: Path) -> bool:
    """Whether two folders hold one checkpoint: the same folder (links resolved), or the same content
    (:meth:`~torchtune_longshort.models.hf_checkpoint.CheckpointFolder.content_digest`: a copy). ``base``: a
    ``--model_args pretrained=``, ``other``: an adapter's recorded base. A file of either that cannot be read (a
    weight file cut short, a link to nothing, a folder where ``config.json`` belongs) is refused as itself, naming
    it (told before as "these adapters were trained on <other> ..., so both would be applied"); a folder this
    project does not read otherwise (a family or RoPE type its table lacks: ``--model hf`` may still load it) is
    compared by the folder alone (its refusal was told before instead of the answer)."""
    if base.resolve() == other.resolve():
        return True
    fields = ((base, "--model_args pretrained"), (other, "base_model_name_or_path"))
    try:
        digests = [CheckpointFolder.open(folder, field=field).content_digest() for folder, field in fields]
    except (ValueError, KeyError, TypeError):
        for folder, field in fields:  # unless a file of either cannot be read: that is refused as itself
            read_hf_config(folder, field)
            located_weight_files(folder.expanduser().resolve())
        return False
    return digests[0] == digests[1]


def is_recorded_base(base: Path, recorded: str, adapter: Optional[Path] = None) -> bool:
    """Whether the folder ``base`` is the one an adapter's recorded ``base_model_name_or_path`` names, the same answer
    from whatever folder this command runs in. An absolute record (the recipe's) names one folder. A relative one was
    relative to the folder the training ran in, which nothing records (PEFT's ``AutoPeftModel`` reads it from the
    current folder, as transformers reads any path): where a folder above ``adapter`` holds it
    (:func:`recorded_base_found`), ``base`` must be that checkpoint (:func:`same_checkpoint`: another run's
    ``step_2``, or another folder named as a link the training loaded by, is not); else ``base`` is taken for it
    where its path ends with it (past the leading ``..`` of a record that climbs), whatever folder the training ran
    in."""
    path = Path(recorded).expanduser()
    found = recorded_base_found(adapter, recorded) if adapter is not None else None
    if found is not None:
        return same_checkpoint(base, found)
    if base.resolve() == path.resolve():
        return True
    tail = Path(os.path.normpath(path)).parts
    while tail[:1] == ("..",):
        tail = tail[1:]
    if path.is_absolute() or not tail or tail == (".",):
        return False
    return any(Path(p).parts[-len(tail):] == tail for p in (os.path.abspath(base), base.resolve()))
