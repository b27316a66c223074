"""lm-eval hooks of the passkey tasks; the generator and scorer live in ``torchtune_longshort.eval.passkey``."""

from torchtune_longshort.eval.passkey import passkey_dataset, process_results  # noqa: F401
