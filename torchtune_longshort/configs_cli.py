"""``longshort-cp``: list and copy the configs this package ships, as ``tune ls`` / ``tune cp`` do for torchtune's.

    longshort-cp --list
    longshort-cp tiny/longshort_stdlib.yaml my_run.yaml
    longshort-cp tiny/longshort_stdlib.yaml runs/new/my_run.yaml --make-parents

``tune cp``'s flags mean the same here: ``--make-parents`` creates the destination's folders, ``-n/--no-clobber``
leaves an existing destination as it is (exit 0), and a destination without a suffix gets ``.yaml``. One with a
suffix is written as named (``run.yml``), where ``tune cp`` replaces any suffix with ``.yaml`` (its ``run.yml`` and
``run.v2`` both write ``run.yaml``). Unlike ``tune cp``, an existing destination is refused unless ``--force`` is given
(a user's edited config is not replaced), and a device, named pipe or socket is refused (``tune cp NAME /dev/null``
writes ``/dev/null.yaml``). A destination that is a symbolic link is written through, the link kept, as
``tune cp`` (``shutil.copy``) does (``-n`` too, where the file it points to is not there yet).

The YAML files under the repository's ``configs/`` are installed with the package (``torchtune_longshort.configs``),
so a non-editable ``pip install .`` has them too.
"""

from __future__ import annotations

import difflib
import os
import stat
import sys
from importlib import resources
from pathlib import Path
from typing import List, Optional

from torchtune_longshort.output_guard import atomic_copy
from torchtune_longshort.refusals import ArgumentParser, quiet_when_the_reader_leaves, user_path
from torchtune_longshort.started_as import advised_command, command_name

# The repository's configs/ beside the package's source folder: what torchtune_longshort.configs is installed from.
SOURCE_CONFIGS = Path(__file__).resolve().parent.parent / "configs"
# the README's first config (CPU, under a minute): a recipe command's example when no shipped name is near the one given
MAIN_CONFIG = "tiny/longshort_stdlib.yaml"
# longshort-cp's module form, which a refusal names beside the script where its hint is a command to run: a
# `pip install --target DIR` install (PYTHONPATH=DIR) puts no console script on PATH (README names both forms)
CP_MODULE = "python -m torchtune_longshort.configs_cli"


def list_command() -> str:
    """``longshort-cp --list`` as another command's help names it, the way this process was started
    (:func:`~torchtune_longshort.started_as.advised_command`): ``python -m torchtune_longshort.configs_cli --list``
    under ``python -m`` (the study, Table 1, the figures), else the console script's."""
    return f"{advised_command(CP_MODULE.removeprefix('python -m '))} --list"


def configs_root():
    """The shipped configs' folder: the installed data package ``torchtune_longshort.configs``, or, where the package
    is imported from a checkout that installed no such package (``PYTHONPATH=.``, or ``python -m`` run in a checkout
    whose package shadows a non-editable install), the checkout's own ``configs/``. ``FileNotFoundError`` when neither
    exists."""
    try:
        return resources.files("torchtune_longshort.configs")
    except ModuleNotFoundError:
        if SOURCE_CONFIGS.is_dir():
            return SOURCE_CONFIGS
    raise FileNotFoundError(f"the package's shipped configs are not installed (no torchtune_longshort.configs, no "
                            f"{SOURCE_CONFIGS}): install the package (pip install .), or name a YAML file")


def shipped_configs() -> List[str]:
    """Names (``family/name.yaml``) of every shipped config, sorted."""
    root = configs_root()
    names = []

    def walk(node, prefix=""):
        for child in node.iterdir():
            if child.is_dir() and child.name != "__pycache__":
                walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(".yaml"):
                names.append(prefix + child.name)

    walk(root)
    return sorted(names)


def nearest_shipped(value: str) -> Optional[str]:
    """The shipped config whose name ``value`` (a file name, ``configs/`` and ``.yaml`` optional) is nearly, as a
    typo of it (``smollm2_135m/yarn_16k_stdlb.yaml``); None when none is near, or none is installed."""
    name = str(value).removeprefix("configs/")
    name = name if name.endswith(".yaml") else name + ".yaml"
    try:
        names = shipped_configs()
    except (FileNotFoundError, ValueError):
        return None
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.85)
    return near[0] if near and near[0] != name else None


