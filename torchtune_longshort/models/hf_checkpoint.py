"""The Hugging Face checkpoint folder: the one module that opens and checks it (writing:
:mod:`~torchtune_longshort.models.hf_checkpoint_writer`).

A folder this project writes (the recipe's ``step_<k>``, ``step_0``, :func:`save_hf_checkpoint`)::

    config.json                          transformers config + RoPE entries (``hf_rope.hf_config_updates``)
                                         + ``"longshort_checkpoint_format": 1``
    model-00001-of-0000N.safetensors     weights in HF key names and HF layout, sharded
    model.safetensors.index.json         weight_map: every key -> its shard
    longshort_rope/rope_params.safetensors   learnable RoPE parameters (CLEX's ODE), only for such methods
    the source model's tokenizer files   unchanged (``tokenizer_formats.TOKENIZER_FILES``), so ``AutoTokenizer``
                                         and ``lm-eval --model hf --model_args pretrained=DIR`` work with nothing else

:class:`CheckpointFolder` is a folder opened once: ``config.json`` parsed, its model family found
(:mod:`~torchtune_longshort.models.families`), its RoPE spec read, its weight files and tokenizer located, every
check run (``config.json``'s values: :mod:`~torchtune_longshort.models.hf_config_checks`). Everything that reads a
checkpoint (the recipe, the ``longshort`` eval model, the misalignment CLI, the study,
:func:`~torchtune_longshort.models.hf_model.load_hf_checkpoint`) opens it through :meth:`CheckpointFolder.open` and
passes the object on. Opening the same unchanged folder again in one process returns the same object.

Foreign folders (a base model from the hub, transformers' ``save_pretrained``) load too: they need no tokenizer
unless the caller needs one, and a single ``model.safetensors`` needs no index.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from torchtune_longshort.devices import is_out_of_memory
from torchtune_longshort.models.checkpoint_digest import content_digest, digest_matches
from torchtune_longshort.models.families import ModelFamily, family_of
from torchtune_longshort.models.hf_config_checks import (check_max_position_embeddings, check_model_type,
                                                         check_prebuild, check_rope_base)
from torchtune_longshort.models.peft_adapter import adapter_folder_hint
from torchtune_longshort.models.hf_rope import (
    ROPE_SIDE_FILE,
    check_hf_config_consistent,
    rope_spec_from_hf_config,
    usable_length_of,
)
from torchtune_longshort.models.source_tokenizers import SourceTokenizer
from torchtune_longshort.models.tokenizer_files import TokenizerError
from torchtune_longshort.models.tokenizer_formats import TOKENIZER_FILES, TOKENIZER_FORMATS, find_tokenizer
from torchtune_longshort.rope import has_learned_parameters

PathLike = Union[str, Path]

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
FORMAT_KEY = "longshort_checkpoint_format"
FORMAT_VERSION = 1
GGUF_HINT = ("convert it first: python -m torchtune_longshort.models.gguf --gguf <file.gguf> --out <folder> "
             "(transformers dequantizes it; needs the gguf package)")


def read_hf_config(checkpoint_dir: PathLike, field: str = "checkpoint_dir") -> Dict[str, Any]:
    """Read ``config.json`` of a Hugging Face checkpoint folder; a GGUF file or a folder without ``config.json`` is
    refused with what is expected and how to convert, naming ``field`` (the caller's argument)."""
    d = Path(checkpoint_dir)
    expected = "expected a Hugging Face checkpoint folder (config.json + *.safetensors)"
    if d.is_file():
        hint = GGUF_HINT if d.suffix == ".gguf" else "pass the folder that holds config.json"
        raise FileNotFoundError(f"{field}={str(checkpoint_dir)!r} is a file: {expected}; {hint}")
    if not d.is_dir():  # where a relative one was looked for, as longshort-eval's --model hf says it
        state = "is not a directory" if d.exists() else "does not exist" if d.expanduser().is_absolute() else \
            f"does not exist in {str(Path.cwd())!r}, the folder this command runs in"
        raise FileNotFoundError(f"{field}={str(checkpoint_dir)!r} {state}: {expected}")
    path = d / CONFIG_FILE
    if path.is_dir():  # said "has no config.json"
        raise IsADirectoryError(f"{field}={str(checkpoint_dir)!r}: {str(path)!r} is a folder, not a file: {expected}; "
                                "put the model's config.json file there")
    if not path.is_file():
        ggufs = sorted(d.glob("*.gguf"))
        newest = (d / "latest").read_text().strip() if (d / "latest").is_file() else ""  # a recipe run's folder
        adapter = adapter_folder_hint(d)
        hint = (f" It holds {ggufs[0].name}, a GGUF file: {GGUF_HINT}" if ggufs else
                f" It is a training run's folder: its newest checkpoint is {str(d / newest)!r} (each step_<k> is one)"
                if newest and (d / newest / CONFIG_FILE).is_file() else f" {adapter[0].upper()}{adapter[1:]}"
                if adapter else "")
        raise FileNotFoundError(f"{field}={str(checkpoint_dir)!r} has no config.json: {expected}.{hint}")
    try:
        return check_model_type(json.loads(path.read_text()), path)  # a JSON object, model_type a string
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e}): copy or convert the checkpoint again") from None


