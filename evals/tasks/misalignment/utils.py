"""lm-eval hooks of the misalignment task; see ``torchtune_longshort.eval.misalignment_task``."""

from torchtune_longshort.eval.misalignment_task import (  # noqa: F401
    MisalignmentTask,
    misalignment_dataset,
    process_results,
)
