"""One-line refusals at every entry point (the recipe, ``longshort-eval``, ``longshort-eval-report``,
``longshort-misalignment``, ``longshort-cp``, ``longshort-validate``, the study and the synthetic CLI).

Bad input (a config, data, command-line arguments, a checkpoint folder, a device this machine lacks) is refused by
the check that finds it with a message naming the field or file and the fix. At an entry point that message is the
whole output: one line, ``<program>: error: <message>``, on stderr, exit status 2, no traceback (a traceback makes a
refusal read as a crash). ``LONGSHORT_TRACEBACK=1`` shows the traceback as well, for a report of a bug.

What counts as a refusal (:data:`REFUSED`): ``ValueError`` (the project's checks raise it or a subclass),
the ``OSError`` kinds of a missing, existing or forbidden path, and any :class:`Refusal` (a config key error, an output
folder another run holds). A write that found its disk full (:func:`~torchtune_longshort.disk_space.is_out_of_space`:
every writer says it differently) is told in one line the same way. Every other exception keeps its traceback.

Under torchrun (``tune run --nproc_per_node N``) every worker runs the same checks. The refusal is printed once, by
the first worker to refuse (it claims a file in the agent's folder of the attempt, which the agent removes; rank 0
was the printer before, and a rank 0 slower than the others was stopped by the agent before it printed), and every
refusing worker writes it to the error file torchrun's agent reads (``TORCHELASTIC_ERROR_FILE``,
the JSON ``torch.distributed.elastic``'s ``@record`` writes), so the agent's failure report names the refusal
under each rank that refused instead of "To enable traceback see ...", a worker that alone refused among them.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import functools
import json
import locale
import os
import re
import select
import signal
import sys
import threading
import time
from typing import Callable, Iterator, NoReturn, Optional, TypeVar

from torchtune_longshort.disk_space import is_out_of_space, out_of_space_line
from torchtune_longshort.launcher import launched_rank, torchrun_worker
from torchtune_longshort.output_guard import stops_held
from torchtune_longshort.started_as import running_module, starting_command

# How a training run that saved no step starts again, in every line that says so (the recipe's stops, a resume's
# refusals, a LoRA step's lost adapter files: after "mend it, then", "train anew:"): "the run", not "it", which read
# as the file or folder the line had just named
RESTART = "start the run again with overwrite_output_dir=True"

TRACEBACK_ENV = "LONGSHORT_TRACEBACK"
EXIT_REFUSED = 2
# torchrun's agent gives each worker a file to report its failure in
ELASTIC_ERROR_FILE = "TORCHELASTIC_ERROR_FILE"

T = TypeVar("T")


class Refusal(Exception):
    """Mixed into an exception class that is bad input although not a ``ValueError`` (a ``KeyError`` of a config
    key, a ``RuntimeError`` of a folder in use)."""


REFUSED = (Refusal, ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError,
           PermissionError)


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line (a ``KeyError``'s without the quotes ``str`` adds)."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return " ".join(str(text).split()) or type(error).__name__


# A library's message is kept whole (what is wrong is often at its end: the file tiktoken could not parse, the path
# torch's mmap refusal names); only a huge one (a dump of a file's bytes) is cut, saying so.
LIBRARY_WORDS_CAP = 1000


def capped(words: str) -> str:
    """A library's ``words`` as a refusal quotes them: whole up to :data:`LIBRARY_WORDS_CAP` characters, else cut
    there, saying so."""
    if len(words) <= LIBRARY_WORDS_CAP:
        return words
    return f"{words[:LIBRARY_WORDS_CAP]} ... (cut here: {len(words)} characters in all)"


def show_traceback() -> bool:
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() not in ("", "0", "false", "no")


def elastic_error_file() -> str:
    """The file torchrun's agent reads this worker's failure from ("" outside torchrun)."""
    return os.environ.get(ELASTIC_ERROR_FILE, "") if torchrun_worker() else ""


def record_for_torchrun(path: str, line: str) -> None:
    """Write ``line`` where torchrun's agent looks for this worker's failure, in the format of
    ``torch.distributed.elastic.multiprocessing.errors``' ``ErrorHandler.record_exception`` (its report shows
    ``py_callstack``). A file that cannot be written leaves the report as torchrun makes it. Written whole: the agent
    stops the other workers when the first fails, and a worker stopped between ``open`` and the write left the file
    empty, which the agent's report answered with a ``JSONDecodeError`` traceback; a stop signal now waits for the
    file, which appears by rename."""
    data = {"message": {"message": line, "extraInfo": {"py_callstack": line, "timestamp": str(int(time.time()))}}}
    tmp = f"{path}.{os.getpid()}.tmp"
    with stops_held():
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _attempt_file(error_file: str, name: str) -> str:
    """``name`` in the torchrun attempt's folder (``<attempt>/<local rank>/error.json``'s grandparent, the agent's,
    removed with it)."""
    return os.path.join(os.path.dirname(os.path.dirname(error_file)), name)


# the files the first worker of a torchrun attempt to refuse, or to be stopped, creates in the attempt's folder
REFUSED_MARK, STOPPED_MARK = "refused", "stopped"


def first_in_attempt(error_file: str, what: str) -> bool:
    """Whether this worker is the first of its torchrun attempt to do ``what`` (:data:`REFUSED_MARK`,
    :data:`STOPPED_MARK`): it creates that file in the attempt's folder. A folder that cannot be written falls back to
    rank 0."""
    try:
        os.close(os.open(_attempt_file(error_file, what), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False
    except OSError:
        return launched_rank() == 0


def refusal(prog: str, message: str) -> int:
    """Print ``<prog>: error: <message>`` (one line); the status to exit with (2), for a ``main`` that returns it.
    Under torchrun the line goes to the agent's error file too, and only the first worker to refuse prints it."""
    line = f"{prog}: error: {' '.join(message.split())}"
    error_file = elastic_error_file()
    if error_file:
        record_for_torchrun(error_file, line)
    if not error_file or first_in_attempt(error_file, REFUSED_MARK):
        print(line, file=sys.stderr, flush=True)
    return EXIT_REFUSED


