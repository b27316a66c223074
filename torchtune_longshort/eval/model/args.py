"""The ``longshort`` lm-eval model's arguments (``--model_args k=v,...``): checked, resolved, and the model loaded.

    pretrained: checkpoint folder (``config.json`` + safetensors + its tokenizer) of any family in
        ``torchtune_longshort.models.MODEL_FAMILIES``, as for lm-eval's ``hf`` model; lm-eval names the results
        folder after it. ``checkpoint_dir`` is the same argument under its older name.
    tokenizer: a tokenizer folder or file of any format (``tokenizer.model``, ``original/tokenizer.model``,
        ``tokenizer.json``; default: ``pretrained``'s own).
    rope: RoPE scaling method name (overrides ``config.json``'s ``rope_scaling``); ``rope_<key>=<value>`` sets
        its parameters (``rope_factor=4``). Without ``rope``, the checkpoint's own scaling (if any) is used.
    max_length: longest sequence the model is run on (``32768`` or ``32k``; default: the checkpoint's positions
        x scaling factor).
    allow_extrapolation: run past the checkpoint's positions x scaling factor (default false: such requests
        get NaN / empty output and an error naming the fix, and the rest of the run goes on).
    batch_size: an integer (default 1), or ``auto`` / ``auto:N`` as lm-eval's ``hf`` takes them: batches start at
        ``max_batch_size`` (default 64); one that runs out of memory is halved and retried, and the size that fitted
        is kept for the following (shorter) requests; ``auto:N`` goes back to ``max_batch_size`` at N evenly spaced
        points of each request list. On a CPU each batch is also bounded by free memory under an estimate of its
        peak (:mod:`torchtune_longshort.eval.model.batch_size`). The sizes run are the results' ``batch_sizes``.
    max_batch_size: the largest batch ``auto`` tries (lm-eval's ``--max_batch_size``; ignored with a fixed size).
    dtype: float32 (default) | bfloat16 | float16, their torch names (``half``, ``torch.bfloat16``, a ``torch.dtype``
        from Python), or ``auto``: the checkpoint's ``config.json`` dtype, as lm-eval's ``hf`` loads by default.
    device: cpu | cuda | cuda:N | mps (:data:`torchtune_longshort.devices.ACCEPTED`; default: cuda where there is one).
    truncation: none (default: a prompt longer than the model is refused, NaN with the reason) | left (lm-eval's
        ``hf``: keep the last tokens) | middle (keep first and last halves). Applies only to tasks that declare no
        truncation of their own: LongBench-E's docs declare ``middle`` (its protocol), passkey's ``none``
        (see ``torchtune_longshort.eval.model.limits``).
    max_gen_toks: default generation budget (256, as in lm-eval's ``hf``).
    add_bos_token: prepend BOS when encoding (default: what the model's own tokenizer does, as lm-eval's ``hf``:
        Llama-2/3 yes, Qwen2 / SmolLM2 no; true adds nothing to a tokenizer without BOS, as ``hf``).
    cpu_keep_freed_blocks: on a CPU, glibc keeps large freed blocks for reuse (default true; the recipe's setting
        of the same name, :mod:`torchtune_longshort.training.cpu_allocator`): a long sequence's activations and
        logit chunks are then not page-faulted in again on every forward (at 8k on SmolLM2: 2.4M page faults and
        ~4 s of a ~23 s pass without it). The process's resident memory stays at its peak.
    trust_remote_code: import the code of one's own that the checkpoint's config.json names by a dotted path outside
        this package (``longshort_family``, ``longshort_rope.method``), as transformers' ``trust_remote_code`` does
        for ``auto_map`` (lm-eval's ``--trust_remote_code`` adds it). Default false: such a checkpoint is refused
        before its module is imported (:mod:`torchtune_longshort.rope.checkpoint_code`).
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import torch

from torchtune_longshort.devices import default_device, require_device
from torchtune_longshort.eval.model.batch_size import DEFAULT_MAX_BATCH_SIZE
from torchtune_longshort.eval.model.processes import process_device
from torchtune_longshort.eval.model.limits import check_truncation
from torchtune_longshort.lengths import length_value
from torchtune_longshort.models.checkpoint_open import ArgNames, LengthVerdict, open_checkpoint
from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
from torchtune_longshort.models.hf_model import check_checkpoint_fits, load_hf_checkpoint
from torchtune_longshort.models.rope_override import (factor_from_length_note, override_spec, parameters_as_typed,
                                                      raise_as_typed)
from torchtune_longshort.models.source_tokenizers import SourceTokenizer
from torchtune_longshort.rope.checkpoint_code import checkpoint_code
from torchtune_longshort.training.cpu_allocator import keep_freed_blocks_on

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# lm-eval forwards these to every model; they carry no meaning here.
_IGNORED = ("pretrained_model_name_or_path",)
LENGTH_FIELD = "max_length in --model_args"  # what a refusal of the length names
# How this model's arguments are named in the checkpoint path's messages (models.checkpoint_open).
NAMES = ArgNames(checkpoint="pretrained", length="max_length", allow="allow_extrapolation=true",
                 tokenizer="tokenizer",
                 scale="rope=<method>,rope_factor=<f> to scale RoPE",
                 refused="requests longer than {usable} tokens will be refused (NaN / empty output)")
ACCEPTED = ("pretrained (or checkpoint_dir), tokenizer, rope, rope_<param>, max_length, allow_extrapolation, "
            "batch_size, max_batch_size, dtype, device, truncation, max_gen_toks, add_bos_token, "
            "cpu_keep_freed_blocks, trust_remote_code")


def parse_bool(name: str, value: Any) -> bool:
    """``value`` as a boolean (``true``/``false``/``1``/``0``/``yes``/``no``); ``ValueError`` naming ``name``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "0", "no"):
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{name}={value!r} is not a boolean; accepted: true/false")


