"""The disk filling while the recipe appends a step's row to one of its logs: the run's last line names that file
(``<output_dir>/metrics.jsonl``, the DiskLogger's ``log_<t>.txt``), not "the run's logs". A full disk is simulated:
the file's write raises the OSError a full tmpfs gives at the flush, ENOSPC naming no file (walked on a 20 MiB
tmpfs filled mid-run)."""

from __future__ import annotations

import builtins
import errno
from types import SimpleNamespace

import pytest

from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
from torchtune_longshort.training import metrics as metrics_mod
from torchtune_longshort.training.checkpointing import StepCheckpoints
from torchtune_longshort.training.metrics import JsonlMetricLogger, RunLog
from torchtune_longshort.training.out_of_space import OutOfSpace


class _FullFile:
    """An open file on a full disk: the write is buffered, the flush finds no room (the OSError names no file)."""

    def __init__(self, *a, **kw):
        pass

    def write(self, text):
        return len(text)

    def flush(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self):
        self.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _DiskLogger:  # torchtune's DiskLogger's calls, its file on the full disk
    def __init__(self, path):
        self.path = path

    def path_to_log_file(self):
        return self.path

    def log_dict(self, payload, step):
        _FullFile().flush()

    def close(self):
        pass


class _QuietLogger:
    def log_dict(self, payload, step):
        pass

    def close(self):
        pass


def _last_line(tmp_path, run_log) -> str:
    def loop():
        run_log.log(3, {"loss": 1.0})

    stub = SimpleNamespace(_train_loop=loop, _run_log=run_log, global_step=3, ckpts=StepCheckpoints(tmp_path),
                           _checkpoint_bytes=None, _saved_step=None, max_steps=3)
    with pytest.raises(OutOfSpace) as e:
        LongShortFinetuneRecipe._train(stub)
    return str(e.value)


def test_a_full_disk_appending_metrics_jsonl_names_it(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    jsonl = JsonlMetricLogger(path)
    monkeypatch.setattr(metrics_mod, "open", _FullFile, raising=False)
    line = _last_line(tmp_path, RunLog(_QuietLogger(), jsonl, enabled=True))
    assert line.startswith(f"no space left on the disk writing {path} after step 3 ("), line
    assert "[Errno 28] No space left on device" in line, line
    assert builtins.open is not _FullFile


def test_a_full_disk_writing_the_disk_logger_s_file_names_it(tmp_path):
    log_file = tmp_path / "logs" / "log_1.txt"
    line = _last_line(tmp_path, RunLog(_DiskLogger(log_file), JsonlMetricLogger(tmp_path / "metrics.jsonl"),
                                       enabled=True))
    assert line.startswith(f"no space left on the disk writing {log_file} after step 3 ("), line
