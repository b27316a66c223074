"""``python -m torchtune_longshort.eval ...``: lm-eval's own CLI with the ``longshort`` model registered.

Every argument goes to lm-eval 0.4.13's ``lm_eval.__main__.cli_evaluate`` unchanged (``run``, ``ls``, ``validate``,
or the legacy form without a subcommand), e.g.::

    python -m torchtune_longshort.eval run --model longshort --model_args checkpoint_dir=/ckpt \
        --include_path evals/tasks --tasks long_ppl,longshort_passkey --output_path results/ours
"""

from __future__ import annotations


def main() -> None:
    """Register the adapter, then hand over to lm-eval's CLI."""
    import torchtune_longshort.eval.lm_eval_model  # noqa: F401  (registers ``longshort``)
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    main()
