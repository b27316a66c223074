"""Train a SentencePiece tokenizer on local text in seconds (Llama-2 layout: BPE, byte fallback).

The result loads identically in three places, which the tests check: ``sentencepiece`` itself,
torchtune's ``llama2_tokenizer`` and transformers' ``AutoTokenizer`` (the folder gets ``tokenizer.json`` and
``tokenizer_config.json`` beside ``tokenizer.model``). Normalization is the identity and whitespace is kept
verbatim, because the default NFKC normalization collapses spaces and drops newlines in sentencepiece but not
in the converted fast tokenizer, which gives different ids for source code.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Iterable, Iterator, Optional, Union

from torchtune_longshort.config.values import check_creatable
from torchtune_longshort.models.hf_tokenizer import write_hf_tokenizer_files

SENTENCEPIECE_FILE = "tokenizer.model"
MIN_VOCAB = 300  # the smallest vocabulary train_sentencepiece trains: 256 byte pieces, specials and merges


class VocabBelowCharacters(ValueError):
    """sentencepiece refused ``vocab_size`` as smaller than the pieces the training text needs: one per distinct
    character it keeps (``▁`` among them), plus the byte and special pieces. ``needed`` is sentencepiece's own
    number, read from its message ("Vocabulary size is smaller than required_chars. 300 vs 347"). ``field`` and
    ``also`` name the config keys to raise (:meth:`worded`); the config check names the model node's own key."""

    def __init__(self, vocab_size: int, needed: int, field: str = "vocab_size", also: str = ""):
        self.vocab_size, self.needed, self.field = vocab_size, needed, field
        super().__init__(self.worded(field, also))

    def worded(self, field: str, also: str = "") -> str:
        return (f"{field}={self.vocab_size} is smaller than the {self.needed} pieces sentencepiece needs for the text "
                "it trains on (one per distinct character it keeps, plus 256 byte pieces and unk/bos/eos): raise "
                f"{field}{f' (and {also})' if also else ''} to at least {self.needed}")


_BELOW_CHARS = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def sentencepiece_file(path: Union[str, Path]) -> Path:
    """The SentencePiece model a tokenizer path names: the path itself when it is a file, else
    ``<path>/tokenizer.model`` (a tokenizer folder, as :func:`train_sentencepiece` writes; it may not exist yet)."""
    p = Path(path).expanduser()
    return p if p.is_file() else p / SENTENCEPIECE_FILE


def check_training_folder(path: Union[str, Path], field: str = "path") -> None:
    """A tokenizer folder to train into must be new, empty, or hold its ``tokenizer.model`` already (then nothing is
    trained): a folder with other files is refused (FileExistsError naming ``field``), so training never lands in, or
    replaces, a folder of the user's."""
    p = Path(path).expanduser()
    if p.is_dir() and not (p / SENTENCEPIECE_FILE).is_file() and any(p.iterdir()):
        raise FileExistsError(f"{field}={str(path)!r} is a folder that holds files and no {SENTENCEPIECE_FILE}: a "
                              "tokenizer is trained into a new or empty folder; name one (or an existing .model file)")


def check_new_tokenizer_path(p: Path, field: str = "path") -> None:
    """A tokenizer folder a component trains when it is absent (config key ``field``): it must be creatable
    (:func:`~torchtune_longshort.config.values.check_creatable`), and never a folder of the user's."""
    check_training_folder(p, field)
    if p.exists():
        return
    if p.suffix == ".model":
        raise FileNotFoundError(f"{field}={str(p)!r}: no such SentencePiece file (name a tokenizer folder to train one "
                                "there, or an existing .model file)")
    check_creatable(field, str(p))


