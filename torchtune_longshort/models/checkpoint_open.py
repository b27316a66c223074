"""A checkpoint folder opened for a run at a length: the one path the ``longshort`` eval model, the misalignment CLI
and the study take before they read a weight.

:func:`open_checkpoint` opens the folder once (:meth:`CheckpointFolder.open`, every check of the folder), loads the
tokenizer (the folder's own, or one given as a folder or file of any format the family reads, checked against the
model's vocabulary), takes the effective RoPE spec (a scaling override, else the folder's own), computes the positions
that spec covers (:func:`usable_positions`) and decides what happens past them (:func:`length_verdict`): allowed,
extrapolated (the caller allows it) or refused, as data, with one line that names the caller's argument, the length,
the positions covered, config.json's ``max_position_embeddings``, the scaling and the fix. Each caller keeps only
its way of reporting the verdict: the eval model logs it, the CLI refuses in one line, the study's pre-flight logs
it (its evaluations always allow extrapolation) and refuses a folder or tokenizer before any run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, Optional, Union

from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
from torchtune_longshort.models.folder_rope import effective_rope_spec, pretrained_rope
from torchtune_longshort.models.hf_rope import native_positions, usable_length_of
from torchtune_longshort.models.rope_override import check_override_length, replacement_note, typed
from torchtune_longshort.models.source_tokenizers import SourceTokenizer
from torchtune_longshort.rope import ROPE_METHODS
from torchtune_longshort.models.tokenizer_formats import load_tokenizer

ALLOWED, EXTRAPOLATED, REFUSED = "allowed", "extrapolated", "refused"


@dataclass(frozen=True)
class ArgNames:
    """How a caller names what it was given, so that its messages name its own arguments.

    ``checkpoint``: the checkpoint folder argument (``pretrained``, ``--checkpoint-dir``);
    ``length``: the length argument (``max_length``, ``--length``); ``allow``: how extrapolation is allowed
    (``allow_extrapolation=true``); ``tokenizer``: the tokenizer argument; ``scale``: how this caller scales RoPE
    instead ("" when it cannot); ``refused``: what a refusal does here, ``{usable}`` filled in ("" when the command
    itself is refused); ``rope``: how its RoPE override names the method (its parameters are ``rope_<param>=``
    everywhere, :mod:`~torchtune_longshort.models.rope_override`)."""

    length: str
    allow: str
    tokenizer: str
    scale: str = ""
    refused: str = ""
    checkpoint: str = "checkpoint_dir"
    rope: str = "rope="  # how a RoPE override's method is typed: rope=yarn (model_args), --rope yarn (a CLI)


@dataclass(frozen=True)
class LengthVerdict:
    """What happens at ``length`` on a model that covers ``usable`` positions: ``status`` is :data:`ALLOWED`,
    :data:`EXTRAPOLATED` or :data:`REFUSED`; ``message`` the one line that says so ("" when allowed)."""

    status: str
    length: int
    usable: int
    message: str = ""

    @property
    def refused(self) -> bool:
        return self.status == REFUSED

    @property
    def extrapolated(self) -> bool:
        return self.status == EXTRAPOLATED


@dataclass(frozen=True)
class OpenedCheckpoint:
    """A checkpoint folder opened for a run: the folder, its tokenizer (checked), the effective RoPE spec (the
    override, else the folder's; None: plain RoPE), the override alone, the positions covered and the verdict."""

    folder: CheckpointFolder
    tokenizer: SourceTokenizer
    rope_spec: Optional[Dict[str, Any]]
    rope_override: Optional[Dict[str, Any]]
    usable_length: int
    verdict: LengthVerdict
    # what the override replaces in a folder with a scaling of its own (None: nothing), to be said once
    override_note: Optional[str] = None

    @property
    def length(self) -> int:
        """The length the run asked for (the positions covered when it asked for none)."""
        return self.verdict.length


def usable_positions(config: Dict[str, Any], spec: Optional[Dict[str, Any]], *, override: bool = False,
                     length: Optional[int] = None, pretrained: Optional[int] = None) -> int:
    """Positions a model covers: a spec's ``max_seq_len`` (the length its scaling targets), else its pre-trained
    length times ``factor``, else ``max_position_embeddings`` (:func:`~torchtune_longshort.models.hf_rope.
    usable_length_of`). An override that names neither is built for the run's ``length`` (the method takes its
    factor as ``length / L``), so it covers ``length``. An override's ``factor`` scales ``pretrained``, the folder's
    pre-trained length (:func:`~torchtune_longshort.models.folder_rope.pretrained_rope`: a scaled folder's own original
    length, which the model is built from), not ``max_position_embeddings``: on a Llama-3.1 layout (64 of 256
    positions) ``rope=yarn,rope_factor=2`` covers 128, and 512 let 200-token requests run past its scaling unsaid.
    The method says how far its parameters scale (:meth:`~torchtune_longshort.rope.base.ScaledRoPE.covered_length`:
    CLEX's ``t_max``, not a ``factor``; ``rope=clex,rope_t_max=2,max_length=512`` on 128 positions scored 504-token
    requests past L * t_max = 256 unsaid), and refuses a value it would not build (``factor=-2`` was named as
    ``max_seq_len=-256``, ``factor=abc`` as Python's float error)."""
    if override and spec and "max_seq_len" not in spec:
        method = ROPE_METHODS.get(spec.get("method"))
        original = int(spec.get("original_max_seq_len") or pretrained or native_positions(config))
        covered = method.covered_length(spec, original) if method is not None else None
        if covered is not None:
            return covered
        if length is not None:
            return int(length)
    return usable_length_of(config, spec)


def override_scale_fix(spec: Dict[str, Any], pretrained: int, need: int, prefix: str = "rope=") -> str:
    """How to make a ``rope=`` override (``spec``, scaling ``pretrained`` positions) cover ``need`` positions, in
    the ``longshort`` model's arguments: the override was given, so "pass rope=<method>,rope_factor=<f>" names what
    the user did already (``rope=yarn,rope_factor=2,max_length=512`` on 128 positions was told just that)."""
    method = ROPE_METHODS.get(spec.get("method"))
    given = typed(spec, prefix)
    times = max(2, math.ceil(need / max(1, int(pretrained))))
    param = method.scale_parameter if method is not None else None
    if param is not None and param in spec:  # rope_max_seq_len alone cannot go past what the parameter reaches
        change = f"rope_{param}={times}"
    elif "max_seq_len" in spec and param is not None:
        change = f"rope_max_seq_len={need}"
    elif param is not None:
        change = f"rope_{param}={times}"
    else:
        return (f"a method that scales with the length, e.g. {prefix}yarn,rope_factor={times} (the override {given} "
                f"covers the {pretrained} pre-trained positions only)")
    return f"{change} (the override {given} covers fewer positions)"


def length_verdict(checkpoint: Union[str, Path], config: Dict[str, Any], spec: Optional[Dict[str, Any]], usable: int,
                   length: Optional[int], allow_extrapolation: bool, names: ArgNames) -> LengthVerdict:
    """The verdict at ``length`` (None: the positions covered) on ``checkpoint`` (its parsed config.json and the
    effective RoPE ``spec``) covering ``usable`` positions, its message in ``names``' terms (see :class:`ArgNames`)."""
    if length is None or length <= usable:
        return LengthVerdict(ALLOWED, usable if length is None else int(length), usable)
    unset = "" if "max_position_embeddings" in config else " (not set: the default)"
    facts = (f"{names.length}={length} is past the {usable} positions checkpoint {str(checkpoint)!r} covers "
             f"(config.json max_position_embeddings={native_positions(config)}{unset}, RoPE scaling={spec!r})")
    if allow_extrapolation:
        return LengthVerdict(EXTRAPOLATED, int(length), usable,
                             f"{facts}: {names.allow} given, so its RoPE extrapolates past them")
    consequence = f"; {names.refused.format(usable=usable)}" if names.refused else ""
    scale = f"{names.scale}, " if names.scale else ""
    return LengthVerdict(REFUSED, int(length), usable,
                         f"{facts}: its RoPE would extrapolate past them{consequence}. Use {names.length} <= {usable}, "
                         f"{scale}a checkpoint trained or scaled for the length, or {names.allow} to go past "
                         "them anyway")


def checked_tokenizer(folder: CheckpointFolder, tokenizer: Optional[Union[str, Path]], names: ArgNames
                      ) -> SourceTokenizer:
    """The tokenizer a run encodes with: ``tokenizer`` (a folder or file of a format the folder's family reads),
    else the folder's own; refused when its ids reach past the model's embedding table."""
    if tokenizer is None:
        return folder.load_tokenizer()
    try:
        tok = load_tokenizer(str(tokenizer), folder.family.tokenizer_formats)
    except ValueError as e:
        raise FileNotFoundError(f"{names.tokenizer}={str(tokenizer)!r}: {e}") from None
    return folder.check_tokenizer(tok, where=f"{names.tokenizer}=")


def open_checkpoint(path: Union[str, Path, CheckpointFolder], *, names: ArgNames,
                    tokenizer: Optional[Union[str, Path]] = None, rope: Optional[Dict[str, Any]] = None,
                    length: Optional[int] = None, allow_extrapolation: bool = False) -> OpenedCheckpoint:
    """Open ``path`` for a run of ``length`` tokens (see the module docstring): the folder and its checks, the
    tokenizer (``tokenizer``, else the folder's own), the effective RoPE spec (``rope``, a spec dict that overrides
    the folder's scaling, else the folder's), the positions it covers and the verdict at ``length``. Refuses
    (``FileNotFoundError`` / ``ValueError``, naming the folder or ``names.tokenizer``) what the folder checks refuse
    and a tokenizer that cannot be read or does not fit; a length past the positions is a verdict, not an error."""
    folder = CheckpointFolder.open(path, need_tokenizer=tokenizer is None, field=names.checkpoint)
    tok = checked_tokenizer(folder, tokenizer, names)
    # what the model is built with: an override of the step's own learned method keeps the step's settings
    spec = effective_rope_spec(folder, rope)
    pretrained = pretrained_rope(folder)[1] if rope is not None else None
    if rope is not None:
        check_override_length(rope, pretrained, names.rope)
    usable = usable_positions(folder.config, spec, override=rope is not None, length=length, pretrained=pretrained)
    if rope is not None and names.scale and length is not None and length > usable:
        original = int(rope.get("original_max_seq_len") or pretrained or native_positions(folder.config))
        names = replace(names, scale=override_scale_fix(rope, original, int(length), names.rope))
    verdict = length_verdict(folder.path, folder.config, spec, usable, length, allow_extrapolation, names)
    return OpenedCheckpoint(folder, tok, spec, rope, usable, verdict, replacement_note(folder, rope, names.rope))
