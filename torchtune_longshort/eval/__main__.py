"""``longshort-eval`` (= ``python -m torchtune_longshort.eval``): lm-eval's own CLI with the ``longshort`` model
registered and the installed task pack included.

Every argument goes to lm-eval 0.4.13's ``lm_eval.__main__.cli_evaluate`` (``run``, ``ls``, ``validate``, or the
legacy form without a subcommand), with the additions of :func:`cli_run.lm_eval_argv` (the pack's
``--include_path``, a device that exists, the model's name for the tasks), e.g.::

    longshort-eval run --model longshort --model_args pretrained=/ckpt \\
        --tasks longshort_ppl,longshort_passkey --output_path results/ours

As with lm-eval's ``hf`` model, the results land in ``results/ours/<checkpoint path, sanitized>/``
(``checkpoint_dir=``, ``pretrained``'s older name, is passed on as ``pretrained=`` so that it names the folder too).

``longshort-eval tasks-path`` prints the installed task pack's folder, for stock lm-eval:
``lm-eval run --model hf --include_path "$(longshort-eval tasks-path)" --tasks longshort_ppl ...``.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Print the pack's path, or register the adapter and hand over to lm-eval's CLI."""
    if sys.argv[1:2] == ["tasks-path"]:
        from torchtune_longshort.eval.tasks import tasks_path

        print(tasks_path())
        return
    from torchtune_longshort._quiet import quiet_upstream

    quiet_upstream()  # before the imports below: torchao logs its line on import
    import torchtune_longshort.eval.model.adapter  # noqa: F401  (registers ``longshort``)
    from lm_eval.__main__ import cli_evaluate

    from torchtune_longshort.eval.cli_run import lm_eval_argv

    sys.argv = sys.argv[:1] + lm_eval_argv(sys.argv[1:])
    cli_evaluate()


if __name__ == "__main__":
    main()