def located_weight_files(d: Path) -> List[Path]:
    """The weight files transformers reads from the folder ``d``, each header read (:func:`readable_weights`)."""
    index = d / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise ValueError(f"{index}: not a safetensors index (expected JSON with a 'weight_map'): {e}") from None
        names = sorted(set(weight_map.values()))
        missing = [n for n in names if not (d / n).exists()]  # a folder: named as one by readable_weights
        if missing:
            raise FileNotFoundError(f"checkpoint {str(d)!r}: {index.name} names shard(s) {missing} that are missing")
        return readable_weights([d / n for n in names])
    sharded = sorted(d.glob("model-*-of-*.safetensors"))
    if sharded:
        raise FileNotFoundError(
            f"checkpoint {str(d)!r} holds sharded weights ({sharded[0].name}, ...) but no {INDEX_FILE}"
        )
    files = sorted(d.glob("*.safetensors")) or sorted(d.glob("pytorch_model*.bin"))
    if not files:
        raise FileNotFoundError(f"checkpoint {str(d)!r} holds no *.safetensors or pytorch_model*.bin weight files")
    # no index: transformers reads model.safetensors (else pytorch_model.bin) and nothing beside it; loading every
    # file let another one (an older copy, an adapter) overwrite the weights that hf evaluates
    own = [f for f in files if f.name in ("model.safetensors", "pytorch_model.bin")]
    if own:
        return readable_weights(own[:1])
    if len(files) > 1:
        raise ValueError(f"checkpoint {str(d)!r} holds {len(files)} weight files ({', '.join(f.name for f in files)}) "
                         f"and no {INDEX_FILE} saying which key lives where: keep the model's own file (as "
                         "model.safetensors) and move the others out")
    return readable_weights(files)


def _fingerprint(d: Path, weight_files) -> str:
    h = hashlib.sha256((d / CONFIG_FILE).read_bytes())
    for f in weight_files:
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def folder_fingerprint(path: PathLike) -> Optional[str]:
    """:meth:`CheckpointFolder.fingerprint` of any Hugging Face folder (one of a family outside the table too, as
    lm-eval's ``hf`` model runs it): the same value for the same folder content; None when ``path`` is no folder
    with a ``config.json`` and weight files this module can locate."""
    d = Path(path).expanduser().resolve()
    if not (d / CONFIG_FILE).is_file():
        return None
    try:
        return _fingerprint(d, located_weight_files(d))
    except (OSError, ValueError):
        return None


def readable_weights(files: List[Path]) -> List[Path]:
    """``files``, each safetensors header read (a torn or foreign file is refused when the folder is opened, naming
    it: before, only the weights' load said so, after lm-eval had started or the recipe had begun its setup)."""
    from safetensors import safe_open

    for f in files:
        if f.is_dir():  # safetensors said "OSError: No such device (os error 19)"
            raise IsADirectoryError(f"weight file {str(f)!r} is a folder, not a file: copy or convert the checkpoint "
                                    "again")
        if f.suffix != ".safetensors":
            continue
        try:
            with safe_open(str(f), framework="pt"):
                pass
        except Exception as e:  # safetensors raises its own error types; name the file whatever they are
            raise ValueError(f"cannot read weight file {f}: {type(e).__name__}: {e} (a file cut short or not "
                             "safetensors: copy or convert the checkpoint again)") from None
    return files


