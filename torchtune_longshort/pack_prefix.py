"""The prefix of every task, group and tag name of the lm-eval task pack.

It keeps the pack's names out of lm-eval's built-in namespace (``tests/test_task_names.py``). Its home is on the
ground floor because a ground-floor module asks it too: :mod:`torchtune_longshort._quiet` filters lm-eval's messages
about the pack's tasks, and only those, by it. The pack's registry (:mod:`torchtune_longshort.eval.tasks`) names every
task with it and re-exports it as ``eval.tasks.PREFIX``.
"""

PREFIX = "longshort_"
