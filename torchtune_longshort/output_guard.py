"""The one rule every command that writes into a folder the user names follows: it replaces only what an earlier run
of the same command wrote there, and refuses anything else in one line, before doing any work (the recipe's own
output folder has its stricter rules in ``training.output_dir``)."""

from __future__ import annotations

import contextlib
import contextvars
import errno
import glob
import json
import math
import numbers
import os
import io
import shutil
import signal
import stat
import threading
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Collection, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from torchtune_longshort.disk_space import note_room
from torchtune_longshort.file_locks import flock_named
from torchtune_longshort.made_folders import missing_root, remove_made_folders
from torchtune_longshort.temporary_files import new_temporary, remove_abandoned_temporaries
from torchtune_longshort.umask import current_umask


def read_json(path: Path) -> Any:
    """``path`` parsed, or None when it is missing or not JSON (an earlier run's summary is recognised by its keys)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def atomic_open(path: Union[str, Path], mode: str = "w", tmp: Optional[Union[str, Path]] = None,
                **kwargs: Any) -> Iterator[IO]:
    """A file object writing to a temporary file beside ``path`` that replaces ``path`` (``os.replace``) when the block
    ends: a kill or a full disk leaves the earlier file or the new one, never half of one. A failure removes the
    temporary file (it would hold the disk's last bytes, and a folder check would take it for a user's) and an
    ``OSError`` is raised again naming ``path`` (the writer's own says only "No space left on device"). The temporary
    file is a new one of this call's (``.<name>.<random>.tmp``, :mod:`torchtune_longshort.temporary_files`): no file of
    the user's is written or removed (a user's ``<name>.tmp`` was), and two processes writing ``path`` at once each put
    a whole file in place, the last to finish staying. ``tmp``: a temporary file of the caller's own instead, held under
    an exclusive flock until it is in place: a second process writing through it waits (:func:`_own_temporary`)."""
    path, own = Path(path), tmp is None
    recording = _RECORDING.get()
    if recording is not None:
        recording.make_folders(path)
    try:
        tmp, f = new_temporary(path, mode, _claim=recording and recording.claim, **kwargs) if tmp is None else \
            (Path(tmp), _own_temporary(Path(tmp), mode, **kwargs))
    except OSError as e:  # the temporary file is not this call's: it stays
        if not e.filename and e.errno:
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    if recording is not None and not own:
        recording.claim(tmp)  # opened (made) by this call: listed now it exists
    try:
        with f:  # closed (the flock given back) once the file is in place, or gone
            try:
                yield f
                f.flush()
                os.fsync(f.fileno())
                written = os.fstat(f.fileno())
                try:
                    os.replace(tmp, path)
                finally:  # listed once in place (a Ctrl-C just after the rename too), and only if it is this file
                    if recording is not None:
                        recording.placed_at(path, written)
                if own:  # what killed writers of path left (.<name>.<8 hex>.tmp, a day old), now written whole
                    remove_abandoned_temporaries(path)
            except BaseException as e:
                note_room(e, tmp)  # the room the write found, before its temporary file's bytes go
                # removed under the flock: a waiting writer makes its own (after: the waiter's file, its rename failed)
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise
    except BaseException as e:
        if isinstance(e, OSError) and not e.filename and e.errno:
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def _own_temporary(tmp: Path, mode: str, **kwargs: Any) -> IO:
    """``tmp`` opened empty for writing under an exclusive flock: a writer of the same file in another process holds
    it until its file is in place (it wrote through the same ``tmp``: the second truncated the first's, the first
    moved the second's half into place, the second's rename found no file). The flock is taken on the file then
    checked to be still ``tmp``'s (the holder may have renamed it into place meanwhile: then again). What a killed
    writer left is no one's (its flock went with it). Where the file system has no flock, none. A symbolic link
    there is not one: refused, never written through (the file it named was emptied and overwritten, and moved into
    place as a link to it; one to nothing was opened again and again, the command never ending)."""
    try:
        fd, _ = flock_named(Path(tmp), os.O_WRONLY | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise FileExistsError(errno.EEXIST, f"{tmp} is a symbolic link, not a temporary file of this command's: "
                              "move it away and run again", str(tmp)) from None
    os.ftruncate(fd, 0)
    return os.fdopen(fd, mode, **kwargs)


def atomic_write_text(path: Union[str, Path], text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (:func:`atomic_open`)."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)


def strict_json(obj: Any, **dump_kwargs: Any) -> str:
    """``obj`` as JSON that any reader takes: a NaN or infinite number written as ``null`` (Python's ``json`` writes
    ``NaN`` / ``Infinity``, which JSON does not have: jq, JavaScript's ``JSON.parse`` and Go refuse the file)."""
    def finite(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: finite(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [finite(v) for v in o]
        if isinstance(o, numbers.Real) and not isinstance(o, numbers.Integral):
            return float(o) if math.isfinite(o) else None
        return o

    return json.dumps(finite(obj), allow_nan=False, **dump_kwargs)


def atomic_write_json(path: Union[str, Path], obj: Any, *, strict: bool = True, **dump_kwargs: Any) -> None:
    """``obj`` as JSON at ``path``, whole or not at all (:func:`atomic_open`); a NaN or infinite number as ``null``
    (:func:`strict_json`) unless ``strict=False`` (a cache only this package reads back)."""
    atomic_write_text(path, strict_json(obj, **dump_kwargs) if strict else json.dumps(obj, **dump_kwargs))


def save_figure(fig: Any, path: Union[str, Path], **kwargs: Any) -> None:
    """``fig.savefig(path, **kwargs)`` whole or not at all: a figure cut off by a full disk is not left for a
    viewer (or a folder check) to find (:func:`atomic_open`)."""
    path = Path(path)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format=kwargs.pop("format", path.suffix.lstrip(".") or None), **kwargs)


def figure_bytes(fig: Any, fmt: str = "png", **kwargs: Any) -> bytes:
    """``fig`` drawn to bytes (``fig.savefig``), for :func:`write_together`: drawing takes seconds, writing none."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, **kwargs)
    return buf.getvalue()


@contextlib.contextmanager
def stops_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) and SIGTERM held while the block runs and delivered, each once in the order they came, to the
    handlers they had, as it ends. Python's handlers, not the thread's signal mask: a process-directed signal goes to
    any thread that does not block it (torch's), and only the main thread can set a handler (elsewhere the block runs
    unheld); a handler set from C (``getsignal`` None) cannot be put back and is left in place, unheld."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: List[int] = []
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    before = {s: h for s, h in before.items() if h is not None}
    for s in before:
        signal.signal(s, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(held):  # the handler back in place runs now, in this thread (it may raise)
            signal.raise_signal(s)


def write_together(files: Sequence[Tuple[Union[str, Path], bytes]]) -> None:
    """Each ``(path, bytes)`` written whole or not at all (:func:`atomic_open`), in order, with Ctrl-C / SIGTERM held
    until the last one is written: files that belong together (a summary and the CSVs and figures it describes) are
    not left half this run's, half an earlier run's, by a stop. The caller prepares every byte first (a figure with
    :func:`figure_bytes`), so the stop waits milliseconds, not the seconds a figure takes to draw."""
    with stops_held():
        for path, data in files:
            with atomic_open(path, "wb") as f:
                f.write(data)


def atomic_copy(source: Union[str, Path], path: Union[str, Path]) -> None:
    """``shutil.copyfile(source, path)`` whole or not at all (:func:`atomic_open`)."""
    with open(source, "rb") as src, atomic_open(path, "wb") as f:
        shutil.copyfileobj(src, f)


def _identity(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_mtime_ns


def is_written_file(path: Union[str, Path], written: Optional[os.stat_result]) -> bool:
    """Whether the entry at ``path`` is the very file whose ``os.fstat`` was ``written`` (``os.path.samestat``: not
    a link, not a file another process put there since): what a run may list as a file it wrote. A name
    listed before its file was in place named no file once the run was killed (SIGKILL) in between, and the next
    run took a file of the user's put at that name for its own and overwrote it."""
    try:
        return written is not None and os.path.samestat(os.lstat(path), written)
    except OSError:
        return False


def _written_paths(folder: Path, patterns: Sequence[str]) -> set:
    """The paths under ``folder`` of the names a command writes (``patterns``), the contents of folders included."""
    found = {p for pattern in patterns for p in folder.glob(pattern)}
    return found | {q for p in found if p.is_dir() and not p.is_symlink() for q in p.rglob("*")}


# the record of what a run of a command is writing into a folder (:func:`undone_on_failure`): a run killed part-way
# (SIGKILL, power) leaves it, and a later run takes the names it lists as a run's own (:func:`check_output_folder`)
WRITING = ".longshort_writing"


class _Record:
    """The names (relative, with ``/``) one :func:`undone_on_failure` block writes into ``folder``, kept on disk in
    ``folder/WRITING`` with those a killed run listed: each file once it is in place and is the one this block wrote
    (:func:`is_written_file`), each folder once this block made it, each temporary file once made."""

    def __init__(self, folder: Path, leftover: Sequence[str]):
        self.folder, self.leftover, self.names = folder, set(leftover), set()
        self.placed: Dict[str, tuple] = {}  # {absolute path: identity of the file this block put there}

    def put_here(self, path: Path) -> bool:
        """Whether ``path`` is a folder, or the very file this block put there (not another process's since)."""
        try:
            st = os.lstat(path)
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) or self.placed.get(os.path.abspath(path)) == _identity(st)

    def _relative(self, path: Path) -> Optional[Path]:
        try:
            return Path(os.path.abspath(path)).relative_to(os.path.abspath(self.folder))
        except ValueError:
            return None  # not in this folder

    def make_folders(self, path: Path) -> None:
        """Make the folders above ``path``, listing those in ``folder`` that this call made, once made."""
        rel = self._relative(path)
        if rel is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
        made = []
        for a in reversed(rel.parents[:-1] if rel is not None else ()):
            with contextlib.suppress(FileExistsError):
                (self.folder / a).mkdir()
                made.append(self.folder / a)
        self.claim(*made)
        Path(path).parent.mkdir(parents=True, exist_ok=True)

    def claim(self, *paths: Path) -> None:
        """List ``paths`` (in place, and this block's) as written."""
        new = {rel.as_posix() for rel in map(self._relative, paths) if rel is not None}
        if new - self.names:
            self.names |= new
            self.save(self.leftover | self.names)

    def placed_at(self, path: Path, written: os.stat_result) -> None:
        """``path`` listed when the file there is the one whose fstat was ``written`` (:func:`is_written_file`)."""
        if is_written_file(path, written):
            self.placed[os.path.abspath(path)] = _identity(written)
            self.claim(path)

    def save(self, names: set) -> None:
        token = _RECORDING.set(None)  # the record's own file is not one of the run's
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_names(self.folder / WRITING, names)
        finally:
            _RECORDING.reset(token)


_RECORDING: contextvars.ContextVar[Optional[_Record]] = contextvars.ContextVar("longshort_recording", default=None)


def _remove(paths: Iterable[Path]) -> None:
    """Remove ``paths`` (files, and folders once empty), deepest first; what is gone or cannot go is left."""
    for p in sorted(set(paths), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()


@contextlib.contextmanager
def undone_on_failure(folder: Union[str, Path], patterns: Sequence[str],
                      replaces: Iterable[str] = ()) -> Iterator[None]:
    """A block that writes a command's files (``patterns``: names or globs in ``folder``, folders among them), each
    through :func:`atomic_open`.

    - When it fails (a full disk, Ctrl-C), the files and folders it added are removed, and ``folder`` itself and
      the parents it made with it, so that the folder holds what it held before (an earlier run's files, which its
      own record still lists) and the rerun the failure asks for is not refused for this run's leftovers. Files it
      replaced stay (each written whole).
    - When it is killed (SIGKILL, no Python left to clean up), ``folder/WRITING`` lists what it wrote, each name
      recorded once its file was in place (:class:`_Record`): :func:`check_output_folder` takes those as an earlier
      run's, and a name it had not written yet is not among them (a file of the user's put there is refused).
    - When it succeeds, what an earlier run wrote and this one did not write again goes (``replaces``: the names an
      earlier run's own record lists; with those a killed run recorded), so that no stale figure stays beside the new
      report, and the record goes."""
    folder = Path(folder)
    made, before = missing_root(folder), _written_paths(folder, patterns)
    record = _Record(folder, read_names(folder / WRITING) or [])
    token = _RECORDING.set(record)
    try:
        yield
    except BaseException:
        # what it put there: another process's file written into the same folder meanwhile (a second report) stays
        _remove(p for p in _written_paths(folder, patterns) - before if record.put_here(p))
        with contextlib.suppress(OSError):
            record.save(record.leftover) if record.leftover else (folder / WRITING).unlink(missing_ok=True)
        remove_made_folders(folder, made)  # only when empty, its parents the block made with it
        raise
    finally:
        _RECORDING.reset(token)
    stale = {folder / n for n in record.leftover | set(replaces)} - {folder / n for n in record.names}
    _remove(p for p in stale if p in _written_paths(folder, patterns))
    (folder / WRITING).unlink(missing_ok=True)


def read_names(path: Union[str, Path]) -> Optional[List[str]]:
    """The names a command listed in the file at ``path`` as the ones it wrote (a JSON list of paths relative to the
    file's folder, with ``/``: the recipe's ``.longshort_files``, the BABILong generator's list), or None when the
    file is missing, unreadable or not such a list (then nothing there is known to be the command's)."""
    got = read_json(Path(path))
    return list(got) if isinstance(got, list) and all(isinstance(n, str) for n in got) else None


def write_names(path: Union[str, Path], names: Iterable[str]) -> None:
    """Write ``names`` (sorted, once each) as the list :func:`read_names` reads, atomically."""
    atomic_write_text(path, json.dumps(sorted(set(names)), indent=0) + "\n")


def start_names(path: Union[str, Path]) -> None:
    """Make the list :func:`read_names` reads, empty (``[]``), where there is none (its folder too): written whole in a
    temporary file and linked into place, so that a kill leaves the list or none, never an empty file that is no JSON;
    never replacing one another process has listed names in meanwhile (the link fails where ``path`` exists)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path):
        return
    tmp, f = new_temporary(path, "w", encoding="utf-8")
    try:
        with f:
            f.write("[]\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError as e:  # a file system without hard links (EPERM on vfat): made empty, read as no names
            if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP):
                raise
            os.close(flock_named(path, os.O_RDONLY)[0])
    finally:
        tmp.unlink()


FILE_SUFFIXES = (".json", ".jsonl", ".md", ".csv", ".png", ".pdf", ".txt", ".html")  # a new folder named so: a file


def check_output_folder(folder: Union[str, Path], option: str, writes: Sequence[str],
                        earlier: Callable[[Path], Union[bool, Collection[str]]]) -> None:
    """Refuse a ``folder`` (``option``) that is a file, holds a file where the command makes a folder (``1k`` of
    ``1k/qa1.jsonl``), or holds a name it writes (``writes``: names or globs relative to ``folder``, ``"*.png"``) that
    no earlier run of it wrote (nor a run killed part-way, :data:`WRITING`). ``earlier(folder)``: True when an
    earlier run wrote all of them, False when none, or the paths it wrote (relative, with ``/``)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{option}={str(folder)!r} is a file, not a folder: name a folder")
    if not folder.is_dir():
        if folder.suffix.lower() in FILE_SUFFIXES:  # `--out report.json` made a folder of that name
            raise ValueError(f"{option}={str(folder)!r} names a {folder.suffix} file, where the command wants the "
                             f"folder it writes its files in: name a folder, e.g. {folder.with_suffix('')}")
        return
    other = f"another {option}" if " " not in option else "another folder"  # a description of where is no noun
    for d in sorted({str(d) for w in writes for d in PurePosixPath(w).parents[:-1] if not glob.has_magic(str(d))}):
        if os.path.lexists(folder / d) and not (folder / d).is_dir():  # its mkdir failed late: '[Errno 17] ...'
            raise NotADirectoryError(f"{option}={str(folder)!r} holds {d!r}, a file where the command writes the "
                                     f"folder '{d}/': move it away, or choose {other}")
    # with the links to nothing of the names without wildcards, which glob does not find (a write replaced them)
    present = sorted({p.relative_to(folder).as_posix() for pattern in writes for p in folder.glob(pattern)}
                     | {w for w in writes if not glob.has_magic(w) and os.path.islink(folder / w)})
    if not present:
        return
    ours, killed = earlier(folder), set(read_names(folder / WRITING) or [])  # and what a killed run had written
    foreign = [] if ours is True else [n for n in present if n not in killed and (ours is False or n not in ours)]
    if foreign:
        raise FileExistsError(
            f"{option}={str(folder)!r} holds {', '.join(map(repr, foreign[:5]))}{' ...' if len(foreign) > 5 else ''}, "
            f"which no earlier run there wrote: refusing to overwrite; choose {other}, or move those away")


def plain_file_mode(*paths: Union[str, Path]) -> None:
    """Give each file of ``paths`` the mode a plain ``open`` gives a new file (``0o666`` under the umask).
    safetensors >= 0.8 writes through a temporary file of mode 0600 and renames it into place (safetensors#782,
    open), so the weights a run wrote were readable by their owner alone while the config beside them was not: on a
    shared cluster, another user's evaluation or vLLM found no weights."""
    mask = current_umask()
    for path in paths:
        os.chmod(path, 0o666 & ~mask)