def positive_int(name: str, value: Any) -> int:
    """``value`` as a positive integer; ``ValueError`` naming ``name``."""
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not an integer") from None
    if out != float(value) or out < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return out


@dataclass
class ModelArgs:
    """The resolved model arguments: what to load and the limits requests are held to."""

    checkpoint_dir: Path
    folder: CheckpointFolder  # opened once; passed to the loader
    tokenizer: SourceTokenizer
    hf_config: Dict[str, Any]
    rope_spec: Optional[Dict[str, Any]]  # the rope=... override; None: the checkpoint's own scaling
    usable_length: int  # positions the checkpoint's RoPE (with its scaling) covers
    max_length: int
    allow_extrapolation: bool
    batch_size: int  # the fixed size; with auto, max_batch_size
    batch_auto: Optional[int]  # auto:N's N (auto: 1); None for a fixed size
    dtype: torch.dtype
    device: torch.device
    truncation: str
    max_gen_toks: int
    add_bos_token: Optional[bool]  # None: the tokenizer's own default
    cpu_keep_freed_blocks: bool = True
    trust_remote_code: bool = False  # import the code a checkpoint's config.json names outside the package
    # max_length against the positions covered; its message is logged once, where the model is built
    verdict: Optional[LengthVerdict] = None
    # a rope= override that scales nothing (factor 1); logged once, where the model is built
    rope_note: Optional[str] = None
    # what a rope= override replaces in a checkpoint with a scaling of its own; logged once, where the model is built
    override_note: Optional[str] = None

    @property
    def batch_size_text(self) -> str:
        """``batch_size`` as given: the integer, ``auto`` or ``auto:N``."""
        if self.batch_auto is None:
            return str(self.batch_size)
        return "auto" if self.batch_auto == 1 else f"auto:{self.batch_auto}"

    @property
    def run_limit(self) -> int:
        """The longest sequence the model is run on: ``max_length``, capped at the covered positions unless
        extrapolation is allowed."""
        return self.max_length if self.allow_extrapolation else min(self.max_length, self.usable_length)


def batch_sizes(batch_size: Any, max_batch_size: Any) -> Tuple[int, Optional[int]]:
    """``(size, N)``: a fixed ``batch_size`` and None, or for ``auto`` / ``auto:N`` ``(max_batch_size, N)``;
    ``ValueError`` in one line for anything else (``auto:0``, ``auto:x``, ``max_batch_size=0``)."""
    most = positive_int("max_batch_size", DEFAULT_MAX_BATCH_SIZE if max_batch_size is None else max_batch_size)
    text = str(batch_size).strip().lower()
    if not text.startswith("auto"):
        try:
            return positive_int("batch_size", batch_size), None
        except ValueError as err:
            raise ValueError(f"{err}; or auto, auto:N (N a positive integer)") from None
    every = text[len("auto"):]
    if every == "":
        return most, 1
    if every.startswith(":") and every[1:].isdigit() and int(every[1:]) > 0:
        return most, int(every[1:])
    raise ValueError(f"batch_size={batch_size!r} is not accepted: auto, auto:N with N a positive integer (auto:4: "
                     "back to max_batch_size at 4 points of each request list), or an integer")


