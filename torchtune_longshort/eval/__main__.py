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
``lm-eval run --model hf --model_args pretrained=DIR --include_path "$(longshort-eval tasks-path)" --tasks
longshort_ppl ...``. ``longshort-eval peft-base run/step_<k> --out DIR`` writes the base folder a LoRA step's adapters
go on there (``pretrained=DIR,peft=run/step_<k>/adapter``: :mod:`.peft_base`).
``--help`` (and ``run`` alone, as ``lm-eval run``) names the ``longshort`` model and its arguments above lm-eval's
help. Bad input (a device this machine lacks, a task name lm-eval does not know: with "did you mean", a model
argument) is refused in one line (:mod:`torchtune_longshort.refusals`); an evaluation ends with one line counting
the metrics left unscored and why. A task that raises is NaN with its reason, the others scored and written, and the
run exits 1 (:mod:`.task_faults`). The results of every model it runs (``hf`` too) record the project's provenance
block and, for a local ``pretrained=`` folder, its path and content fingerprint
(:mod:`torchtune_longshort.eval.run_record`).
"""

from __future__ import annotations

import argparse
import sys

from torchtune_longshort._quiet import quiet_lm_eval_git, quiet_upstream
from torchtune_longshort.eval import cli_argv
from torchtune_longshort.eval.cli_argv import asks_help, option, stock_lm_eval
from torchtune_longshort.eval.console_log import setup_cli_logging
from torchtune_longshort.eval.results_written import SavedResults
from torchtune_longshort.eval.tasks import tasks_path
from torchtune_longshort.eval.trust_args import trusts_remote_code
from torchtune_longshort.refusals import quiet_when_the_reader_leaves, refuse, refusing, stoppable
# what an interrupted evaluation leaves: lm-eval writes its results files when every task is done
INTERRUPTED = ("lm-eval writes results only when every task is done (a run stopped before then wrote none); with "
               "--use_cache, the same command reuses every request already scored")


@quiet_when_the_reader_leaves
def main() -> None:
    """Print the pack's path, or register the adapter and hand over to lm-eval's CLI."""
    prog = cli_argv.prog()
    if sys.argv[1:2] == ["tasks-path"]:
        extra = sys.argv[2:]
        if extra and extra != ["-h"] and extra != ["--help"]:  # `tasks-path --foo` printed the path, exit 0
            print(f"{prog}: error: tasks-path takes no arguments (got {' '.join(extra)}); it prints the task pack's "
                  f"folder, for lm-eval's --include_path", file=sys.stderr)
            sys.exit(2)
        print(tasks_path() if not extra else f"usage: {prog} tasks-path\n\nPrint the installed task pack's folder, "
              f"for stock lm-eval: {stock_lm_eval()}")
        return
    quiet_upstream()  # before the imports of _evaluate and peft_base: torchao logs a line on import
    if sys.argv[1:2] == ["peft-base"]:  # a folder for stock lm-eval, as tasks-path is a path for it: no lm-eval run
        # deferred: torch (tasks-path answers without it)
        from torchtune_longshort.eval import peft_base

        sys.exit(peft_base.main(sys.argv[2:], f"{prog} peft-base"))
    stoppable(prog, lambda: refusing(prog, lambda: _evaluate(sys.argv[1:])), INTERRUPTED)


def _evaluate(args) -> None:
    # deferred: torch, lm_eval (tasks-path answers without them; torchao logs a line on import, filtered by the
    # quiet_upstream() installed before these)
    import torchtune_longshort.eval.model.adapter  # noqa: F401  (registers ``longshort``)
    from torchtune_longshort.eval import cli_messages
    from torchtune_longshort.eval.cli_run import lm_eval_argv
    from torchtune_longshort.rope.checkpoint_code import checkpoint_code

    setup_cli_logging()  # as lm-eval's CLI first: the pack's own lines (lm_eval_argv's) then print as lm-eval's
    if asks_help(args):
        print(cli_messages.help_preamble())
    argv = lm_eval_argv(args)
    with checkpoint_code(trusts_remote_code(argv)):  # every checkpoint read, the checks' and lm-eval's (trust_args)
        _checked_run(argv)


def _checked_run(argv) -> None:
    """The checks of :func:`~.cli_run.check_arguments`, then lm-eval's CLI on ``argv``."""
    # deferred: torch, lm_eval (as in _evaluate)
    import lm_eval
    from lm_eval.__main__ import cli_evaluate

    from torchtune_longshort.eval import cli_messages
    from torchtune_longshort.eval.cli_run import check_arguments
    from torchtune_longshort.eval.task_faults import EXIT_STATUS, contained
    from torchtune_longshort.eval.task_index import indexes_built, pack_only_index

    check_arguments(argv)
    quiet_lm_eval_git()
    finished = []
    evaluate = lm_eval.simple_evaluate

    def kept(*a, **kw):  # lm-eval's run command calls lm_eval.simple_evaluate; its results give the summary line
        out = evaluate(*a, **kw)
        finished.append(out)
        return out

    lm_eval.simple_evaluate = kept
    sys.argv = sys.argv[:1] + argv
    if argv[:1] == ["validate"]:
        _validate_tasks(argv)
    parser_error = argparse.ArgumentParser.error  # lm-eval's own parsers: usage + error, two lines and more
    argparse.ArgumentParser.error = lambda parser, message: refuse(cli_argv.prog(), message)
    saved, built = SavedResults(), []  # built: the task indexes lm-eval builds (indexes_built)
    try:
        with pack_only_index(argv, option(argv, "--include_path") or ""), indexes_built() as built, \
                saved.watching(), contained() as faults, cli_argv.hf_auto_schedule_floored():
            cli_evaluate()
    except ValueError as e:  # the names of the index lm-eval built (with the pack and its defaults: not covered)
        line = cli_messages.tasks_not_found(str(e), built[-1].all_tasks if built else _known_tasks(argv))
        if line:
            raise ValueError(line) from None
        raise
    finally:
        lm_eval.simple_evaluate = evaluate
        argparse.ArgumentParser.error = parser_error
    for results in finished:
        if results is not None:
            print(cli_messages.summary_line(results, saved.results[-1] if saved.results else None), flush=True)
    saved.raise_if_failed()
    if faults.closing_line():  # a task raised: the others' scores are written, the run is not a success
        print(f"{cli_argv.prog()}: error: {faults.closing_line()}", file=sys.stderr, flush=True)
        sys.exit(EXIT_STATUS)


def _validate_tasks(argv) -> None:
    """``validate --tasks``: a name lm-eval does not know is refused as ``run`` refuses it (lm-eval's validate prints
    ``Tasks not found: ...`` and exits 1, without the nearest names)."""
    # deferred: torch, lm_eval (as in _evaluate)
    from lm_eval.tasks import TaskManager

    from torchtune_longshort.eval import cli_messages
    from torchtune_longshort.eval.task_index import included_folders

    names = [t for t in (option(argv, "--tasks") or "").split(",") if t]
    manager = TaskManager(include_path=included_folders(option(argv, "--include_path") or ""))
    missing = [t for t in names if t not in manager.match_tasks(names)]
    if missing:
        raise ValueError(cli_messages.tasks_not_found(f"Tasks not found: {', '.join(missing)}", manager.all_tasks))


def _known_tasks(argv) -> list:
    """Every task and group lm-eval knows with the pack included (only asked when a name was not found)."""
    # deferred: torch, lm_eval (as in _evaluate)
    from lm_eval.tasks import TaskManager

    from torchtune_longshort.eval.task_index import included_folders

    return list(TaskManager(include_path=included_folders(option(argv, "--include_path") or "")).all_tasks)


if __name__ == "__main__":
    main()
