"""What a GGUF file must hold for :func:`~torchtune_longshort.models.gguf.convert_gguf` to convert it: checks that
refuse, in one line naming the file, what transformers would otherwise convert wrongly or end in a traceback on."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from torchtune_longshort.plural import counted
from torchtune_longshort.started_as import EVAL_MAIN, advised_command

UPGRADE = "pip install -U gguf, or convert another quantization of the model (F16, BF16, Q8_0, the Q*_K ones)"


def hf_folder_hint(path: Path) -> str:
    """For a ``--gguf`` that is no GGUF file: the Hugging Face checkpoint folder it is (or is in), which needs no
    conversion; else the GGUF files of the folder it is."""
    folder = path if path.is_dir() else path.parent
    if (folder / "config.json").is_file():
        return (f": {str(folder)!r} is a Hugging Face checkpoint folder (config.json), which needs no conversion: pass "
                f"it as checkpoint_dir= (the recipe) or pretrained= ({advised_command(EVAL_MAIN)})")
    found = sorted(p.name for p in folder.glob("*.gguf")) if path.is_dir() else []
    return f": name a GGUF file in it ({', '.join(found[:3])})" if found else ""


def check_readable(gguf: Path, shown: str = ""):
    """``ValueError`` naming ``gguf`` (or ``shown``) when the gguf package cannot parse its header and tensor table
    (a truncated or corrupt file: transformers' reader ended in a ``struct.error`` traceback), or when it holds no
    tensors (a vocabulary-only file, as llama.cpp's ``ggml-vocab-*.gguf``: transformers built the random model its
    header describes, 7B parameters for Llama-2's, and ran out of memory)."""
    from gguf import GGUFReader  # deferred: gguf (an optional extra; checked by the caller)

    given, shown = shown, shown or f"--gguf {str(gguf)!r}"
    with open(gguf, "rb") as f:  # another format (a checkpoint's model.safetensors) is no corrupt GGUF to fetch again
        if f.read(4) != b"GGUF":
            raise ValueError(f"{shown} is not a GGUF file (it does not start with the "
                             f"bytes GGUF){'' if given else hf_folder_hint(gguf)}")
    try:
        reader = GGUFReader(str(gguf))
    except Exception as e:  # noqa: BLE001 - the reader raises what numpy and struct raise on bad bytes
        unknown = re.search(r"(\d+)\)? is not a valid GGMLQuantizationType", str(e))
        if unknown:  # read as a corrupt file ("fetch it again"): a whole file of a newer llama.cpp's is not
            raise ValueError(f"{shown} holds a tensor of type {unknown.group(1)}, which the gguf package "
                             f"({_version()}) does not know (a newer llama.cpp's quantization): {UPGRADE}") from None
        raise ValueError(f"{shown} is not a readable GGUF file ({type(e).__name__}: "
                         f"{' '.join(str(e).split())[:160]}): it is truncated or corrupt; fetch it again") from None
    if not reader.tensors:
        raise ValueError(f"{shown} holds no tensors (a vocabulary-only GGUF): convert the model's GGUF, the one with "
                         "its weights")
    _check_types(reader.tensors, shown)
    return reader  # parsed once per conversion (SmolLM2's header: 1.5 s here, its vocabulary's fields)


def converted_bytes(reader, dtype: str) -> int:
    """The bytes of the weights a conversion writes in ``dtype`` from the GGUF ``reader`` (:func:`check_readable`'s)
    reads: every tensor's elements, dequantized (a Q4 file's folder in float32 is about 8 times the file)."""
    import torch

    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    return size * sum(int(t.n_elements) for t in reader.tensors)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"gguf {version('gguf')}"
    except PackageNotFoundError:
        return "gguf"


def _check_types(tensors, shown: str) -> None:
    """``ValueError`` naming a tensor of a type the gguf package cannot dequantize (Q1_0, F64, I8 ... in gguf 0.19),
    which transformers asks it to: the conversion ended in its ``NotImplementedError`` traceback (exit 1). One
    zero block of each type is dequantized here, before the model is built."""
    import numpy as np
    from gguf import quants

    first = {}
    for t in tensors:
        first.setdefault(t.tensor_type, t.name)
    for qtype, name in first.items():
        try:
            quants.dequantize(np.zeros((1, quants.GGML_QUANT_SIZES[qtype][1]), np.uint8), qtype)
        except NotImplementedError:
            raise ValueError(f"{shown} holds {name} in {qtype.name}, which the gguf package ({_version()}) cannot "
                             f"dequantize: {UPGRADE}") from None


def check_complete(gguf: Path, model: str, loaded: dict) -> None:
    """``ValueError`` naming ``gguf`` when transformers left weights of ``model`` out of it (``loaded``: its
    ``output_loading_info``): a weight the file lacks, or one of another shape, was started random and saved
    without a word (exit 0; a 'MISSING' note among transformers' output)."""
    mismatched = [k[0] if isinstance(k, tuple) else k for k in loaded.get("mismatched_keys") or []]
    bad = [*(loaded.get("missing_keys") or []), *mismatched]
    if bad:
        raise ValueError(f"--gguf {str(gguf)!r} lacks {counted(len(bad), 'weight')} of its {model} (or holds them in "
                         f"another shape): {', '.join(sorted(bad)[:4])}{' ...' if len(bad) > 4 else ''}; transformers "
                         "would start them random: the file is incomplete, or of a layout transformers does not map")


class _HeldReport(logging.Filter):
    """Holds back transformers' load report (its ``LOAD REPORT`` warning) until :func:`load_complete` lets it out."""

    def __init__(self):
        super().__init__()
        self.records = []

    def filter(self, record: logging.LogRecord) -> bool:
        if "LOAD REPORT" not in record.getMessage():
            return True
        self.records.append(record)
        return False


def load_complete(gguf: Path, dtype: str):
    """transformers' model of ``gguf`` in ``dtype``, dequantized; :func:`check_complete`'s or
    :func:`unsupported_architecture`'s ``ValueError`` when it refuses the file. transformers' load report (the
    weights it started random: 'MISSING ... Consider training on your downstream task') is held back while the file
    is checked: printed before the one-line refusal it contradicted; shown as before when the file is not refused."""
    import torch
    from transformers import AutoModelForCausalLM

    log, held, refused = logging.getLogger("transformers.modeling_utils"), _HeldReport(), False
    log.addFilter(held)
    try:
        try:
            model, loaded = AutoModelForCausalLM.from_pretrained(  # a weight of another shape: check_complete refuses
                str(gguf.parent), gguf_file=gguf.name, dtype=getattr(torch, dtype), output_loading_info=True,
                ignore_mismatched_sizes=True)
        except ValueError as e:
            raise unsupported_architecture(gguf, e) from None
        refused = True
        check_complete(gguf, type(model).__name__, loaded)
        refused = False
    finally:
        log.removeFilter(held)
        for record in held.records if not refused else ():
            log.handle(record)
    return model


# GGUF architectures whose transformers conversion is a family this project trains (models.families): Mistral's
# GGUFs say llama (llama.cpp converts them so); transformers reads no GGUF of Gemma (1), only Gemma-2/3/4
TRAINED = "llama (Llama-2/3, SmolLM2, TinyLlama, Mistral), mistral, qwen2, phi3"


def unsupported_architecture(gguf: Path, error: ValueError) -> ValueError:
    """The refusal for transformers' ``GGUF model with architecture bert is not supported yet.`` (``error``; any
    other ValueError comes back as it is): it named neither the file nor what converts."""
    found = re.match(r"GGUF model with architecture (\S+) is not supported yet", str(error))
    if not found:
        return error
    return ValueError(f"--gguf {str(gguf)!r} is a {found.group(1)} model (its general.architecture), which "
                      "transformers does not convert from GGUF: convert a GGUF of an architecture this project "
                      f"trains: {TRAINED}")