def model_dtype(dtype: Any) -> Optional[torch.dtype]:
    """``dtype`` as a torch dtype, None for ``auto``; ``ValueError`` in one line for one this model does not run.
    Takes what lm-eval's ``hf`` takes: a name torch knows (``bfloat16``, ``half``, ``torch.float32``) or a
    ``torch.dtype``."""
    if isinstance(dtype, torch.dtype):
        found = dtype
    else:
        name = str(dtype).strip()
        if name == "auto":
            return None
        found = getattr(torch, name[len("torch."):] if name.startswith("torch.") else name, None)
    if found not in DTYPES.values():
        raise ValueError(f"dtype={dtype!r} is not supported; accepted: {', '.join(DTYPES)} (or their torch names, "
                         "half, torch.bfloat16), or auto (the checkpoint's config.json dtype)")
    return found


def config_dtype(config: Dict[str, Any]) -> torch.dtype:
    """The dtype a checkpoint's ``config.json`` names (``dtype``, or transformers' older ``torch_dtype``), as
    ``dtype=auto`` loads it; float32 when it names none this model runs."""
    named = config.get("dtype") or config.get("torch_dtype")
    found = getattr(torch, str(named).replace("torch.", ""), None) if named else None
    return found if found in DTYPES.values() else torch.float32


def _checkpoint_dir(pretrained: Optional[str], checkpoint_dir: Optional[str]) -> Path:
    if pretrained is not None and checkpoint_dir is not None and str(pretrained) != str(checkpoint_dir):
        raise ValueError(f"longshort model: pretrained={pretrained!r} and checkpoint_dir={checkpoint_dir!r} name "
                         "different checkpoints; give one of them (checkpoint_dir is pretrained's older name)")
    chosen = pretrained if pretrained is not None else checkpoint_dir
    if chosen is None:
        raise ValueError("longshort model: model_args needs pretrained=<folder with config.json + weights>")
    if not str(chosen).strip():  # Path("") is ".": an unset $CKPT was told "pretrained='.' has no config.json"
        raise ValueError(f"longshort model: pretrained (or checkpoint_dir)={chosen!r} is empty: give "
                         "pretrained=<folder with config.json + weights> (an unset shell variable gives an empty one)")
    return Path(str(chosen))


