"""Command line: long-short misalignment (paper Eq. 4) of a Hugging Face-format checkpoint on a token corpus.

    longshort-misalignment --checkpoint-dir CKPT --data stdlib --length 256 [--num-samples N] \
        --output misalignment.json

The tokenizer is the checkpoint folder's own, in any format the project reads (SentencePiece ``tokenizer.model``,
Llama-3's tiktoken ``original/tokenizer.model``, ``tokenizer.json``); ``--tokenizer`` names another folder or file.
Documents are encoded as the model's own tokenizer starts a text (BOS only where it adds one) and end with EOS.

``--data`` is ``stdlib`` (the Python standard library's source files; ``stdlib_tests``: only its test packages,
held out from a training corpus read with ``include_tests: False``; ``stdlib_heldout``: held out from one read with
``split: train``, the eval pack's ``ppl_source`` names), a text file, a directory of text files, a
JSONL file (``--text-field``), or a Hugging Face dataset name (``--split``, streamed). Documents are tokenized
(BOS+text+EOS), packed, and cut into ``length``-token sequences (``data.fixed_length.fixed_length_sequences``); each
sequence gets one ``(l1, l2)`` draw from ``[length/2, length]`` (``--min-len`` / ``--max-len``: another range, as
``misalignment_metric``'s ``min_len`` / ``max_len``). ``--num-samples`` defaults to the metric's own
``DEFAULT_NUM_SAMPLES`` (the ``misalignment_<L>`` task's default too).

``--rope <method>,rope_<param>=<value>`` evaluates the checkpoint under another RoPE scaling, exactly as the eval's
``--model_args rope=<method>,rope_<param>=<value>`` (one parser: :mod:`torchtune_longshort.models.rope_override`;
``--rope yarn,rope_factor=2``); without it, the checkpoint's own scaling. Over a checkpoint with a scaling of its own
it says in one line what it replaces.

``--length`` past the positions the checkpoint covers (``max_position_embeddings``, or its RoPE scaling's target
length) is refused before the model loads: RoPE positions past them are extrapolated, and the number would not
say so. ``--allow-extrapolation`` measures there anyway (the JSON then records ``extrapolated: true``).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from torchtune_longshort.refusals import (ArgumentParser, quiet_when_the_reader_leaves, refusing, stoppable,
                                          stopped_while_importing, user_path)
from torchtune_longshort.started_as import command_name

with stopped_while_importing(__name__, Path(sys.argv[0]).name):  # Ctrl-C while torch is imported: one line, exit 130
    from torchtune_longshort._quiet import quiet_upstream
    from torchtune_longshort.config.inside_input import refuse_inside_input, refuse_inside_model, tokenizer_input
    from torchtune_longshort.config.values import check_creatable
    from torchtune_longshort.data import corpus
    from torchtune_longshort.data.file_kinds import data_file_suffixes
    from torchtune_longshort.data.fixed_length import TooFewSequences, counted_fixed_length_sequences
    from torchtune_longshort.data.source_names import SourceNames, source_names
    from torchtune_longshort.data.stdlib_corpus import STDLIB_SOURCES
    from torchtune_longshort.data.stdlib_overlap import warn_overlap
    from torchtune_longshort.devices import ACCEPTED, require_device
    from torchtune_longshort.disk_space import check_not_full
    from torchtune_longshort.hidden_states import last_position_logits
    from torchtune_longshort.lengths import length_arg
    from torchtune_longshort.loss.divergences import DIVERGENCES, divergence_fn
    from torchtune_longshort.metrics.misalignment import (DEFAULT_NUM_SAMPLES, check_seed, misalignment_metric,
                                                          summary_line)
    from torchtune_longshort.models.checkpoint_open import ArgNames, OpenedCheckpoint, open_checkpoint
    from torchtune_longshort.models.hf_model import load_hf_checkpoint
    from torchtune_longshort.rope.checkpoint_code import checkpoint_code
    from torchtune_longshort.models.rope_override import factor_from_length_note, parameters_as_typed, parse_override
    from torchtune_longshort.output_guard import atomic_write_text, strict_json
    from torchtune_longshort.plural import counted
    from torchtune_longshort.provenance import provenance
    from torchtune_longshort.training.cpu_allocator import keep_freed_blocks_on
    from torchtune_longshort.windows import suffix_length_range

# How this command's arguments are named in the checkpoint path's messages (models.checkpoint_open).
NAMES = ArgNames(checkpoint="--checkpoint-dir", length="--length", allow="--allow-extrapolation",
                 tokenizer="--tokenizer", scale="--rope <method>,rope_factor=<f> to scale RoPE", rope="--rope ")
WHERE = "--rope"


# How the sources' messages name what they read: this command's options, not a config's dataset.* keys.
SOURCE_NAMES = SourceNames("--data", {"path": "--data", "source": "--data", "split": "--split",
                                      "text_field": "--text-field", "skip_bad_records": "--skip-bad-records"},
                           local_files="a local file or folder as --data (a .jsonl file, a text file)")


def data_kind(data: str) -> str:
    """What ``--data`` names: ``"stdlib"`` (a part of it: ``STDLIB_SOURCES``), ``"local"`` (an existing file
    or folder) or ``"hub"`` (a dataset name)."""
    return "stdlib" if data in STDLIB_SOURCES else "local" if Path(data).exists() else "hub"


def local_suffixes() -> tuple:
    """The suffixes that make a missing ``--data`` a local file, not a hub name: those of the data files ``datasets``
    reads (:func:`~torchtune_longshort.data.file_kinds.data_file_suffixes`: ``.ndjson``, ``.tsv``, ``.parquet`` ...)
    and of the text files a folder is read for (``corpus.TEXT_SUFFIXES``)."""
    return (*data_file_suffixes(), *corpus.TEXT_SUFFIXES)


def documents_for(data: str, text_field: str, split: str, skip_bad_records: bool = False):
    """``stdlib`` (or ``stdlib_tests`` / ``stdlib_heldout``), a local path (file, folder, JSONL) or a Hugging Face
    dataset name -> a document source."""
    kind = data_kind(data)
    if kind == "stdlib":
        return corpus.stdlib(**STDLIB_SOURCES[data])
    with source_names(SOURCE_NAMES):
        if kind == "local":
            return corpus.local_text(data, text_field=text_field, skip_bad_records=skip_bad_records)
        if data.startswith(("/", "./", "../", "~")) or Path(data).suffix in local_suffixes():
            raise FileNotFoundError(f"--data={data!r}: no such file or folder; give 'stdlib', a text file, a folder, "
                                    "a .jsonl file or a Hugging Face dataset name")
        return corpus.hf_text(data, split=split, text_field=text_field, skip_bad_records=skip_bad_records)


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    """The command; bad input (an argument, the checkpoint folder, the data, the device) is refused in one line
    (:mod:`torchtune_longshort.refusals`)."""
    prog = _prog()
    return stoppable(prog, lambda: refusing(prog, lambda: _main(argv)),
                     "no result is written (it is written when every sample is scored); run it again")


def _prog() -> str:
    """The command's name in its lines: as it was started (:func:`~torchtune_longshort.started_as.command_name`)."""
    return command_name("torchtune_longshort.metrics.cli")


