"""What a run says when a data record cannot be read mid-run (``DataRecordError``; ``DataSourceError``: the source
itself): the record's words, what was saved, and what to do. The recipe's step restores the data position the step
started from (:class:`~torchtune_longshort.training.data_setup.StepStart`), saves the last good step as on a signal,
then raises :func:`record_stop`'s error."""

from __future__ import annotations

from typing import Optional

from torchtune_longshort.data.file_kinds import whole_file
from torchtune_longshort.data.text_files import DataRecordError, DataSourceError
from torchtune_longshort.training.checkpointing import RESTART


def record_stop(e: DataRecordError, saved: Optional[str], output_dir,
                restart: str = RESTART) -> DataRecordError:
    """The error (``e``'s type) that ends the run at the record ``e`` names: with ``saved``, the last good step's
    folder (continue with resume=True once the record is mended or the source can be read again); None where no
    step had finished (nothing saved: ``restart``, the recipe's ``StepCheckpoints.restart``, which names a
    user's file in output_dir to move out before the overwrite). A whole file of another kind found
    mid-run (a source changed under the run: ``file_kinds.whole_file``) is told its own fix alone, not to skip it
    (skipping drops the whole file), as at the start of a run (``source_names.mend_or_skip``)."""
    whole = whole_file(str(e))  # a file of another kind (compressed, Parquet...): its own fix, as at the start
    skip = ("" if whole else " (or skip it: dataset.skip_bad_records=True)" if e.skippable else
            " (datasets' parser stops at it: dataset.skip_bad_records cannot skip it)")
    mend_it = "fix the file as said" if whole else "mend the record"
    source = isinstance(e, DataSourceError)
    if saved is None:
        first = "once the source can be read again" if source else f"{mend_it}{skip}"
        return type(e)(f"{e}. No step had finished: no checkpoint saved; {first}, then {restart} "
                       f"(output_dir={str(output_dir)!r} holds this run's start)")
    mend = "once the source can be read again," if source else f"{mend_it}{skip} and"
    return type(e)(f"{e}. The last good step is saved: {saved}; {mend} continue with resume=True")
