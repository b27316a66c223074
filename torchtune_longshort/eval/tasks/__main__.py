"""``python -m torchtune_longshort.eval.tasks``: print the installed task pack's folder (for stock ``lm-eval
--include_path``), as ``longshort-eval tasks-path`` does."""

from torchtune_longshort.eval.tasks import tasks_path

if __name__ == "__main__":
    print(tasks_path())