def train_sentencepiece(
    texts: Iterable[str],
    out_dir: Union[str, Path],
    vocab_size: int = 1000,
    max_sentences: int = 200_000,
) -> Path:
    """Train a Llama-2-style SentencePiece BPE model and write it as a tokenizer folder.

    Args:
        texts: documents; each is split into lines for training.
        out_dir: folder to create; receives ``tokenizer.model`` (+ transformers' files).
        vocab_size: size of the vocabulary (ids 0/1/2 are unk/bos/eos as in Llama-2).
        max_sentences: cap on training lines, to keep training to a few seconds.

    Returns:
        Path of ``tokenizer.model``.

    Raises:
        VocabBelowCharacters: ``vocab_size`` below what sentencepiece needs for the text's characters (nothing
            written).
    """
    import sentencepiece as spm

    if vocab_size < MIN_VOCAB:
        raise ValueError(f"vocab_size={vocab_size}: needs >= {MIN_VOCAB} (256 byte pieces + specials + merges)")
    out_dir = Path(out_dir)

    # into memory, not a model_prefix: sentencepiece records the prefix in the model's trainer_spec, so a temporary
    # folder's name made the same tokenizer's bytes differ from run to run (its pieces did not)
    model = io.BytesIO()
    try:
        _train(spm, _lines(texts, max_sentences), vocab_size, model_writer=model)
    except RuntimeError as e:
        below = _BELOW_CHARS.search(str(e))
        if below is None:
            raise
        raise VocabBelowCharacters(int(below.group(1)), int(below.group(2))) from None
    out_dir.mkdir(parents=True, exist_ok=True)  # once trained: a refused vocab_size leaves no folder
    (out_dir / SENTENCEPIECE_FILE).write_bytes(model.getvalue())
    _write_hf_tokenizer_files(out_dir)
    return out_dir / SENTENCEPIECE_FILE


def pieces_needed(texts: Iterable[str], max_sentences: int = 200_000) -> Optional[int]:
    """The smallest ``vocab_size`` :func:`train_sentencepiece` trains on ``texts``: sentencepiece's own number (its
    kept characters, 256 byte pieces, unk/bos/eos), asked of it with a vocabulary below any text's (the 259 byte and
    special pieces and ``▁``), which it refuses after counting the characters, before training; nothing written.
    None when it refuses ``texts`` otherwise (no line to train on: training says so)."""
    import sentencepiece as spm

    try:
        _train(spm, _lines(texts, max_sentences), 256 + 3 + 1, model_writer=io.BytesIO())
    except RuntimeError as e:
        below = _BELOW_CHARS.search(str(e))
        return int(below.group(2)) if below is not None else None
    return None


def _lines(texts: Iterable[str], max_sentences: int) -> Iterator[str]:
    """The training lines of ``texts``: each document's non-blank lines, ``max_sentences`` at most."""
    n = 0
    for doc in texts:
        for line in doc.splitlines():
            if line.strip():
                yield line
                n += 1
                if n >= max_sentences:
                    return


def _train(spm, sentences, vocab_size: int, **output) -> None:
    """sentencepiece's training of :func:`train_sentencepiece`, into ``output`` (``model_prefix=`` a path, or
    ``model_writer=`` a file object). Ctrl-C (or a stop signal raised as one) while sentencepiece reads the sentences
    is raised as itself: sentencepiece turns an exception of its sentence iterator into ``RuntimeError("INTERNAL:
    KeyboardInterrupt: ...")``, which a recipe stopped while training its tokenizer reported as a refusal of
    ``tokenizer.path`` (exit 2) instead of its stop (exit 130)."""
    stops = []

    def fed() -> Iterator[str]:
        try:
            yield from sentences
        except KeyboardInterrupt as e:
            stops.append(e)
            raise

    try:
        _train_from(spm, fed(), vocab_size, **output)
    except RuntimeError:
        if stops:
            raise stops[0] from None
        raise


def _train_from(spm, sentences: Iterator[str], vocab_size: int, **output) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=sentences,
        **output,
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        split_digits=True,
        minloglevel=2,
    )


def _write_hf_tokenizer_files(out_dir: Path) -> None:
    try:
        import transformers  # optional for the library itself
    except ImportError:
        return
    del transformers  # only asked whether it is there
    write_hf_tokenizer_files(out_dir)
