"""torchtune_longshort/launcher.py, the one reader of WORLD_SIZE / RANK / LOCAL_RANK: a value no launcher sets (left in
a user's shell) is refused in one line naming the variable, exit status 2, at every command's first read."""

import pytest
import torch

from torchtune_longshort import launcher


@pytest.fixture
def no_launcher(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("env, named", [({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc'"),
                                        ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0'"),
                                        ({"WORLD_SIZE": "2", "RANK": "x"}, "RANK='x'"),
                                        ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK='2'")])
def test_validate_refuses_a_launcher_variable_no_launcher_sets(no_launcher, capsys, env, named):
    """``WORLD_SIZE=abc longshort-validate run.yaml`` ended in ``ValueError: invalid literal for int()`` (a
    traceback, exit 1); ``WORLD_SIZE=2 RANK=x`` named no variable. The reference: the same command without them, which
    refuses the missing config in one line."""
    from torchtune_longshort.training.recipe_config.validate import main

    for name, value in env.items():
        no_launcher.setenv(name, value)
    with pytest.raises(SystemExit) as refused:
        main(["tiny/longshort_stdlib.yaml"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"longshort-validate: error: environment variable {named}: expected ") and \
        "unset WORLD_SIZE" in err, err


def test_local_rank_is_read_by_the_launcher_module(no_launcher):
    """The eval model's device read ``LOCAL_RANK`` itself (``int(os.environ.get(...))``): ``LOCAL_RANK=x`` under a
    launcher said ``invalid literal for int()``. Now launcher.launched_local_rank, its values as torchrun gives them."""
    from torchtune_longshort.eval.model.processes import process_device

    assert process_device(torch.device("cuda")) == torch.device("cuda")  # no launcher: as given
    no_launcher.setenv("WORLD_SIZE", "2")
    no_launcher.setenv("LOCAL_RANK", "1")
    assert launcher.launched_local_rank() == 1 and process_device(torch.device("cuda", 0)) == torch.device("cuda", 1)
    no_launcher.setenv("LOCAL_RANK", "x")
    with pytest.raises(ValueError, match=r"^environment variable LOCAL_RANK='x': expected an integer >= 0"):
        process_device(torch.device("cuda"))


def test_eval_processes_refuse_a_bad_rank_before_torch_rendezvous(no_launcher):
    """``WORLD_SIZE=2 RANK=x longshort-eval ...`` with lm-eval's INFO lines off (``LMEVAL_LOG_LEVEL=WARNING``) met the
    rank first in torch.distributed's rendezvous (``invalid literal for int()``)."""
    from torchtune_longshort.eval.model.processes import Processes

    no_launcher.setenv("WORLD_SIZE", "2")
    no_launcher.setenv("RANK", "x")
    with pytest.raises(ValueError, match=r"^environment variable RANK='x': expected 0\.\.1 "):
        Processes(torch.device("cpu"))


@pytest.mark.parametrize("value", ["3", "x"])
def test_rank_and_local_rank_without_world_size_are_one_process(no_launcher, value):
    """The refusal's own fix is 'unset WORLD_SIZE to run one process without a launcher': with WORLD_SIZE unset, a
    RANK / LOCAL_RANK left in the shell is not read (one process: rank 0, the device as given; torchrun sets the
    three together)."""
    from torchtune_longshort.eval.model.processes import process_device

    no_launcher.setenv("RANK", value)
    no_launcher.setenv("LOCAL_RANK", value)
    assert (launcher.launched_world_size(), launcher.launched_rank(), launcher.launched_local_rank()) == (1, 0, 0)
    assert process_device(torch.device("cuda")) == torch.device("cuda")