def _parser() -> ArgumentParser:
    prog = _prog()
    ap = ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0], examples=[
        f"{prog} --checkpoint-dir outputs/tiny_longshort_stdlib/step_60 --data stdlib --length 256 "
        "--output misalignment.json",
        f"{prog} --checkpoint-dir CKPT --data /data/books.jsonl --text-field text --length 4k --num-samples 50"])
    # type=user_path: `--checkpoint-dir=~/ckpt` (no shell expands a tilde after "=") was refused as not a directory
    ap.add_argument("--checkpoint-dir", required=True, type=user_path, help="Hugging Face-format checkpoint folder")
    ap.add_argument("--tokenizer", default=None, type=user_path,
                    help="tokenizer folder or file of any format (default: the checkpoint's own)")
    ap.add_argument("--data", default="stdlib", type=user_path,
                    help="'stdlib' ('stdlib_tests' / 'stdlib_heldout': the part a training corpus read with "
                    "include_tests: False / split: train holds out), a text file, a folder, a .jsonl file, or a "
                    "Hugging Face dataset name (streamed); default stdlib")
    ap.add_argument("--text-field", default=None,
                    help="the text field of a .jsonl file or a Hugging Face dataset (default: text)")
    ap.add_argument("--split", default=None, help="split of a Hugging Face dataset (default: test)")
    ap.add_argument("--skip-bad-records", action="store_true",
                    help="skip a record that cannot be read (bytes not UTF-8, a line not JSON, no --text-field), "
                    "counted and logged, instead of stopping")
    ap.add_argument("--length", type=length_arg, required=True,
                    help="L (512, 1k, ...): suffix lengths are drawn from [L/2, L] (--min-len, --max-len)")
    ap.add_argument("--min-len", type=int, default=None, metavar="N",
                    help="the shortest suffix length drawn, misalignment_metric's min_len (default: L/2, Eq. 4's)")
    ap.add_argument("--max-len", type=int, default=None, metavar="N",
                    help="the longest suffix length drawn, misalignment_metric's max_len, at most L (default: L)")
    ap.add_argument("--num-samples", type=int, default=DEFAULT_NUM_SAMPLES,
                    help=f"texts to average over, one (l1, l2) draw each (default {DEFAULT_NUM_SAMPLES})")
    ap.add_argument("--divergences", nargs="+", default=list(DIVERGENCES), type=divergence_arg, metavar="DIVERGENCE",
                    help=f"the divergences to report: {', '.join(DIVERGENCES)} (default: {' '.join(DIVERGENCES)}, all "
                    "three; sce is the paper's Eq. 3), or the dotted path of a function of your own (my_divs.my_div, "
                    "importable: PYTHONPATH=.)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the (l1, l2) draws (default 0)")
    ap.add_argument("--device", default="cpu",
                    help=f"{ACCEPTED} (refused when this machine lacks it; default cpu)")
    ap.add_argument("--cpu-keep-freed-blocks", action=argparse.BooleanOptionalAction, default=True,
                    help="on a CPU, glibc keeps large freed blocks for reuse, as the recipe and the eval model do "
                    "(default: on; no page faults on every forward)")
    ap.add_argument("--output", default=None, type=user_path, help="write the JSON result here (default: stdout only)")
    ap.add_argument("--rope", default=None, metavar="METHOD[,rope_<param>=<value>...]",
                    help="evaluate under this RoPE scaling instead of the checkpoint's own, spelled as the eval's "
                    "--model_args rope=...: e.g. yarn,rope_factor=2 or clex,rope_t_max=4 (default: the checkpoint's)")
    ap.add_argument("--allow-extrapolation", action="store_true",
                    help="allow --length past the positions the checkpoint covers (RoPE extrapolation)")
    ap.add_argument("--trust-remote-code", action="store_true",
                    help="import the code of one's own the checkpoint's config.json names (longshort_family, "
                    "longshort_rope.method: a dotted path outside torchtune_longshort), as transformers' "
                    "trust_remote_code; without it such a checkpoint is refused before that module is imported")
    return ap


