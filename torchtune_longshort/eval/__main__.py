"""``python -m torchtune_longshort.eval ...``: lm-eval's own CLI with the ``longshort`` model registered.

Every argument goes to lm-eval 0.4.13's ``lm_eval.__main__.cli_evaluate`` unchanged (``run``, ``ls``, ``validate``,
or the legacy form without a subcommand), e.g.::

    python -m torchtune_longshort.eval run --model longshort --model_args pretrained=/ckpt \
        --include_path evals/tasks --tasks long_ppl,longshort_passkey --output_path results/ours

As with lm-eval's ``hf`` model, the results land in ``results/ours/<checkpoint path, sanitized>/``
(``checkpoint_dir=``, ``pretrained``'s older name, is passed on as ``pretrained=`` so that it names the folder too).
"""

from __future__ import annotations

import sys


def main() -> None:
    """Register the adapter, then hand over to lm-eval's CLI."""
    from torchtune_longshort._quiet import quiet_upstream

    quiet_upstream()  # before the imports below: torchao logs its line on import
    import torchtune_longshort.eval.lm_eval_model  # noqa: F401  (registers ``longshort``)
    from lm_eval.__main__ import cli_evaluate

    from torchtune_longshort.eval.cli_run import lm_eval_argv

    sys.argv = sys.argv[:1] + lm_eval_argv(sys.argv[1:])
    cli_evaluate()


if __name__ == "__main__":
    main()
