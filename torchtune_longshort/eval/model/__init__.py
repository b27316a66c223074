"""The ``longshort`` lm-eval model, split by job: :mod:`.adapter` (the lm-eval class, registered as ``longshort``
when imported), :mod:`.args` (its ``--model_args``), :mod:`.limits` (the one decision "run, cut or refuse"),
:mod:`.scoring` (log-likelihoods) and :mod:`.generation` (greedy decoding). Importing this package imports
nothing else."""