def divergence_arg(name: str) -> str:
    """A shipped divergence name or the dotted path of one's own (imported now: refused before the model loads)."""
    try:
        divergence_fn(name)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return name


def _check_data_options(args, ap: ArgumentParser) -> None:
    """The options of a kind of ``--data`` given with another kind (``--text-field`` with ``stdlib`` was ignored
    without a word) are refused; the defaults filled in."""
    kind = data_kind(args.data)
    unread = {"stdlib": {"--text-field": args.text_field is not None, "--split": args.split is not None,
                         "--skip-bad-records": args.skip_bad_records},
              "local": {"--split": args.split is not None}}.get(kind, {})
    given = [name for name, was_given in unread.items() if was_given]
    if given:
        kind = "reads the standard library's source files" if kind == "stdlib" else "is a local path"
        ap.error(f"{given[0]} does not apply to --data={args.data!r}, which {kind}: drop {given[0]} (it applies to "
                 f"{'a Hugging Face dataset' if given[0] == '--split' else 'JSON data or a Hugging Face dataset'})")
    args.text_field = args.text_field or "text"
    args.split = args.split or "test"


def _open_checkpoint(args, ap: ArgumentParser) -> OpenedCheckpoint:
    """The checkpoint folder and its tokenizer (or ``--tokenizer``), through the models' one checkpoint path;
    ``--length`` past its usable positions refused in one line unless ``--allow-extrapolation`` (then noted)."""
    try:
        rope = None if args.rope is None else parse_override(args.rope, WHERE)
        with parameters_as_typed(rope, WHERE), checkpoint_code(args.trust_remote_code, "--trust-remote-code"):
            opened = open_checkpoint(args.checkpoint_dir, names=NAMES, tokenizer=args.tokenizer, length=args.length,
                                     rope=rope, allow_extrapolation=args.allow_extrapolation)
            factor_one = factor_from_length_note(opened.folder, rope, args.length, "--length", "", "--rope ")
    except ValueError as e:
        ap.error(str(e))
    if opened.verdict.refused:
        ap.error(opened.verdict.message)
    for note in (opened.override_note, factor_one,
                 opened.verdict.message if opened.verdict.extrapolated else None):
        if note:
            print(f"{_prog()}: note: {note}", file=sys.stderr)
    return opened