def refuse(prog: str, message: str) -> NoReturn:
    """Print ``<prog>: error: <message>`` (one line) and exit with status 2."""
    sys.exit(refusal(prog, message))


def fault_line(error: BaseException) -> Optional[str]:
    """The one line an entry point ends with for ``error``: a refusal's (:data:`REFUSED`) message, an out-of-space
    error's (:mod:`~torchtune_longshort.disk_space`: the file and its disk's room);
    None for any other error, and for every error when ``LONGSHORT_TRACEBACK`` is set (it keeps its traceback)."""
    if show_traceback():
        return None
    if isinstance(error, REFUSED):  # its own message first (the recipe's OutOfSpace names the checkpoint that stands)
        return one_line(error) + locale_codec_fix(error)
    return out_of_space_line(error) if is_out_of_space(error) else None


def locale_codec_fix(error: BaseException) -> str:
    """What to add to ``error``'s line when it is a ``UnicodeError`` of the locale's own codec while Python's UTF-8
    mode is off (``LC_ALL=C`` with ``PYTHONUTF8=0``): text read or written without naming its encoding (torch's
    inductor reads its templates so on import), whose fix is the environment's, not the input's ("" otherwise:
    a data file that is not UTF-8 names its own fix). The line said only "'ascii' codec can't decode byte 0xe2"."""
    if not isinstance(error, UnicodeError) or sys.flags.utf8_mode or not getattr(error, "encoding", None):
        return ""
    try:  # a codec Python does not know (a UnicodeError built with any name) is no locale's: its own line stays
        codec, theirs = (codecs.lookup(name).name for name in (locale.getpreferredencoding(False), error.encoding))
    except LookupError:
        return ""
    if codec == "utf-8" or theirs != codec:
        return ""
    return (f" (Python runs with this locale's {codec!r} text encoding and its UTF-8 mode off: run with PYTHONUTF8=1, "
            "or in a UTF-8 locale such as LC_ALL=C.UTF-8)")