def config_path(name: str) -> Path:
    """The installed file of a shipped config (``.yaml`` may be left out); ``FileNotFoundError`` naming the choices."""
    if not name.endswith(".yaml"):
        name += ".yaml"
    names = shipped_configs()
    if name not in names:
        near = nearest_shipped(name)
        hint = f" (did you mean {near!r}?)" if near else ""
        raise FileNotFoundError(f"no shipped config {name!r}{hint}; available: {', '.join(names)}")
    with resources.as_file(configs_root().joinpath(name)) as p:
        return Path(p)


def resolve_config(value: str, root: Path, key: str, example: Optional[str] = None) -> Path:
    """A config named by a file path (absolute or relative to ``root``) or, failing that, by its shipped name
    (``tiny/longshort_stdlib.yaml``, as ``longshort-cp`` takes it), or by its path in a checkout
    (``configs/study/cpu_small.yaml``, as the reports record a command run there): the same value finds the file from
    a checkout and from an installed wheel. ``ValueError`` naming ``key`` when it is neither, with the shipped config
    nearest ``value``, else one in its folder, else ``example`` (the command's own main config) for an example."""
    path = Path(os.path.expanduser(value))  # `--config=~/x.yaml`: no shell expands a tilde after "="
    path = path if path.is_absolute() else Path(root) / path
    if path.is_file():
        return path
    for name in (str(value), str(value).removeprefix("configs/")):
        try:
            return config_path(name)
        except FileNotFoundError:
            pass
    folder = str(value).removeprefix("configs/").split("/")[0]
    try:
        shipped = shipped_configs()
    except (FileNotFoundError, ValueError):  # none installed, nor beside the package
        shipped = [MAIN_CONFIG]
    like = [nearest_shipped(value)] + [n for n in shipped if n.startswith(folder + "/")] + [example]
    like = [n for n in like if n]  # the first alphabetically (gemma_2b/...) was offered when nothing was near
    where = (f" (looked for at {path})" if str(value).startswith("~") else "" if Path(str(value)).is_absolute()
             else f" (relative to {root})")  # a `~` names the home folder the path was looked for in
    raise ValueError(f"{key}={value!r} is neither a file{where} nor a config this package ships: "
                     f"name one of `longshort-cp --list` / `{CP_MODULE} --list`"
                     f"{f' (e.g. {like[0]})' if like else ''} or "
                     "a YAML file")


