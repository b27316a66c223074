"""The content digest of a checkpoint folder: an identity of what ``config.json`` and the weight files hold that
survives a copy or a move (no paths, no modification times) and reads a few MiB, not the weights
(:meth:`~torchtune_longshort.models.hf_checkpoint.CheckpointFolder.content_digest` asks it).

The digest (marked ``v2:``) hashes ``config.json`` and, for each weight file, its name, its size, its safetensors
header (every tensor's name, dtype, shape and place) and, for every tensor the header places, its first, middle and
last ``BLOCK`` bytes (a smaller tensor whole). Each tensor is sampled, wherever it lies: two checkpoints that differ
only in some tensors (a LoRA merged into q/k only; a fine-tune with frozen embeddings and norms) differ in those
tensors' blocks. N evenly spaced blocks through a file would not do that: a 5 GB shard sampled 256 times leaves
~20 MB between blocks, more than a whole k_proj of an 8B model (8 MiB) and most of a q_proj (32 MiB). A tensor's
first and last blocks hold the embedding rows of the lowest and highest token ids (tokens added to a vocabulary sit
at its end). A file of another format (``pytorch_model.bin``: no offsets to read) is sampled at
:data:`SPREAD_BLOCKS` evenly spaced blocks. A change
confined to rows no block reads is not seen: the digest samples; it does not hash every byte.

The first formula (no mark: a recipe state saved before holds it) hashed each file's first and last MiB only, mostly
the first and last tensors by name; it collided on checkpoints that differ in the middle. It is kept as
:func:`first_content_digest`, so that :func:`digest_matches` compares a digest saved by it with the same formula.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import BinaryIO, List, Optional, Sequence, Tuple

DIGEST_MARK = "v2:"  # of content_digest; a saved digest without it is first_content_digest's
BLOCK = 1 << 12  # bytes read at each of a tensor's three places
SPREAD_BLOCKS = 256  # evenly spaced blocks of a weight file without tensor offsets


def content_digest(config: Path, weight_files: Sequence[Path], block: int = BLOCK) -> str:
    """``"v2:"`` + 16 hex digits of sha256 over ``config`` (the folder's ``config.json``) and each of
    ``weight_files``' name, size and sampled bytes (:func:`sampled_ranges`, the module docstring says why)."""
    h = hashlib.sha256(config.read_bytes())
    for f in weight_files:
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with open(f, "rb") as fh:
            for start, end in sampled_ranges(fh, f, size, block):
                fh.seek(start)
                h.update(fh.read(end - start))
    return DIGEST_MARK + h.hexdigest()[:16]


def first_content_digest(config: Path, weight_files: Sequence[Path], sample: int = 1 << 20) -> str:
    """The first formula, unmarked (recipe states saved before ``v2:`` hold it): sha256 over ``config`` and each
    weight file's name, size and first and last ``sample`` bytes. Compare old digests with it; record none."""
    h = hashlib.sha256(config.read_bytes())
    for f in weight_files:
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(sample))
            fh.seek(max(0, size - sample))
            h.update(fh.read(sample))
    return h.hexdigest()[:16]


def digest_matches(saved: Optional[str], config: Path, weight_files: Sequence[Path],
                   digest: Optional[str] = None) -> bool:
    """Whether ``saved`` (a digest recorded earlier; None: none was) is the one of the folder's content now, by the
    formula that made it: :func:`content_digest` for a ``v2:`` one (``digest``: its value where the caller has it),
    :func:`first_content_digest` for an unmarked one, so that a run saved before the mark resumes as before."""
    if saved is None:
        return False
    if saved.startswith(DIGEST_MARK):
        return saved == (digest or content_digest(config, weight_files))
    return saved == first_content_digest(config, weight_files)


def sampled_ranges(fh: BinaryIO, path: Path, size: int, block: int = BLOCK) -> List[Tuple[int, int]]:
    """The ``(start, end)`` byte ranges of the open weight file ``fh`` (``path``, ``size`` bytes) the digest reads:
    a safetensors file's header and each tensor's first, middle and last ``block`` bytes (a tensor of at most three
    blocks whole), in file order; another file's :data:`SPREAD_BLOCKS` evenly spaced blocks."""
    if path.suffix != ".safetensors":
        if size <= SPREAD_BLOCKS * block:
            return [(0, size)]
        starts = (i * (size - block) // (SPREAD_BLOCKS - 1) for i in range(SPREAD_BLOCKS))
        return [(s, s + block) for s in starts]
    try:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
        places = sorted(tuple(t["data_offsets"]) for k, t in header.items() if k != "__metadata__")
    except (struct.error, ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"cannot read weight file {path}: its safetensors header is unreadable ({e}): copy or "
                         "convert the checkpoint again") from None
    out = [(0, 8 + n)]
    for b, e in places:
        b, e = 8 + n + int(b), 8 + n + int(e)
        if e - b <= 3 * block:
            out.append((b, e))
        else:
            mid = (b + e - block) // 2
            out += [(b, b + block), (mid, mid + block), (e - block, e)]
    return out