def _check_suffix_range(args, ap: ArgumentParser) -> None:
    """``--min-len`` / ``--max-len`` (default Eq. 4's ``[L/2, L]``, as ``misalignment_metric``'s): each in
    ``[1, --length]`` and min <= max, else refused in one line before anything is read."""
    default_min, default_max = suffix_length_range(args.length)
    for name, value in (("--min-len", args.min_len), ("--max-len", args.max_len)):
        if value is not None and not 1 <= value <= args.length:
            ap.error(f"{name}={value} is outside [1, --length={args.length}]: a suffix holds 1 to L tokens of an "
                     f"L-token sequence; give {name} in that range (or a larger --length)")
    low = default_min if args.min_len is None else args.min_len
    high = default_max if args.max_len is None else args.max_len
    if low > high:
        low_said = f"--min-len={low}" if args.min_len is not None else f"--min-len {low} (its default, L/2)"
        ap.error(f"{low_said} > --max-len={high}: give --min-len <= --max-len")


RESULT_KEYS = ("length", "summary", "values", "provenance")  # what an earlier result of this command holds


def _check_output(args) -> None:
    """``--output`` names a new file or an earlier result of this command (replaced); a folder or any other file
    is refused before anything is read: the command never overwrites a user's file. One inside what the command
    reads (``--checkpoint-dir``, ``--tokenizer``'s folder, a local ``--data`` folder) or inside any model's folder
    is refused too (:mod:`~torchtune_longshort.config.inside_input`): it was written among their files."""
    path = args.output
    if not path:
        return
    out = Path(path)
    if out.is_dir():
        raise IsADirectoryError(f"--output={path!r} is a folder: name a JSON file, e.g. "
                                f"{str(out / 'misalignment.json')!r}")
    if out.exists() or out.is_symlink():  # a link to nothing is the user's too
        try:
            earlier = json.loads(out.read_text())
        except (OSError, ValueError):
            earlier = None
        if not (isinstance(earlier, dict) and all(k in earlier for k in RESULT_KEYS)):
            raise FileExistsError(f"--output={path!r} exists and is not an earlier result of {_prog()}: refusing to "
                                  "overwrite it; name another file, or move that one away")
    inputs = [(name, p) for name, p in (("--checkpoint-dir", args.checkpoint_dir), ("--data", args.data),
                                         ("--tokenizer", args.tokenizer and tokenizer_input(args.tokenizer)))
              if p and (name != "--data" or data_kind(p) == "local") and Path(p).expanduser().exists()]
    refuse_inside_input("--output", path, inputs, "the result", "which this command reads")
    refuse_inside_model("--output", path, "the result")
    # its folder, made if absent: asked now, not after the whole measurement (whose result would then be lost)
    check_creatable("--output's folder", str(out.parent), writable=True)
    check_not_full(out, "--output", "its result (after the whole measurement)")


