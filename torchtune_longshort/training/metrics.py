"""Run-time metrics for the recipe: peak memory on any device, and a JSONL metric log that tests and plots read."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

import torch


def peak_memory_gib(device: torch.device) -> float:
    """Peak memory in GiB: allocated tensor memory on CUDA (``max_memory_allocated``), else the process's peak
    resident set size (CPU runs; ``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (2**30 if sys.platform == "darwin" else 2**20)


class JsonlMetricLogger:
    """Append one JSON object per logged step to ``path`` (exact float reprs, so runs can be compared bit-wise).

    A fresh file starts with a ``{"step": 0, "provenance": {...}}`` row (``torchtune_longshort.provenance``;
    ``device``: the training device); step rows follow. On resume the lines of steps after the resumed step are
    dropped first, so the file always holds one trajectory.
    """

    def __init__(self, path: Union[str, Path], resume_step: int = 0, device: Optional[Union[str, torch.device]] = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step and self.path.exists():
            lines = self.path.read_text().splitlines()
            keep = []
            for i, line in enumerate(lines):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    if i == len(lines) - 1:  # a kill while appending tears only the last line: drop it
                        continue
                    raise ValueError(f"{self.path}:{i + 1}: not a JSON line ({line[:80]!r})") from None
                if row.get("step", 0) <= resume_step:
                    keep.append(line)
            self.path.write_text("".join(l + "\n" for l in keep))
            return
        if self.path.exists():
            self.path.unlink()
        from torchtune_longshort.provenance import provenance

        dev = None if device is None else str(torch.device(device).type)
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": 0, "provenance": provenance(device=dev)}) + "\n")

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        row: Dict[str, Any] = {"step": step}
        for k, v in metrics.items():
            row[k] = v.item() if isinstance(v, torch.Tensor) else v
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