def refusing(prog: str, run: Callable[[], T]) -> T:
    """``run()``; an error it raises that :func:`fault_line` tells in one line (a refusal, a full disk) ends the
    process as :func:`refuse` does; any other keeps its traceback."""
    try:
        return run()
    except Exception as e:
        line = fault_line(e)
        if line is None:
            raise
        refuse(prog, line)


class Stopped(KeyboardInterrupt):
    """A stop signal (SIGINT, SIGTERM) raised in the main thread as Ctrl-C raises ``KeyboardInterrupt``, so that the
    code that handles Ctrl-C handles it; ``signum``: the signal, its name the message."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stoppable(prog: str, run: Callable[[], T], kept: str) -> T:
    """``run()``, stopped by Ctrl-C or SIGTERM (a scheduler's) in one line instead of lm-eval's traceback (SIGTERM
    ended silently): ``<prog>: interrupted (SIGINT): <kept>`` on stderr, exit status 128 + the signal (130, 143, as
    the recipe and the study exit). ``kept``: what the interrupted command leaves, and how to go on. Under torchrun
    the line goes to the agent's error file too. SIGTERM's handler is installed from the main thread only, and put
    back afterwards. Under torchrun only the first worker stopped prints it, and none when another worker refused.
    """

    def stop(signum, frame):
        raise Stopped(signum)

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if main_thread else None
    try:
        return run()
    except KeyboardInterrupt as e:
        stopped(prog, getattr(e, "signum", signal.SIGINT), kept)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def stopped_while_importing(module: str, prog: Optional[str] = None) -> Iterator[None]:
    """The block, a command's imports (torch, torchtune: seconds), stopped by Ctrl-C ends the command as
    :func:`stopped` does (one line naming the command: nothing was written yet; exit 130), or quietly with exit 130
    when ``prog`` is None and ``module`` runs as ``__main__`` (a module run as a script that names no command),
    instead of a KeyboardInterrupt traceback and exit -2. Only where this process runs a command: ``module`` (its
    ``__name__``) is ``"__main__"`` (``prog`` named; ``python -m <module>`` as typed where it was started so), or the
    process is still starting as ``python -m <module>`` or as one of the project's console scripts
    (:func:`~torchtune_longshort.started_as.starting_command`, named as typed, whichever package's imports it
    stopped); an import by other code keeps the interrupt."""
    try:
        yield
    except KeyboardInterrupt as e:
        command = (prog and (running_module() or prog)) if module == "__main__" else starting_command()
        if module != "__main__" and command is None:
            raise
        if command is None:
            sys.exit(128 + signal.SIGINT)
        stopped(command, getattr(e, "signum", signal.SIGINT), "stopped while it started (its imports), before "
                "anything was written; run it again")


def stopped(prog: str, signum: int, kept: str) -> NoReturn:
    """End a command stopped by ``signum`` as :func:`stoppable` does: ``<prog>: interrupted (<signal>): <kept>`` on
    stderr (under torchrun in the agent's error file too, and printed by the first worker stopped only), exit status
    128 + the signal."""
    _close_progress_bars()
    line = f"{prog}: interrupted ({signal.Signals(signum).name}): {kept}"
    error_file = elastic_error_file()
    if error_file:  # torchrun's report names it: a worker its agent stopped when another had failed
        with contextlib.suppress(KeyboardInterrupt):  # a stop during the write waits for it, and is this one
            record_for_torchrun(error_file, line)
    # under torchrun printed once, by the first worker stopped, and not at all when the agent stopped the
    # workers because one refused (that refusal is the line to read)
    if not error_file or (not os.path.exists(_attempt_file(error_file, REFUSED_MARK))
                          and first_in_attempt(error_file, STOPPED_MARK)):
        print(line, file=sys.stderr, flush=True)
    sys.exit(128 + signum)


def _close_progress_bars() -> None:
    """Close the tqdm bars an interrupted command left open, so that their last redraw (at exit, otherwise) comes
    before the command's last line, not after it."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()


def _stdout_closed() -> bool:
    """Whether the reader of this process's stdout is gone (``longshort-cp --list | head -2``): the pipe's write end
    then polls as an error. False where stdout is no file descriptor (a test's capture)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLERR)
        return bool(poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _escape_what_stdout_cannot_encode() -> None:
    """A stdout whose encoding is not UTF-8 (``PYTHONIOENCODING=ascii``, a latin-1 or C locale with Python's UTF-8
    mode off) writes a character it cannot encode as a ``\\u2014`` escape, as Python's stderr always does, instead of
    raising ``UnicodeEncodeError``: a report's dash or lm-eval's table arrow ended the command after its work was
    done (exit 1, or longshort-eval's exit 2), its last lines unprinted."""
    import codecs

    out = sys.stdout
    encoding, errors = getattr(out, "encoding", None), getattr(out, "errors", None)
    if encoding and errors in ("strict", "surrogateescape") and codecs.lookup(encoding).name != "utf-8":
        with contextlib.suppress(AttributeError, ValueError):  # not a TextIOWrapper (a test's capture): left as is
            out.reconfigure(errors="backslashreplace")


def quiet_when_the_reader_leaves(main: Callable[..., T]) -> Callable[..., T]:
    """A console entry point that ends as ``cat`` does when its output's reader closes the pipe (``| head``): no
    output, exit status 141 (128 + SIGPIPE), instead of Python's ``BrokenPipeError`` traceback (or its "Exception
    ignored ... BrokenPipeError" at exit, where the last write only fails when stdout is flushed). A
    ``BrokenPipeError`` of another pipe (a child process's, a socket's) keeps its traceback. A character its stdout
    cannot encode is written escaped (:func:`_escape_what_stdout_cannot_encode`)."""

    @functools.wraps(main)
    def entry(*args, **kwargs):
        _escape_what_stdout_cannot_encode()
        try:
            try:
                return main(*args, **kwargs)
            finally:
                sys.stdout.flush()
        except BrokenPipeError:
            if not _stdout_closed():
                raise
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's own flush writes nowhere
            sys.exit(128 + signal.SIGPIPE)

    return entry


def utf8_text(value: str) -> str:
    """An ``argparse`` type for text a command writes into a file (a report's ``--note``): refused when it holds
    bytes that are not UTF-8 (Python keeps them as surrogates, which no UTF-8 file can take: the write failed after
    the whole run)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("not valid UTF-8 text (bytes the terminal's encoding could not decode); "
                                         "give it in UTF-8") from None
    return value


def user_path(value: str) -> str:
    """An ``argparse`` type for a path: ``~`` expanded, as the shell does for ``--out ~/x`` but not for ``--out=~/x``
    (a folder named ``~`` was made in the working directory). An empty value (``--out ""``, ``--out=$UNSET``) is
    refused: it named the working directory, or read as the flag left out (a whole run whose result went nowhere)."""
    if not value.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is an empty path: give a file or folder (an unset shell "
                                         "variable gives an empty one)")
    return os.path.expanduser(value)


def plain_markup(text: str) -> str:
    """``text`` (a docstring) as ``--help`` prints it: reST's ``x`` as `x`, and a cross-reference
    :mod:`pkg.mod` / :func:`~pkg.mod.f` as the name Sphinx shows (`pkg.mod`, `f`)."""
    def name(match):
        target = match.group(1).lstrip(".")
        return f"`{target.rsplit('.', 1)[-1] if target.startswith('~') else target}`"

    text = re.sub(r":(?:mod|func|class|meth|attr|data|obj|exc):`([^`]+)`", name, text)
    return text.replace("``", "`")


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line (argparse's own print the usage above them).
    ``examples``: command lines that ``--help`` prints last, one a line, as lm-eval's and ``tune``'s help do."""

    def __init__(self, *args, examples=(), **kwargs):
        if examples:
            kwargs.setdefault("epilog", "examples:\n" + "\n".join(f"  {line}" for line in examples))
            kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        if kwargs.get("description"):  # a module's docstring, read at a terminal
            kwargs["description"] = plain_markup(kwargs["description"])
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        refuse(self.prog, message)