def _main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.length < 2:
        ap.error(f"--length={args.length}: must be >= 2 tokens")
    if args.num_samples < 1:
        ap.error(f"--num-samples={args.num_samples}: must be >= 1")
    try:
        check_seed(args.seed, "--seed")
    except ValueError as e:
        ap.error(str(e))
    _check_suffix_range(args, ap)
    _check_data_options(args, ap)
    _check_output(args)
    require_device(args.device, "--device")  # before any file is read or model built
    quiet_upstream()  # before torchtune (and so torchao) is imported by the calls below
    opened = _open_checkpoint(args, ap)
    folder, tok = opened.folder, opened.tokenizer
    keep_freed_blocks_on(args.device, args.cpu_keep_freed_blocks)
    # a stdlib --data that holds text the checkpoint's run trained on (its torchtune_config.yaml): said, not refused
    trained_text = warn_overlap(args.data, [args.checkpoint_dir], "--data",
                                lambda line: print(f"{_prog()}: warning: {line}", file=sys.stderr))
    try:
        seqs, skipped = counted_fixed_length_sequences(
            documents_for(args.data, args.text_field, args.split, args.skip_bad_records),
            lambda t: tok.encode(t, add_bos=True, add_eos=True),
            seq_len=args.length,
            num_sequences=args.num_samples,
            vocab_size=tok.vocab_size,
            where="--data",
        )
    except TooFewSequences as e:
        raise TooFewSequences(f"--num-samples={args.num_samples} at --length={args.length}: {e}; lower either, or "
                              "give --data more text") from None

    # what started and how much there is, before the model load (seconds without a word); after the data is read, so
    # that a refusal of --data stays the command's one line
    print(f"{_prog()}: measuring {counted(args.num_samples, 'sample')} of {args.length} tokens from --data "
          f"{args.data} on {args.device}; loading {folder.path} ...", file=sys.stderr, flush=True)
    with parameters_as_typed(opened.rope_override, WHERE):
        model = load_hf_checkpoint(folder, rope=opened.rope_override, max_seq_len=args.length, device=args.device,
                                   length_field="--length")

    # Only the last position of each suffix is projected to the vocabulary.
    res = misalignment_metric(
        functools.partial(last_position_logits, model), seqs, length=args.length, num_samples=args.num_samples,
        min_len=args.min_len, max_len=args.max_len, divergences=args.divergences, seed=args.seed, device=args.device,
    )

    out = res.to_dict()
    kind = data_kind(args.data)
    # The settings a reader needs to repeat the measurement: absolute paths (the folder as opened, a local --data),
    # the seed of the (l1, l2) draws, the RoPE the model ran with, and the data options that applied.
    out.update(checkpoint_dir=str(folder.path), model_family=folder.family.name,
               tokenizer=f"{tok.format}: {tok.path}",
               data=str(Path(args.data).resolve()) if kind == "local" else args.data,
               text_field=None if kind == "stdlib" else args.text_field,
               split=args.split if kind == "hub" else None,
               seed=args.seed, rope_scaling=opened.rope_spec, rope_override=args.rope, records_skipped=skipped,
               usable_length=opened.usable_length,
               extrapolated=opened.verdict.extrapolated, trained_text_overlap=trained_text,
               provenance=provenance(device=args.device, stdlib=data_kind(args.data) == "stdlib"))
    text = strict_json(out, indent=2)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.output, text)
        print(f"wrote {args.output}", file=sys.stderr)
    for d, s in res.summary.items():
        print(summary_line(d, s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
