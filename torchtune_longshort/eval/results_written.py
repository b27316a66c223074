"""lm-eval's results files, checked as they are written: a run whose results could not be saved does not end as if
they had been.

lm-eval's ``EvaluationTracker`` catches every error of ``save_results_aggregated`` / ``save_results_samples`` (a
full disk, a folder it may not write), logs "Could not save results aggregated", and the run exits 0: hours of
scores are then only in the printed table, and a write cut off by a full disk leaves a JSON file that stops mid-way,
which a report would then read. :class:`SavedResults` watches both methods during a ``longshort-eval`` run: after
each it opens the file the tracker meant to write (its name is the tracker's ``date_id``), and a file missing or cut
off (removed: it is this run's, and unreadable) is named in the run's last line (exit status 2). lm-eval writes the
results file straight at its name; during the run it is written whole or not at all (:func:`_results_whole`), so a
kill part-way (SIGKILL, the out-of-memory killer) leaves no ``results_<date>.json`` cut off, which the report refused,
also once the run was evaluated again into the same ``--output_path``.

:func:`check_output_room` refuses, before lm-eval starts, an ``--output_path`` on a disk that is already full.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Callable, Iterator, List, Optional

from torchtune_longshort.disk_space import check_not_full, is_full, room_text
from torchtune_longshort.output_guard import atomic_write_text
from torchtune_longshort.plural import counted
from torchtune_longshort.refusals import Refusal


class ResultsNotWritten(Refusal, RuntimeError):
    """lm-eval ran, and could not write its results (one line, exit status 2)."""


def results_file(tracker) -> Path:
    """The aggregated results file ``tracker`` (lm-eval's ``EvaluationTracker``) writes, as its
    ``save_results_aggregated`` names it."""
    path = Path(tracker.output_path)
    if path.suffix == ".json":
        return path.with_name(f"{path.stem}_{tracker.date_id}.json")
    return path / str(tracker.general_config_tracker.model_name_sanitized) / f"results_{tracker.date_id}.json"


def samples_file(tracker, task_name: str) -> Path:
    """The samples file of ``task_name`` that ``tracker``'s ``save_results_samples`` writes."""
    path = Path(tracker.output_path)
    folder = path.parent if path.suffix == ".json" else path / str(tracker.general_config_tracker.model_name_sanitized)
    return folder / f"samples_{task_name}_{tracker.date_id}.jsonl"


@contextlib.contextmanager
def _results_whole(tracker) -> Iterator[None]:
    """While the context is open, lm-eval's ``Path.write_text`` of ``tracker``'s results file (:func:`results_file`,
    named once its ``date_id`` is drawn) goes through :func:`atomic_write_text`: a temporary file beside, then
    ``os.replace``; every other ``write_text`` is left as it is."""
    write_text = Path.write_text

    def write(path, data, *args, **kwargs):
        if tracker.output_path and getattr(tracker, "date_id", None) and Path(path) == results_file(tracker):
            atomic_write_text(path, data)  # lm-eval writes it as UTF-8, as this does
            return len(data)
        return write_text(path, data, *args, **kwargs)

    Path.write_text = write
    try:
        yield
    finally:
        Path.write_text = write_text


def _read_json(path: Path) -> None:
    json.loads(path.read_text(encoding="utf-8"))


def _jsonl_reader(rows: int) -> Callable[[Path], None]:
    """A reader that accepts a JSONL file of ``rows`` JSON lines (a file the full disk left empty, or cut at a line's
    end, has fewer)."""
    def read(path: Path) -> None:
        with open(path, encoding="utf-8") as f:
            found = sum(1 for line in f if line.strip() and json.loads(line) is not None)
        if found != rows:
            raise ValueError(f"{found} of {rows} samples")
    return read


class SavedResults:
    """The files of a run that lm-eval failed to write (see the module doc)."""

    def __init__(self) -> None:
        self.failed: List[str] = []
        self.results: List[Path] = []  # the results files written whole, in order (named by the closing line)

    def check(self, path: Path, read: Callable[[Path], None]) -> bool:
        """Note ``path`` when it is missing or cannot be read whole (then removed: it is this run's and cut off);
        whether it was written whole."""
        if not path.is_file():
            self.failed.append(f"{path} (not written)")
            return False
        try:
            read(path)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                path.unlink()
            self.failed.append(f"{path} (cut off; removed)")
            return False
        return True

    @contextlib.contextmanager
    def watching(self) -> Iterator["SavedResults"]:
        """Check each file lm-eval's ``EvaluationTracker`` saves while the context is open, each results file with
        the run's record in it (:func:`~torchtune_longshort.eval.run_record.add_run_record`)."""
        # deferred: lm_eval, torch (imported by longshort-eval's run, not by this module's readers)
        from lm_eval.loggers.evaluation_tracker import EvaluationTracker

        from torchtune_longshort.eval.run_record import add_run_record

        aggregated, samples = EvaluationTracker.save_results_aggregated, EvaluationTracker.save_results_samples

        def save_aggregated(tracker, *args, **kwargs):
            add_run_record(args[0] if args else kwargs.get("results"))  # provenance, for every model
            with _results_whole(tracker):
                aggregated(tracker, *args, **kwargs)
            if tracker.output_path and self.check(results_file(tracker), _read_json):
                self.results.append(results_file(tracker))

        def save_samples(tracker, task_name, *args, **kwargs):
            samples(tracker, task_name, *args, **kwargs)
            rows = args[0] if args else kwargs.get("samples", [])
            if tracker.output_path:
                self.check(samples_file(tracker, task_name), _jsonl_reader(len(rows)))

        cls = EvaluationTracker
        cls.save_results_aggregated, cls.save_results_samples = save_aggregated, save_samples
        try:
            yield self
        finally:
            cls.save_results_aggregated, cls.save_results_samples = aggregated, samples

    def raise_if_failed(self) -> None:
        """:class:`ResultsNotWritten` with :meth:`problem`'s line when a file failed."""
        line = self.problem()
        if line is not None:
            raise ResultsNotWritten(line)

    def problem(self) -> Optional[str]:
        """The run's last line when a file failed (None when all were written)."""
        if not self.failed:
            return None
        folder = Path(self.failed[0].split(" (", 1)[0]).parent
        full = is_full(folder)
        why = (f"the disk is full ({room_text(folder)})" if full else
               f"{room_text(folder)}; lm-eval's warning above (\"Could not save ...\") says why")
        return (f"lm-eval could not write {counted(len(self.failed), 'results file')}: {'; '.join(self.failed[:3])}"
                f"{' ...' if len(self.failed) > 3 else ''}: {why}. Its scores are in the table above; "
                f"{'free space there' if full else 'mend that'} (or pass another --output_path) and run again")


def check_output_room(output_path: Optional[str]) -> None:
    """Refuse an ``--output_path`` whose disk is full: lm-eval would run every task and then not write the results."""
    if output_path:
        check_not_full(output_path, "--output_path", "its results (lm-eval would run every task first)")
