"""A divergence of one's own, named by its function's dotted path where a divergence name is accepted
(``loss.divergence: my_divs.jeffreys_copy``): the package cannot be edited, and the fused loss path had a
hand-written logit gradient per shipped divergence only. Here a copy of ``jeffreys_per_position`` in a module of
the test's own trains to the shipped ``jeffreys``'s loss and gradients, whose fused path's analytic gradient is the
independent reference: the copy's fused gradients come from autograd on each block, its plain (checkpointed) path's
from autograd on each chunk."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from user_modules import forget_user_module, write_user_module

from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.loss import divergences
from torchtune_longshort.loss.divergences import divergence_fn

README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_example() -> str:
    """The README's example module, as written there (its loss section's "A divergence of one's own")."""
    section = README.read_text().split("### A divergence of one's own", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


SOURCE = _readme_example() + "\n\nNOT_A_FUNCTION = 3\n"


@pytest.fixture
def own_module(tmp_path, monkeypatch):
    write_user_module(tmp_path, {"my_divs.py": SOURCE}, monkeypatch)
    yield "my_divs"
    forget_user_module("my_divs")


def _run(divergence, *, fused, stop_grad_long=False, alpha=0.5, V=67, d=12, L=24, e=5):
    torch.manual_seed(0)
    out = torch.nn.Linear(d, V, bias=True)
    ha = torch.randn(2, L, d, requires_grad=True)
    hb = torch.randn(2, L, d, requires_grad=True)
    la, lb = torch.randint(0, V, (2, L)), torch.randint(0, V, (2, L))
    la[0, :3] = -100
    fn = LongShortLoss(alpha=alpha, divergence=divergence, num_chunks=3, fused=fused, stop_grad_long=stop_grad_long)
    fn.linear_projection = out  # the hidden-state path, as set_model_output sets it
    assert fn.output_path == ("fused" if fused else "checkpointed")
    res = fn(ha, hb, la, lb, e)
    res.loss.backward()
    return [res.loss, res.misalignment, res.ce], [ha.grad, hb.grad, out.weight.grad, out.bias.grad]


# float32 tolerance: the two gradients (autograd of the function on a block vs the hand-written formula) add the
# same O(1) float32 terms (rounding 6e-8 relative) over a 67-entry vocabulary in another order: observed, the loss
# differs by 1 ulp (4.8e-7 of 4.78, on the plain path) and the gradients (largest entry 0.05) by at most 1.1e-8.
# rtol 1e-5 / atol 1e-6 allows ~10x that on the loss and 100x on the gradients, and is 5000x below what a wrong
# gradient gives (the divergence's gradient dropped: 7e-3 on the weight's, 0.3 on the loss).
RTOL, ATOL = 1e-5, 1e-6


@pytest.mark.parametrize("fused,stop_grad_long", [(True, False), (True, True), (False, False)],
                         ids=["fused", "fused-stop_grad_long", "plain"])
def test_own_copy_of_jeffreys_trains_as_jeffreys(own_module, fused, stop_grad_long):
    ref_vals, ref_grads = _run("jeffreys", fused=True, stop_grad_long=stop_grad_long)
    vals, grads = _run(f"{own_module}.jeffreys_copy", fused=fused, stop_grad_long=stop_grad_long)
    for got, want in zip(vals + grads, ref_vals + ref_grads):
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


def test_own_divergence_reported_at_alpha_zero(own_module):
    ref_vals, ref_grads = _run("jeffreys", fused=True, alpha=0.0)
    vals, grads = _run(f"{own_module}.jeffreys_copy", fused=True, alpha=0.0)
    assert float(vals[1]) > 0
    for got, want in zip(vals + grads, ref_vals + ref_grads):
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


def test_own_divergence_refusals(own_module):
    cases = {
        "my_divs.nope": r"^divergence='my_divs.nope': 'my_divs.nope': module my_divs imports but has no attribute "
                        r"'nope': a divergence of "
                        r"your own is a function \(logits_p, logits_q\) -> per-position values",
        "my_divs.NOT_A_FUNCTION": r"names int in module my_divs: a divergence of your own is a function",
        "no_such_divs.f": r"^divergence='no_such_divs.f': 'no_such_divs.f' does not import \(ModuleNotFoundError: No "
                          r"module named 'no_such_divs'\): a divergence of your own must be importable",
        "torch.nn.functional.softmax": r"on two \[2, 3, 5\] float32 logit tensors raised TypeError: .*a float32 "
                                       r"tensor of shape \[2, 3\] here$",
        "jefreys": r"^divergence='jefreys' is not known; choose one of \['sce', 'jeffreys', 'js'\], or name a function "
                   r"\(logits_p, logits_q\) -> per-position values .* of your own by its dotted path \(my_module.my_div\)$",
    }
    for name, pattern in cases.items():
        with pytest.raises(ValueError, match=pattern) as info:
            divergence_fn(name)
        assert "\n" not in str(info.value)
        assert name not in divergences.PER_POSITION


def test_a_shipped_function_by_its_path_keeps_its_gradient():
    from torchtune_longshort.loss.pair_gradients import PAIR_BLOCKS, block_fn

    assert block_fn("torchtune_longshort.loss.divergences.js_per_position") is PAIR_BLOCKS["js"]


def test_misalignment_cli_takes_own_divergence(own_module, capsys):
    from torchtune_longshort.metrics.cli import _parser

    args = _parser().parse_args(["--checkpoint-dir", "x", "--length", "64", "--divergences", "js",
                                 f"{own_module}.jeffreys_copy"])
    assert args.divergences == ["js", "my_divs.jeffreys_copy"]
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(["--checkpoint-dir", "x", "--length", "64", "--divergences", "my_divs.nope"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("longshort-misalignment: error: argument --divergences: divergence='my_divs.nope': "
                          "'my_divs.nope': module my_divs imports but has no attribute 'nope'") and "\n" not in err


def test_eval_metadata_takes_own_divergence(own_module):
    from torchtune_longshort.eval.tasks import TaskDataError, check_metadata_values, divergence_names

    assert divergence_names(f"sce,{own_module}.jeffreys_copy") == ["sce", "my_divs.jeffreys_copy"]
    check_metadata_values({"mis_divergences": [f"{own_module}.jeffreys_copy"]})
    with pytest.raises(TaskDataError, match=r"mis_divergences.*or dotted paths of functions of your own that import"):
        check_metadata_values({"mis_divergences": "my_divs.nope"})


def test_fused_path_notes_the_generic_gradient(own_module):
    mine = LongShortLoss(divergence=f"{own_module}.jeffreys_copy")
    mine.linear_projection = torch.nn.Linear(4, 8)
    assert mine.gradient_note() == ("divergence my_divs.jeffreys_copy has no hand-written gradient: the fused path "
                                    "takes its logit gradients from autograd on each block of aligned pairs "
                                    "(generic, slower)")
    shipped = LongShortLoss(divergence="jeffreys")
    shipped.linear_projection = torch.nn.Linear(4, 8)
    assert shipped.gradient_note() is None


def test_a_module_that_fails_to_import_is_refused_in_one_line(tmp_path, monkeypatch):
    # a SyntaxError (or any error the module raises as it runs) went past the registry's `except ImportError`: a
    # traceback from the config check, for a divergence as for a RoPE method (the registry they share)
    from torchtune_longshort.rope import ROPE_METHODS

    (tmp_path / "broken_divs.py").write_text("def f(a, b):\n    return (a - b\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"^divergence='broken_divs.f': 'broken_divs.f' does not import "
                                         r"\(SyntaxError: '\(' was never closed .*\): module broken_divs was found, but "
                                         r"running it failed: mend it where the error says$") as info:
        divergence_fn("broken_divs.f")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"^'broken_divs.R' does not import \(SyntaxError: "):
        ROPE_METHODS.load("broken_divs.R")