def _special_file(path: Path) -> str:
    """What ``path`` (a link followed) is, where it is neither a regular file nor a folder (``a character device``,
    ``a named pipe``, ...); ``""`` otherwise, or where it is not there."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return ""
    kinds = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe"),
             (stat.S_ISSOCK, "a socket"))
    return next((word for test, word in kinds if test(mode)), "")


def _destination(ap, args, src):
    """The path ``longshort-cp`` names (``DEST``, ``DEST/<name>`` for a folder, ``DEST.yaml`` for a name without a
    suffix) and the file it writes: the same path, or, where that path is a symbolic link, the file the link points to
    (as ``tune cp`` and ``cp`` write through a link; the user's link stays a link, its target written, made where it
    is gone)."""
    dest = Path(args.destination)
    special = _special_file(dest)
    if special:  # `tune cp NAME /dev/null` writes /dev/null.yaml, a new file among the devices
        ap.error(f"{dest} is {special}, not a file or folder: name a file to copy to, e.g. run.yaml")
    if dest.is_dir() or args.destination.endswith(("/", os.sep)):  # DEST/ names a folder (as cp reads it)
        dest = dest / src.name
    elif not dest.suffix:  # as tune cp: `longshort-cp NAME my_run` writes my_run.yaml
        dest = dest.with_name(dest.name + ".yaml")
    if _special_file(dest):  # `--force` replaced a named pipe of the user's by a file
        ap.error(f"{dest} is {_special_file(dest)}, not a file: name a file to copy to, e.g. run.yaml")
    if not dest.is_symlink():
        return dest, dest
    try:
        target = Path(os.path.realpath(dest, strict=False))
        loop = target.is_symlink()
    except (OSError, RuntimeError):
        loop = True
    if loop or target.is_dir():
        what = "in a loop (it reaches no file)" if loop else f"to the folder {target}"
        ap.error(f"{dest} is a symbolic link {what}: name a file to copy to" + (
            "" if loop else ", or the folder with a trailing /"))
    return dest, target


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    prog = command_name("torchtune_longshort.configs_cli")  # as started
    ap = ArgumentParser(prog=prog, description="List or copy the configs torchtune_longshort ships.",
                        examples=[f"{prog} --list", f"{prog} tiny/longshort_stdlib.yaml run.yaml",
                                  f"{prog} tiny/longshort_stdlib.yaml runs/a/run.yaml --make-parents"])
    ap.add_argument("name", nargs="?", help="a shipped config, e.g. tiny/longshort_stdlib.yaml")
    ap.add_argument("destination", nargs="?", type=user_path, help="file or folder to copy it to")
    ap.add_argument("--list", action="store_true", help="list the shipped configs")
    ap.add_argument("--force", action="store_true", help="overwrite an existing destination file")
    ap.add_argument("-n", "--no-clobber", action="store_true",
                    help="leave an existing destination as it is and exit 0 (tune cp's flag)")
    ap.add_argument("--make-parents", action="store_true",
                    help="create the destination's missing folders (tune cp's flag)")
    args = ap.parse_args(argv)
    flags = [f for f, on in (("--force", args.force), ("--no-clobber", args.no_clobber),
                             ("--make-parents", args.make_parents)) if on]
    if args.name is not None and not args.name.strip():  # `longshort-cp "" run.yaml` listed the configs, exit 0
        ap.error(f"name={args.name!r} is empty: give a shipped config ({prog} --list names them), "
                 f"e.g. {prog} tiny/longshort_stdlib.yaml run.yaml")
    extra = [repr(a) for a in (args.name, args.destination) if a] + flags
    if args.list and extra:  # a copy asked as well: it was ignored without a word
        ap.error(f"--list takes nothing else ({', '.join(extra)} given): {prog} --list, or {prog} NAME DEST to copy")
    if args.list or not args.name:
        try:
            print("\n".join(shipped_configs()))
        except FileNotFoundError as e:
            ap.error(str(e))
        return 0
    if not args.destination or args.destination == "-":  # `tune cp NAME -` writes a file named -.yaml
        ap.error(f"give a destination: {prog} NAME DEST" + (" ('-' is not standard output here, and tune cp "
                 "writes a file named -.yaml for it: name a file, e.g. run.yaml)" if args.destination else ""))
    try:
        src = config_path(args.name)
    except FileNotFoundError as e:
        ap.error(str(e))
    if args.force and args.no_clobber:
        ap.error("--force and --no-clobber ask for opposite things: give one of them")
    dest, target = _destination(ap, args, src)
    # a link to nothing is the user's too; -n writes through it, as tune cp -n does (nothing there to leave as it is)
    if dest.exists() or (dest.is_symlink() and not args.no_clobber):
        if args.no_clobber:
            print(f"{dest} exists, not overwriting (--no-clobber)")
            return 0
        if not args.force:
            link = f" (a symbolic link to {target})" if target != dest else ""
            ap.error(f"{dest} exists{link}; pass --force to overwrite it" + (link and " through the link (kept)"))
    missing = None  # the highest folder --make-parents makes, taken back if the copy then fails
    for parent in (target.parent, *target.parent.parents):
        if parent.exists() and not parent.is_dir():
            ap.error(f"destination folder {parent} is a file, not a folder; name a file in a folder")
        if parent.is_dir():
            break
        missing = parent
    if missing is not None and not args.make_parents:
        ap.error(f"destination folder {target.parent} does not exist; pass --make-parents (as tune cp) or create it "
                 f"(mkdir -p {target.parent})")
    try:
        if missing is not None:
            target.parent.mkdir(parents=True)
        atomic_copy(src, target)
    except OSError as e:
        if missing is not None:  # take back the folders this command made, emptied (nothing else is removed)
            for folder in (target.parent, *target.parent.parents):
                try:
                    folder.rmdir()
                except OSError:
                    break
                if folder == missing:
                    break
        ap.error(f"cannot write {target}: {e.strerror or e}; name a destination you can write")
    print(f"Copied {args.name} to {dest}" + (f" (through the link, into {target})" if target != dest else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