def _rope_spec(rope: Optional[str], extra: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """``rope=<method>`` and its ``rope_<key>=<value>`` parameters as a spec (the one parser,
    :func:`~torchtune_longshort.models.rope_override.override_spec`); the rest of ``extra`` is refused."""
    rope_kwargs = {k[len("rope_") :]: v for k, v in extra.items() if k.startswith("rope_")}
    unknown = sorted(k for k in extra if not k.startswith("rope_") and k not in _IGNORED)
    if unknown:
        names = [n.split(" ")[0] for n in ACCEPTED.split(", ")]  # "pretrained (or checkpoint_dir)": pretrained
        near = difflib.get_close_matches(unknown[0], names + ["checkpoint_dir"], n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"longshort model: unknown model_args {unknown}{hint}; accepted: {ACCEPTED}")
    return override_spec(rope, rope_kwargs, "longshort model")


def _device(device: Optional[str]) -> torch.device:
    """``device`` as given (``None``: CUDA when available, else CPU); a device this machine does not have is refused
    (:func:`torchtune_longshort.devices.require_device`), never replaced by another."""
    return process_device(require_device(default_device() if device is None else str(device), "device"))


def parse_model_args(
    pretrained: Optional[str] = None,
    checkpoint_dir: Optional[str] = None,
    tokenizer: Optional[str] = None,
    rope: Optional[str] = None,
    max_length: Optional[int] = None,
    allow_extrapolation: Union[bool, str] = False,
    batch_size: Union[int, str] = 1,
    max_batch_size: Union[int, str, None] = None,
    dtype: str = "float32",
    device: Optional[str] = None,
    truncation: str = "none",
    max_gen_toks: int = 256,
    add_bos_token: Union[bool, str, None] = None,
    cpu_keep_freed_blocks: Union[bool, str] = True,
    trust_remote_code: Union[bool, str] = False,
    **extra: Any,
) -> ModelArgs:
    """Check every argument (see the module docstring) before any weight is read; ``ValueError`` /
    ``FileNotFoundError`` name the argument, its value and what is accepted. Nothing is logged: a ``max_length``
    past the positions covered is :attr:`ModelArgs.verdict`, said by :func:`load_checkpoint_model` (``longshort-eval``
    parses the arguments twice, before lm-eval starts and when lm-eval builds the model, and said it each time)."""
    dev = _device(device)  # before any file is read: a device this machine lacks is refused first
    rope_spec = _rope_spec(rope, extra)
    length = length_value("max_length", max_length) if max_length is not None else None
    allow = parse_bool("allow_extrapolation", allow_extrapolation)
    size, auto = batch_sizes(batch_size, max_batch_size)
    chosen = model_dtype(dtype)  # before any file is read; auto is resolved from the checkpoint's config
    trusted = parse_bool("trust_remote_code", trust_remote_code)
    with parameters_as_typed(rope_spec), checkpoint_code(trusted):  # the positions it covers check its factor / t_max
        opened = open_checkpoint(_checkpoint_dir(pretrained, checkpoint_dir), names=NAMES, tokenizer=tokenizer,
                                 rope=rope_spec, length=length, allow_extrapolation=allow)
    return ModelArgs(
        checkpoint_dir=opened.folder.path,
        folder=opened.folder,
        tokenizer=opened.tokenizer,
        hf_config=opened.folder.config,
        rope_spec=rope_spec,
        usable_length=opened.usable_length,
        max_length=opened.length,
        allow_extrapolation=allow,
        batch_size=size,
        batch_auto=auto,
        dtype=chosen if chosen is not None else config_dtype(opened.folder.config),
        device=dev,
        truncation=check_truncation(str(truncation)),
        max_gen_toks=positive_int("max_gen_toks", max_gen_toks),
        add_bos_token=None if add_bos_token is None else parse_bool("add_bos_token", add_bos_token),
        cpu_keep_freed_blocks=parse_bool("cpu_keep_freed_blocks", cpu_keep_freed_blocks),
        trust_remote_code=trusted,
        verdict=opened.verdict,
        rope_note=factor_from_length_note(opened.folder, rope_spec, opened.length, "max_length", "longshort model"),
        override_note=opened.override_note,
    )


def check_model_fits(args: ModelArgs) -> None:
    """Refuse, before anything is allocated, the model :func:`load_checkpoint_model` would refuse for its length: its
    weights and RoPE tables at :attr:`ModelArgs.run_limit` past what ``args.device`` holds (``longshort-eval``'s
    check before lm-eval starts)."""
    try:
        check_checkpoint_fits(args.folder, rope=args.rope_spec, max_seq_len=args.run_limit, device=str(args.device),
                              length_field=LENGTH_FIELD)
    except TypeError as e:  # a parameter the method needs and no default gives (LongRoPE's factor lists)
        raise ValueError(f"longshort model: {e}: give it as rope_<name>= in --model_args (a list cannot be given "
                         "there: evaluate a checkpoint whose config.json holds it, without rope=)") from None
    except ValueError as e:
        raise_as_typed(e, args.rope_spec)


def load_checkpoint_model(args: ModelArgs) -> torch.nn.Module:
    """The checkpoint as a torchtune decoder in eval mode, frozen, RoPE sized for the longest sequence it runs
    (:attr:`ModelArgs.run_limit`: ``max_length``, or the covered positions when that is shorter and extrapolation is
    not allowed: a longer request is refused, so positions past them are never built).

    ``args.rope_spec`` is ``None`` (take the scaling from ``config.json``) or a spec such as
    ``{"method": "linear", "factor": 4.0}``; both go through ``torchtune_longshort.models.load_hf_checkpoint``.
    """
    if args.verdict is not None and args.verdict.message:  # past the positions covered: what happens to such requests
        (logger.warning if args.verdict.extrapolated else logger.error)(args.verdict.message)
    for note in (args.override_note, args.rope_note):
        if note:
            logger.warning(note)
    if keep_freed_blocks_on(args.device, args.cpu_keep_freed_blocks):
        logger.info("CPU: glibc keeps large freed blocks for reuse (cpu_keep_freed_blocks=false to turn it off)")
    model = load_hf_checkpoint(
        args.folder, rope=args.rope_spec, max_seq_len=args.run_limit, dtype=args.dtype, device=str(args.device),
        length_field=LENGTH_FIELD,
    )
    model = model.to(device=args.device, dtype=args.dtype).eval()
    model.requires_grad_(False)
    return model
