"""lm-eval integration: the ``longshort`` model adapter (``lm_eval_model``), task helpers (long-context
perplexity, passkey, misalignment) and the results report. Importing this package does not import lm-eval;
``python -m torchtune_longshort.eval`` (or importing ``torchtune_longshort.eval.model.adapter``) registers the model."""
