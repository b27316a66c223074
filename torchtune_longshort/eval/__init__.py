"""lm-eval integration, split by job: :mod:`.model` (the ``longshort`` lm-eval model), :mod:`.tasks` (the task pack,
installed with the package, and its registry ``TASK_FAMILIES``), :mod:`.report` (the evaluation report), and
``longshort-eval`` (:mod:`.__main__`, :mod:`.cli_run`: lm-eval's CLI with the model registered and the pack
included). Importing this package imports neither lm-eval nor torch; importing
``torchtune_longshort.eval.model.adapter`` registers the model."""
