"""Run-time metrics for the recipe: peak memory on any device, a JSONL metric log that tests and plots read, and
the run log that feeds both with the progress bar."""

from __future__ import annotations

import contextlib
import json
import logging
import resource
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from torchtune_longshort.disk_space import naming
from torchtune_longshort.output_guard import atomic_write_text
from torchtune_longshort.plural import counted
from torchtune_longshort.provenance import provenance
from torchtune_longshort.training.written_files import METRICS_FILE


def where_logged(output_dir: Union[str, Path], log_dir: Optional[str]) -> str:
    """The run's closing line naming its metrics: ``metrics.jsonl`` and the metric logger's ``log_dir`` where the
    logger made that folder; a logger that writes none (torchtune's ``StdoutLogger`` takes a ``log_dir`` a config
    carried over and ignores it) is named as such, not by a folder that does not exist."""
    logs = log_dir if log_dir and Path(log_dir).is_dir() else "the metric logger"
    return f"[longshort] metrics:    {Path(output_dir) / METRICS_FILE} (and {logs})"


def peak_memory_gib(device: torch.device) -> float:
    """Peak memory in GiB: allocated tensor memory on CUDA (``max_memory_allocated``), else the process's peak
    resident set size (CPU runs; ``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (2**30 if sys.platform == "darwin" else 2**20)


def metric_lines(path: Union[str, Path]) -> List[Tuple[str, Dict[str, Any]]]:
    """``(line, row)`` of each row of a ``metrics.jsonl``, in file order: a last line torn by a kill while
    appending is dropped (as a resume drops it); any other line that is not JSON is refused naming it, one with a
    byte that is not UTF-8 too (json.dumps writes ASCII)."""
    lines = Path(path).read_bytes().decode("utf-8", errors="replace").splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append((line, json.loads(line)))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise ValueError(f"{path}:{i + 1}: not a JSON line ({line[:80]!r}): mend that line or delete "
                                 "it (each line is one logged step's JSON)") from None
    return out


def resumed_lines(path: Union[str, Path], resume_step: int) -> Optional[List[str]]:
    """The lines of the ``metrics.jsonl`` at ``path`` that a run resumed at ``resume_step`` keeps (its rows up to
    that step), read and checked (:func:`metric_lines`) before the run writes anything; None: a new run, or no file
    to resume (a fresh one is started)."""
    # a symbolic link there is a user's: read, then replaced by a file (its target's other lines copied in), or
    # written through when dangling (a file made in the user's folder)
    if not resume_step or not (Path(path).exists() or Path(path).is_symlink()):
        return None
    if Path(path).is_symlink() or not Path(path).is_file():  # a folder: '[Errno 21] Is a directory: ...', no fix
        what = ("a symbolic link" if Path(path).is_symlink() else "a folder" if Path(path).is_dir() else
                "not a regular file")
        raise ValueError(f"resume=True: {path} is {what}, where the recipe writes the run's metrics (a file, one JSON "
                         f"line a logged step): move it out of {Path(path).parent}, then resume (a fresh "
                         f"{Path(path).name} is started)")
    return [line for line, row in metric_lines(path) if row.get("step", 0) <= resume_step]


class JsonlMetricLogger:
    """Append one JSON object per logged step to ``path`` (exact float reprs, so runs can be compared bit-wise).

    A fresh file starts with a ``{"step": 0, "provenance": {...}, "seed": s}`` row
    (``torchtune_longshort.provenance``; ``device``: the training device; ``seed``: the run's seed, a ``seed: null``
    run's drawn one); step rows follow. On resume the lines of steps after the resumed step are dropped first, so the
    file always holds one trajectory.
    """

    def __init__(self, path: Union[str, Path], resume_step: int = 0, device: Optional[Union[str, torch.device]] = None,
                 seed: Optional[int] = None, keep: Optional[List[str]] = None):
        """``keep``: :func:`resumed_lines` of ``path`` at ``resume_step``, read by the caller before its first write
        (read here when not given)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keep = resumed_lines(self.path, resume_step) if keep is None else keep
        if keep is not None:
            atomic_write_text(self.path, "".join(l + "\n" for l in keep))  # a kill here keeps the old lines
            return
        if self.path.exists():
            self.path.unlink()

        dev = None if device is None else str(torch.device(device).type)
        with open(self.path, "a") as f:
            header = {"step": 0, "provenance": provenance(device=dev), **({} if seed is None else {"seed": seed})}
            f.write(json.dumps(header) + "\n")

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        row: Dict[str, Any] = {"step": step}
        for k, v in metrics.items():
            row[k] = v.item() if isinstance(v, torch.Tensor) else v
        with naming(self.path), open(self.path, "a") as f:  # a full disk's error (at the flush) names no file
            f.write(json.dumps(row) + "\n")


def _log_lines_above_the_bar() -> contextlib.AbstractContextManager:
    """While the progress bar is open, the console handlers of torchtune's logger (``utils.get_logger``: the
    recipe's lines, e.g. "Checkpoint for step N written ...") and of the root logger, where they have one, write
    through ``tqdm.write``, each line above the bar; before, a line logged mid-run was printed after the bar's text
    on the bar's own line."""
    from torchtune.utils import get_logger
    from tqdm.contrib.logging import logging_redirect_tqdm

    def on_console(logger: logging.Logger) -> bool:  # tqdm's redirect adds its handler to a logger without one
        return any(isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in (sys.stdout, sys.stderr)
                   for h in logger.handlers)

    redirect = logging_redirect_tqdm(loggers=[lg for lg in (logging.root, get_logger()) if on_console(lg)])
    redirect.__enter__()
    return redirect


class RunLog:
    """What a training run reports on rank 0: the config's metric logger, ``metrics.jsonl``, a progress bar and
    the throughput since the last logged step. On other ranks every call is a no-op."""

    def __init__(self, metric_logger, jsonl: Optional[JsonlMetricLogger], enabled: bool) -> None:
        self.metric_logger, self.jsonl, self.enabled = metric_logger, jsonl, enabled
        self.pbar = None
        self._redirect: Optional[contextlib.AbstractContextManager] = None
        self._t0, self.tokens = time.perf_counter(), 0
        self.records_skipped = 0

    def start(self, total_steps: int, step: int, records_skipped: int = 0) -> None:
        """Open the progress bar at ``step`` of ``total_steps`` and start the throughput clock; ``records_skipped``:
        the unreadable records the run skipped before ``step`` (a resumed run's)."""
        self.records_skipped = records_skipped
        if self.enabled:
            from tqdm import tqdm

            self.pbar = tqdm(total=total_steps, initial=step, desc="longshort", dynamic_ncols=True)
            self._redirect = _log_lines_above_the_bar()
        self._t0, self.tokens = time.perf_counter(), 0

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        if self.enabled:
            log_file = getattr(self.metric_logger, "path_to_log_file", None)  # DiskLogger's; a full disk names none
            with naming(log_file()) if callable(log_file) else contextlib.nullcontext():
                self.metric_logger.log_dict(dict(metrics), step=step)
            self.jsonl.log(step, metrics)

    def log_validation(self, step: int, metrics: Mapping[str, float]) -> None:
        """Log a validation's ``val_ce`` / ``val_ppl`` and print them (above the progress bar), as torchtune's
        recipes print their evaluation."""
        self.log(step, metrics)
        if self.enabled:
            from tqdm import tqdm

            tqdm.write(f"step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))

    def note(self, step: int, message: str) -> None:
        """Print ``step <step>: <message>`` above the progress bar (rank 0)."""
        if self.enabled:
            from tqdm import tqdm

            tqdm.write(f"step {step}: {message}")

    def note_skipped(self, step: int, stream) -> None:
        """Print the unreadable records a :class:`~torchtune_longshort.data.dual_window.PackedTokenStream` skipped in
        ``step`` (``dataset.skip_bad_records=True``), above the progress bar; from then on each logged step carries
        ``records_skipped``, the run's count."""
        messages, total = stream.new_skips(), stream.records_skipped
        new, self.records_skipped = total - self.records_skipped, total
        if new and self.enabled:
            from tqdm import tqdm

            tqdm.write(f"step {step}: skipped {counted(new, 'unreadable record')} (dataset.skip_bad_records=True; "
                       f"{total} in this run): {'; '.join(messages[:3])}{'; ...' if new > 3 else ''}")

    def log_step(self, step: int, sums: Mapping[str, float], lr: float, norms: Mapping[str, float], device,
                 world_size: int = 1) -> None:
        """The step's averaged loss terms with learning rate, throughput, peak memory and gradient norms
        (``grad_norm``, and ``rope_grad_norm`` where the RoPE has trainable parameters), and ``records_skipped``
        once the run has skipped one. Throughput: ``tokens_per_second`` (all ``world_size`` processes) and
        ``tokens_per_second_per_gpu`` (that over ``world_size``: the name and meaning torchtune's recipes log, so a
        script that plots their logs reads ours)."""
        dt = time.perf_counter() - self._t0
        tps = self.tokens / dt if dt > 0 else 0.0
        metrics = {
            **sums,
            "lr": lr,
            "tokens_per_second": tps,
            "tokens_per_second_per_gpu": tps / world_size,
            "peak_memory_gib": peak_memory_gib(device),
            **norms,
        }
        if self.records_skipped:
            metrics["records_skipped"] = self.records_skipped
        self.log(step, metrics)
        if self.pbar is not None:
            # e: the step's mean over its micro-batches (metrics.jsonl's): 37.5 not 37, 37.25 not 37.2 (4 of them)
            self.pbar.set_postfix(loss=f"{sums['loss']:.4f}", mis=f"{sums['misalignment']:.3g}",
                                  e=f"{sums['e']:.2f}".rstrip("0").rstrip("."))
        self._t0, self.tokens = time.perf_counter(), 0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A block (validation, a checkpoint) whose time the next logged throughput leaves out."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._t0 += time.perf_counter() - start

    def advance(self) -> None:
        if self.pbar is not None:
            self.pbar.update(1)

    def close(self) -> None:
        """Close the progress bar (the metric logger stays open until :meth:`close_loggers`)."""
        if self._redirect is not None:
            self._redirect.__exit__(None, None, None)
            self._redirect = None
        if self.pbar is not None:
            self.pbar.close()
            self.pbar = None

    def close_loggers(self) -> None:
        if self.metric_logger is not None:
            self.metric_logger.close()

    @staticmethod
    def start_logger(metric_logger_cfg):
        """The config's metric logger, instantiated (rank 0): the recipe starts it before it clears an earlier run
        (:meth:`~torchtune_longshort.training.output_dir.OutputDirLock.clear_earlier_run`), one that cannot start
        (wandb without a login) refusing the run with that run whole."""
        from torchtune import config

        return config.instantiate(metric_logger_cfg)

    @classmethod
    def open(cls, metric_logger, cfg, output_dir: Path, step: int, device, seed: Optional[int] = None,
             keep: Optional[List[str]] = None) -> "RunLog":
        """Rank 0 (``metric_logger``: the started one, :meth:`start_logger`): log the config to it and open
        ``output_dir/metrics.jsonl`` resumed at ``step`` (a fresh one's first row records ``seed``; ``keep``: its
        :func:`resumed_lines`, read before the logger started); other ranks (``None``): a log that does nothing."""
        if metric_logger is None:
            return cls(None, None, enabled=False)
        metric_logger.log_config(cfg)
        jsonl = JsonlMetricLogger(Path(output_dir) / METRICS_FILE, resume_step=step, device=device, seed=seed,
                                  keep=keep)
        return cls(metric_logger, jsonl, enabled=True)


def mean_over_ranks(values: Dict[str, float], keys, device, world_size: int, extra: Sequence[float] = ()
                    ) -> List[float]:
    """Replace ``values[k]`` for ``k`` in ``keys`` by its mean over all ranks (each rank holds its batch slice) and
    return ``extra`` summed over ranks: one all-reduce of one small tensor and one device read for both."""
    n = len(keys)
    t = torch.tensor([values[k] for k in keys] + list(extra), device=device)
    torch.distributed.all_reduce(t)
    t[:n] /= world_size
    out = t.tolist()
    values.update(zip(keys, out[:n]))
    return out[n:]