def _stat_key(d: Path) -> Tuple:
    """What changes when a folder is rewritten: config.json's and every weight file's size and mtime."""
    out = []
    for p in [d / CONFIG_FILE, *sorted(d.glob("*.safetensors")), *sorted(d.glob("*.bin")), d / ROPE_SIDE_FILE,
              *(d / f for f in TOKENIZER_FILES)]:
        if p.is_file():
            st = p.stat()
            out.append((p.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


_OPENED: Dict[Tuple[str, bool], Tuple[Tuple, "CheckpointFolder"]] = {}


@dataclass(frozen=True)
class CheckpointFolder:
    """A checkpoint folder, opened and checked once (see the module docstring).

    Attributes: ``path``; ``config`` (parsed ``config.json``); ``family``; ``rope_spec`` (None: plain RoPE);
    ``weight_files``; ``tokenizer_format`` / ``tokenizer_file`` (None when the folder holds none);
    ``written_here`` (the project wrote it: ``longshort_checkpoint_format``).
    """

    path: Path
    config: Dict[str, Any] = field(repr=False)
    family: ModelFamily = field(repr=False)
    rope_spec: Optional[Dict[str, Any]]
    weight_files: Tuple[Path, ...] = field(repr=False)
    tokenizer_format: Optional[str]
    tokenizer_file: Optional[Path]
    written_here: bool

    @classmethod
    def open(cls, path: Union[PathLike, "CheckpointFolder"], *, need_tokenizer: bool = False,
             field: str = "checkpoint_dir") -> "CheckpointFolder":
        """Open and check ``path`` (an already open folder is returned as it is). Refuses, naming the path and what
        is wrong: no/invalid ``config.json`` (a GGUF file: how to convert), a family not in the table (listing the
        supported ones), RoPE entries that disagree with the ``longshort_rope`` spec, a missing shard or index, a
        RoPE side file that does not fit the method, no tokenizer where one is needed (a folder this project
        wrote always has one)."""
        if isinstance(path, CheckpointFolder):
            if need_tokenizer and path.tokenizer_file is None:
                raise FileNotFoundError(f"checkpoint {str(path.path)!r} has no tokenizer: this caller needs one")
            return path
        d = Path(path).expanduser().resolve()
        key = (str(d), need_tokenizer)
        stamp = _stat_key(d) if d.is_dir() else ()
        hit = _OPENED.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        folder = cls._open(d, Path(path), need_tokenizer, field)
        _OPENED[key] = (stamp, folder)
        return folder

    @classmethod
    def _open(cls, d: Path, given: Path, need_tokenizer: bool, field: str) -> "CheckpointFolder":
        config = read_hf_config(given, field)
        check_prebuild(config, d / CONFIG_FILE)
        family = family_of(config, where=str(d / CONFIG_FILE))
        check_hf_config_consistent(config, where=str(d / CONFIG_FILE), hf_rope_types=family.hf_rope_types)
        check_rope_base(config, d / CONFIG_FILE)
        check_max_position_embeddings(config, d / CONFIG_FILE)
        files = located_weight_files(d)
        spec = rope_spec_from_hf_config(config, where=str(d / CONFIG_FILE))
        check_rope_side_file(d, (spec or {}).get("method"), f"checkpoint {str(d)!r}")
        written_here = bool(config.get(FORMAT_KEY))
        try:
            tok_format, tok_file = find_tokenizer(d, family.tokenizer_formats)
        except TokenizerError as e:
            if written_here or need_tokenizer:
                why = "was written by torchtune_longshort, which always saves" if written_here else "needs"
                raise FileNotFoundError(f"checkpoint {str(d)!r} has no tokenizer ({e}): this folder {why} one") \
                    from None
            tok_format, tok_file = None, None
        return cls(d, config, family, spec, tuple(files), tok_format, tok_file, written_here)

    # ------------------------------------------------------------------ derived facts
    @property
    def usable_length(self) -> int:
        """Positions the folder's RoPE (with its scaling) covers."""
        return usable_length_of(self.config, self.rope_spec)

    @property
    def vocab_size(self) -> int:
        return int(self.config["vocab_size"])

    def fingerprint(self) -> str:
        """A cheap identity of the folder's current content: sha256 over ``config.json``'s bytes and each weight
        file's name, size and modification time (no weights are read). The same folder rewritten by another
        training run gets another fingerprint, so results of two checkpoints are never taken for one run."""
        return _fingerprint(self.path, self.weight_files)

    def content_digest(self) -> str:
        """An identity of the folder's content that survives a copy (no modification times), marked ``v2:``: sha256
        over ``config.json`` and each weight file's name, size, header and a few blocks of every tensor, a few MiB
        for an 8B checkpoint (:func:`~torchtune_longshort.models.checkpoint_digest.content_digest` says which)."""
        return content_digest(self.path / CONFIG_FILE, self.weight_files)

    def holds_digest(self, saved: Optional[str], digest: Optional[str] = None) -> bool:
        """Whether ``saved`` (a :meth:`content_digest` recorded earlier, or an unmarked one of the formula before
        ``v2:``; None: none) is this folder's content's (``digest``: its :meth:`content_digest` where known)."""
        return digest_matches(saved, self.path / CONFIG_FILE, self.weight_files, digest)

    # ------------------------------------------------------------------ reading
    def hf_state_dict(self) -> Dict[str, torch.Tensor]:
        """Every weight file merged (HF key names and layout)."""
        from safetensors.torch import load_file

        sd: Dict[str, torch.Tensor] = {}
        for f in self.weight_files:
            try:
                if f.suffix == ".safetensors":
                    sd.update(load_file(str(f)))
                else:
                    sd.update(torch.load(str(f), map_location="cpu", weights_only=True))
            except Exception as e:  # safetensors raises its own error types; name the file whatever they are
                raise ValueError(f"cannot read weight file {f}: {type(e).__name__}: {e}") from None
        return sd

    def tune_state_dict(self) -> Dict[str, torch.Tensor]:
        """The weights in torchtune's names and layout (the family's conversion, torchtune's own function); weights
        that config.json's head counts do not describe are refused naming the folder (torchtune's q/k permutation
        raised a bare ``RuntimeError: shape '[3, 2, 16, 128]' is invalid``)."""
        sd = self.hf_state_dict()
        try:
            return self.family.hf_to_tune(sd, self.config)
        except RuntimeError as e:
            if is_out_of_memory(e):  # the CPU allocator's RuntimeError: memory, not a config.json to put back
                raise
            raise ValueError(self.not_its_weights(str(e))) from None

    def not_its_weights(self, detail: str) -> str:
        """The one line for weights that ``config.json`` does not describe (``detail``: which weight, how)."""
        return f"checkpoint {str(self.path)!r}: its weights do not fit {self.config_fix(detail)}"

    def config_fix(self, detail: str) -> str:
        """``detail`` (which weights, how) framed as a config.json that does not describe them, with its dimension
        keys and the fix: the tail of :meth:`not_its_weights`, and of the recipe's own load refusal."""
        dims = ", ".join(f"{k}={self.config[k]}" for k in _DIMENSION_KEYS if k in self.config)
        return (f"its config.json ({dims}): {' '.join(detail.split())}; config.json was edited or is another "
                "model's: put back the config.json written with these weights")

    def rope_parameters(self) -> Dict[str, torch.Tensor]:
        """The learned RoPE parameters (keyed by their name inside the RoPE module); {} if none."""
        return load_rope_parameters(self.path)

    def load_tokenizer(self) -> SourceTokenizer:
        """The folder's own tokenizer (format detected in the family's order), checked against the model."""
        if self.tokenizer_file is None:
            raise FileNotFoundError(f"checkpoint {str(self.path)!r} has no tokenizer: pass one explicitly")

        return self.check_tokenizer(TOKENIZER_FORMATS[self.tokenizer_format].load(self.tokenizer_file))

    def check_tokenizer(self, tokenizer: Any, where: str = "tokenizer") -> Any:
        """Refuse a tokenizer whose ids reach past the model's embedding table (both numbers named); returns it."""
        n = getattr(tokenizer, "vocab_size", None)
        if n is not None and int(n) > self.vocab_size:
            path = getattr(tokenizer, "path", "")
            raise ValueError(
                f"{where} {str(path)!r} has {n} ids (up to {int(n) - 1}), past the {self.vocab_size} rows of the "
                f"model's embedding table (config.json vocab_size of {str(self.path)!r}): tokenizer and model do "
                "not match"
            )
        return tokenizer


# the config.json entries that give the weights' shapes, named when the weights do not fit them
_DIMENSION_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                   "num_key_value_heads", "head_dim", "tie_word_embeddings")


# ----------------------------------------------------------------------------------------------- functions
def check_rope_side_file(folder: Path, method: Optional[str], where: str, fix: str = "") -> None:
    """Refuse, in one line prefixed with ``where``, a folder whose config.json names a RoPE ``method`` that learns
    parameters without the side file (:data:`ROPE_SIDE_FILE`) that holds them (``fix``: what to do, after a colon),
    or a side file beside a method that has none: the two would load another model."""
    side = folder / ROPE_SIDE_FILE
    if has_learned_parameters(method) and not side.is_file():
        raise FileNotFoundError(f"{where}: config.json names RoPE method {method!r}, whose learned parameters live in "
                                f"{ROPE_SIDE_FILE}, but {side} is missing{': ' + fix if fix else ''}")
    if side.is_file() and not has_learned_parameters(method):
        raise ValueError(f"{where}: {ROPE_SIDE_FILE} holds learned RoPE parameters, but config.json's RoPE scaling is "
                         f"{method or 'plain RoPE'!r}, which has none: config.json and the side file disagree")


def own_tensors(model: Any) -> Dict[str, torch.Tensor]:
    """A module's parameters and buffers by state-dict name, without ``state_dict()``'s hooks (for their shapes):
    QLoRA's hook dequantizes every NF4 weight onto the CPU (a 7B model's whole bf16 copy) and, on the meta device of
    a sharded load, fails ("Cannot copy out of meta tensor")."""
    return {**dict(model.named_buffers(remove_duplicate=False)),
            **dict(model.named_parameters(remove_duplicate=False))}


def shape_mismatch(model_sd: Dict[str, Any], sd: Dict[str, torch.Tensor]) -> Optional[str]:
    """The first weight of ``sd`` whose shape is not the one of the same key in ``model_sd`` (a model's state dict),
    as ``'<key> is [..] in the checkpoint, [..] in the model'``; None when every shared key fits (``load_state_dict``
    raised a multi-line ``RuntimeError`` for it)."""
    for key, t in sd.items():
        want = model_sd.get(key)
        if want is not None and tuple(want.shape) != tuple(t.shape):
            return f"{key} is {list(t.shape)} in the checkpoint, {list(want.shape)} in the model"
    return None


def check_checkpoint_folder(checkpoint_dir: PathLike, *, need_tokenizer: bool = False) -> List[Path]:
    """Open and check a folder (:meth:`CheckpointFolder.open`); return its weight files."""
    return list(CheckpointFolder.open(checkpoint_dir, need_tokenizer=need_tokenizer).weight_files)


def weight_files(checkpoint_dir: PathLike) -> List[str]:
    """File names of the weights of a checkpoint folder (checked), e.g. for torchtune's ``checkpoint_files``."""
    return [p.name for p in check_checkpoint_folder(checkpoint_dir)]


def checkpoint_fingerprint(checkpoint_dir: PathLike) -> str:
    """:meth:`CheckpointFolder.fingerprint` of a folder."""
    return CheckpointFolder.open(checkpoint_dir).fingerprint()


def load_rope_parameters(checkpoint_dir: PathLike) -> Dict[str, torch.Tensor]:
    """The learned RoPE parameters of a checkpoint (keyed by their name inside the RoPE module); {} if none."""
    side = Path(checkpoint_dir) / ROPE_SIDE_FILE
    if not side.is_file():
        return {}
    from safetensors.torch import load_file

    try:
        return load_file(str(side))
    except Exception as e:
        raise ValueError(f"cannot read RoPE side file {side}: {type(e).__name__}: {e} (a file cut short or not "
                         "safetensors: copy the checkpoint again)") from None
