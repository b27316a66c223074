"""lm-eval hooks of the passkey task; the generator and scorer live in ``torchtune_longshort.eval.passkey``."""

from torchtune_longshort.eval.length_swept_task import LengthSweptTask  # noqa: F401
from torchtune_longshort.eval.passkey import passkey_dataset, process_results  # noqa: F401
