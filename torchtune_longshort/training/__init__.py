"""Helpers for the long-short recipe: atomic step checkpoints and resume, output-folder rules, run-time metrics,
and the tiny-run bootstrap (tokenizer trained on the spot). The checkpoint folder's format itself is owned by
``torchtune_longshort.models.hf_checkpoint``."""

from torchtune_longshort.refusals import stopped_while_importing

with stopped_while_importing(__name__):  # Ctrl-C while torch is imported (seconds): one line, exit 130
    from torchtune_longshort.training.checkpointing import StepCheckpoints
    from torchtune_longshort.training.metrics import JsonlMetricLogger, peak_memory_gib
    from torchtune_longshort.training.output_dir import prepare_output_dir

__all__ = [
    "StepCheckpoints",
    "prepare_output_dir",
    "JsonlMetricLogger",
    "peak_memory_gib",
]
