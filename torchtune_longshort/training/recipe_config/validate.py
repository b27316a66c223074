"""``longshort-validate CONFIG [key=value ...]``: the recipe's whole config check, without training.

torchtune's ``tune validate`` only binds each top-level ``_component_`` to its signature, so it calls a config with
a top-level ``max_step:`` typo well-formed and the recipe refuses it later. This command runs exactly what the
recipe's constructor runs before any side effect (:func:`~torchtune_longshort.training.recipe_config.
load_recipe_config`: every key with "did you mean", every value, the files the config reads, each component's
arguments, the tokenizer built and checked against the model, the rules between fields) on the config and its
``key=value`` overrides merged as ``tune run`` merges them, and says OK, or refuses in one line
(:mod:`torchtune_longshort.refusals`). Nothing is written, and no weights or data are read.
``CONFIG`` is a file or a shipped config's name (``longshort-cp --list``); ``--nproc_per_node N`` (as ``tune run``
takes it; default ``$WORLD_SIZE``, else 1) checks it for that many processes: the batch split over them, and what
several processes refuse.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Any, List, Optional, Sequence

import yaml

from torchtune_longshort.refusals import ArgumentParser, quiet_when_the_reader_leaves, refusing, stopped_while_importing
from torchtune_longshort.started_as import command_name

with stopped_while_importing(__name__, Path(sys.argv[0]).name):  # Ctrl-C while torch is imported: one line, exit 130
    from torchtune_longshort._quiet import quiet_upstream
    from torchtune_longshort.configs_cli import CP_MODULE, MAIN_CONFIG, list_command, nearest_shipped, resolve_config
    from torchtune_longshort.launcher import launched_world_size
    from torchtune_longshort.devices import cpu_oversubscribed
    from torchtune_longshort.config.unknown_keys import refuse_study_config, torchtune_keys_as_here
    from torchtune_longshort.training.recipe_config import load_recipe_config, resolved_container
    from torchtune_longshort.training.recipe_config.paths import interpolation_refusal
    from torchtune_longshort.training.moved_sources import moved_folders
    from torchtune_longshort.training.resume import resume_changes


def read_config_file(path: Path) -> dict:
    """The top-level mapping of the recipe YAML file ``path``, its values read as ``tune run`` reads them
    (``OmegaConf.load``: ``lr: 3e-4``, as torchtune's configs write it, is a float, where plain YAML 1.1 reads a
    string); ``FileNotFoundError`` / ``ValueError`` naming the file and the fix when it is missing, a folder, not
    YAML, or not a mapping."""
    if not path.is_file():
        near = None if path.is_dir() else nearest_shipped(str(path))  # a typo of a shipped name: not tiny's copy
        shipped = near or "tiny/longshort_stdlib.yaml"
        copy = Path(near).name if near else path.name if path.suffix else "run.yaml"
        raise FileNotFoundError(
            f"--config {str(path)!r}: {'a folder' if path.is_dir() else 'no such file'}"
            f"{f' (did you mean the shipped {near!r}?)' if near else ''}; name a YAML file, e.g. copy a shipped "
            f"config first: longshort-cp {shipped} {copy}, or {CP_MODULE} {shipped} {copy} (--list names them)")
    try:
        node = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f"config {str(path)!r} is not valid YAML ({' '.join(str(e).split())}): fix the file") from None
    if not isinstance(node, (dict, type(None))):
        raise ValueError(f"config {str(path)!r}: expected a mapping of keys at the top level, found a "
                         f"{type(node).__name__}")
    if not node:
        return {}
    from omegaconf import OmegaConf
    from omegaconf.errors import GrammarParseError

    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except GrammarParseError as e:  # a `${` never closed: OmegaConf's traceback
        raise ValueError(f"config {str(path)!r}: {interpolation_refusal(e)}") from None
    except yaml.YAMLError as e:  # a key written twice: PyYAML keeps the last, OmegaConf's loader refuses it
        raise ValueError(f"config {str(path)!r} is not valid YAML for a config ({' '.join(str(e).split())}): fix the "
                         "file") from None


def check_config_argument(argv: Sequence[str]) -> List[str]:
    """``tune run``'s ``--config FILE`` in a recipe's ``argv`` names a YAML mapping (:func:`read_config_file`):
    checked before torchtune's parser opens it, which ends with a traceback. Returns ``argv`` with a shipped
    config's name (``tiny/longshort_stdlib.yaml``, as ``tune run`` takes torchtune's own config names and
    ``longshort-validate`` ours) replaced by its file, when no file of that name is there."""
    argv = list(argv)
    if any(a in ("-h", "--help") for a in argv):  # torchtune's parser prints the usage, as for its own recipes
        return argv
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--config")
    known, overrides = ap.parse_known_args(argv)
    if known.config:
        path = Path(known.config)
        if not path.exists():
            with contextlib.suppress(ValueError):  # not a shipped name either: read_config_file says so
                path = resolve_config(known.config, Path.cwd(), "--config")
                named = {known.config: str(path), f"--config={known.config}": f"--config={path}"}
                argv = [named.get(a, a) for a in argv]
        node = merge_overrides(read_config_file(path), overrides)
        refuse_study_config(node.keys())  # before its ${...}: a study's name keys of the recipe config it merges into
        resolved_container(node)  # its ${...} name keys it has
    return argv


def merge_overrides(node: dict, overrides: Sequence[str]):
    """``node`` with the ``key=value`` ``overrides`` merged as ``tune run`` merges them (torchtune's
    ``_merge_yaml_and_cli_args``); an override that is not ``key=value`` or whose value is not YAML is refused naming
    it (torchtune's parser ends with a traceback)."""
    # deferred: torchtune (the config check's own imports do not need it)
    from torchtune.config._utils import _merge_yaml_and_cli_args

    for arg in overrides:
        key, sep, value = str(arg).partition("=")
        if not str(arg).startswith("~") and sep and key and "=" in value:
            raise ValueError(f"override {arg!r}: a value holding '=' cannot be given on the command line (torchtune's "
                             f"parser splits it at each '='); set {key} in the YAML file")
        if not str(arg).startswith("~") and (not sep or not key):
            raise ValueError(f"override {arg!r}: expected key=value (e.g. max_steps=10), or ~key to remove a key")
        try:
            yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise ValueError(f"override {arg!r}: its value is not YAML ({' '.join(str(e).split())[:160]}); mend it, "
                             "or quote the whole override") from None
    from omegaconf.errors import GrammarParseError

    try:
        return _merge_yaml_and_cli_args(argparse.Namespace(**node), list(overrides))
    except GrammarParseError as e:  # `output_dir=${oops`: OmegaConf's traceback
        raise ValueError(f"override: {interpolation_refusal(e)}") from None
    except TypeError as e:  # `validation=[1,2]`: OmegaConf's "Cannot merge incompatible container types"
        raise ValueError(_container_clash(node, overrides) or f"override: {' '.join(str(e).split())}") from None
    except ValueError as e:  # e.g. ~key of a key the config lacks
        removed = [str(a)[1:] for a in overrides if str(a).startswith("~") and isinstance(node.get(str(a)[1:]), dict)
                   and "_component_" in node[str(a)[1:]]]
        if removed:  # torchtune's message says the key is not there
            raise ValueError(f"override ~{removed[0]}: torchtune cannot remove a component node from the command line; "
                             f"turn it off with {removed[0]}=null") from None
        raise ValueError(f"override: {' '.join(str(e).split())}") from None


def _container_clash(node: dict, overrides: Sequence[str]) -> Optional[str]:
    """The refusal of the first ``key=value`` override whose value is a list where the config has a mapping, or a
    mapping where it has a list (OmegaConf merges neither into the other), or None."""
    for arg in overrides:
        key, _, value = str(arg).partition("=")
        if str(arg).startswith("~"):
            continue
        have: Any = node
        for part in key.split("."):
            have = have.get(part) if isinstance(have, dict) else None
        given = yaml.safe_load(value)
        for kind, other, fix in ((dict, list, f"set its keys one at a time ({key}.<key>=...), or in the YAML file"),
                                 (list, dict, f"give a list ({key}=[a,b])")):
            if isinstance(have, kind) and isinstance(given, other):
                return (f"override {arg!r}: {key} is a {'mapping' if kind is dict else 'list'} in the config, and a "
                        f"{'list' if other is list else 'mapping'} cannot replace it from the command line; {fix}")
    return None


def validate(config: str, overrides, world_size: int = 1, notes: Optional[list] = None,
             applied: Optional[list] = None):
    """The checked :class:`RecipeConfig` of ``config`` (a file or a shipped name) with ``overrides`` merged;
    ``notes`` (a list) gets ``key: value (what this recipe does)`` for each torchtune key accepted at its value;
    ``applied`` each change a ``resume=True`` applies to the run's saved config (one it refuses is raised)."""
    from omegaconf import OmegaConf

    node = merge_overrides(read_config_file(resolve_config(config, Path.cwd(), "config", example=MAIN_CONFIG)),
                           overrides)
    checked = load_recipe_config(node, world_size)
    plain = OmegaConf.to_container(node, resolve=True)
    # a resume's config against the one its run saved, as tune run compares them (it said OK to a seq_len change)
    changes = resume_changes(Path(checked.output_dir), plain) if checked.resume else []
    if notes is not None:
        notes.extend(torchtune_keys_as_here(plain).values())
    if applied is not None:
        moves, changes = moved_folders(changes)
        applied.extend(moves + [f"{key}: {old!r} -> {new!r}" for key, old, new in changes])
    return checked


@contextlib.contextmanager
def tune_run_import_path():
    """``sys.path`` as ``tune run`` has it while the block runs: the current folder appended (torchtune's
    ``_cli/run.py``: "make sure user code in current directory is importable"), so a component or RoPE method of the
    user's own module beside the config imports here as it does there (the console script's path lacked it, and a
    config ``tune run`` ran was refused: 'does not import')."""
    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.append(here)
    try:
        yield
    finally:
        if added and here in sys.path:
            sys.path.remove(here)


def config_flag_refusal(argv: Sequence[str], prog: str) -> str:
    """What ``--config X`` (``tune run``'s spelling) is refused with: the config is the first argument, as torchtune's
    own ``tune validate <config>`` takes it (which refuses ``--config`` too); the command (``prog``) as it should be."""
    rest, config = [], None
    it = iter(argv)
    for a in it:
        if a == "--config":
            config = next(it, None)
        elif a.startswith("--config="):
            config = a.split("=", 1)[1]
        else:
            rest.append(a)
    if rest and "=" not in rest[0] and not rest[0].startswith("-"):  # a config given first too: that one stands
        config = ""
    fixed = " ".join(a for a in [prog, "<config>" if config is None else config, *rest] if a)
    return f"--config: the config is the first argument, as tune validate takes it: {fixed}"


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    prog = command_name("torchtune_longshort.training.recipe_config.validate")  # as started
    ap = ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0], examples=[
        f"{prog} run.yaml",
        f"{prog} tiny/longshort_stdlib.yaml max_steps=10 'e_range=[1,L/4]' '~validation'",
        f"{prog} llama2_7b/eabf_8k_redpajama_book.yaml checkpoint_dir=/models/Llama-2-7b-hf --nproc_per_node 8",
        f"{prog} run.yaml checkpointer.trust_remote_code=true   # import the code of one's own a start folder's "
        "config.json names (longshort_family, longshort_rope.method; refused without it)"])
    ap.add_argument("config", help=f"recipe YAML: a file, or a shipped config ({list_command()})")
    ap.add_argument("overrides", nargs="*", default=[], metavar="key=value", help="overrides, as tune run takes them")
    ap.add_argument("--nproc_per_node", "--nproc-per-node", type=int, default=None, metavar="N",
                    help="check it as `tune run --nproc_per_node N` runs it: the batch split over N processes, "
                         "and what several processes refuse (default: $WORLD_SIZE, else 1)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--config" or a.startswith("--config=") for a in argv):
        ap.error(config_flag_refusal(argv, prog))
    args = ap.parse_intermixed_args(argv)  # key=value after --nproc_per_node too, as tune run takes them
    world = args.nproc_per_node if args.nproc_per_node is not None else refusing(prog, launched_world_size)
    if world < 1:
        ap.error(f"--nproc_per_node={world}: expected an integer >= 1")
    quiet_upstream()
    notes: list = []
    applied: list = []
    with tune_run_import_path():
        checked = refusing(prog, lambda: validate(args.config, args.overrides, world, notes, applied))
    oversubscribed = cpu_oversubscribed(checked.device, world)
    if oversubscribed:
        print(f"{prog}: warning: {oversubscribed}")
    if notes:
        print(f"{prog}: note: torchtune's keys at values that ask for what this recipe does, accepted and not read: "
              f"{'; '.join(notes)}")
    if applied:
        print(f"{prog}: note: resume=True applies {'; '.join(applied)} (as tune run will, and logs)")
    if checked.seed is None:
        print(f"{prog}: note: seed: null draws the run's seed when tune run starts: printed, and recorded as its seed "
              "(torchtune_config.yaml, the recipe state, metrics.jsonl); give it as seed=<n> to repeat the run, and "
              "resume=True continues with it")
    print(f"{prog}: {args.config}: OK{f' for {world} processes' if world > 1 else ''} (keys, values, files, "
          "components, the tokenizer against the model and the rules between fields checked; nothing written, no "
          "weights read: the model's weights and the data's records are read when tune run starts, before it writes "
          "anything; of corpus.local_text's files only the first 64 KiB are decoded here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
