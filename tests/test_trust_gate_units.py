"""The trust gate's two small deciders, each against an independent reference: which command lines trust a
checkpoint's code (eval.trust_args, lm-eval's own ``run`` parser the reference: a command line it refuses trusts
nothing, so no check before lm-eval starts may import a folder's code under it), and which dotted paths are the
package's own (rope.checkpoint_code.shipped: the top-level package Python imports first, ``str.partition``), and
what lets a path through the gate untrusted (the same path under the same gate less that one thing the reference)."""

from argparse import _SubParsersAction

import pytest

from torchtune_longshort.eval.trust_args import trusts_remote_code
from torchtune_longshort.rope.checkpoint_code import (PACKAGE, UntrustedCheckpointCode, check_checkpoint_path,
                                                      checkpoint_code)

BASE = ["--model", "longshort", "--tasks", "longshort_ppl"]
ARGVS = [
    ["--trust_remote_code"],
    ["--trust_remote_code", "False"],
    ["--trust_remote_code", "false"],  # lm-eval: 'unrecognized arguments: false'
    ["--model_args", "pretrained=/p,trust_remote_code=True"],
    ["--model_args", "pretrained=/p,trust_remote_code=False"],
    ["--model_args", "pretrained=/p,trust_remote_code"],  # a bare key: lm-eval's parser refuses it
    ["--model_args", "pretrained=/p,trust_remote_code=maybe"],  # no bool: trusts nothing (the checks refuse it)
    ["--model_args", "pretrained=/p"],
]


def _lm_eval_trusts(argv):
    """What lm-eval's own run parser makes of ``argv``: refused (SystemExit) trusts nothing."""
    from lm_eval._cli.harness import HarnessCLI

    parser = HarnessCLI()._parser
    run = next(a for a in parser._actions if isinstance(a, _SubParsersAction)).choices["run"]
    try:
        args = run.parse_args(argv)
    except SystemExit:
        return False
    given = (getattr(args, "model_args", None) or {}).get("trust_remote_code", False)
    return getattr(args, "trust_remote_code", False) is True or str(given).lower() == "true"


@pytest.mark.parametrize("extra", ARGVS, ids=lambda a: " ".join(a))
def test_a_command_line_trusts_code_as_lm_eval_reads_it(extra, capsys):
    argv = BASE + extra
    want = _lm_eval_trusts(argv)
    capsys.readouterr()
    assert trusts_remote_code(argv) is want


@pytest.mark.parametrize("path", [f"{PACKAGE}_extra.fam.MINE", f"{PACKAGE}x.MINE", "my_pkg.torchtune_longshort.X"])
def test_a_path_outside_the_package_sharing_its_prefix_is_refused(path):
    assert path.partition(".")[0] != PACKAGE  # the package Python would import first is not this one
    with checkpoint_code(False), pytest.raises(UntrustedCheckpointCode, match="names code outside"):
        check_checkpoint_path(path, {}, "f/config.json", "longshort_family")


def test_a_path_into_the_package_is_read_without_trust():
    path = f"{PACKAGE}.models.families.LLAMA2"
    assert path.partition(".")[0] == PACKAGE
    with checkpoint_code(False):
        assert check_checkpoint_path(path, {}, "f/config.json", "longshort_family") is None


@pytest.mark.parametrize("path", ["subprocess.Popen", "os.path.join", "json.decoder.JSONDecoder.decode"])
def test_a_path_this_process_imported_is_refused_without_saying_it_would_run_code(path):
    """A checkpoint naming an object of a module imported already (sys.modules, the reference) is still refused (it
    would pick what runs), but importing it would run no top-level code: the refusal says what it would be used as."""
    import sys

    module, _, _ = path.rpartition(".")
    while module not in sys.modules or not hasattr(sys.modules[module], path[len(module) + 1:].split(".")[0]):
        module = module.rpartition(".")[0]
    assert module in sys.modules  # nothing new to import: the reference
    with checkpoint_code(False, "FIX"), pytest.raises(UntrustedCheckpointCode) as e:
        check_checkpoint_path(path, {}, "x/config.json", "longshort_family")
    said = str(e.value)
    assert "would import" not in said and "running top-level code" not in said, said
    assert f"in {path.split('.')[0]}, which this process has imported already" in said and "as its model family" in said
    assert said.endswith("pass FIX") and "\n" not in said


def test_a_path_whose_module_is_not_imported_is_still_said_to_run_its_code():
    with checkpoint_code(False, "FIX"), pytest.raises(UntrustedCheckpointCode) as e:
        check_checkpoint_path("json.tool_not_a_module_xyz.X", {}, "x/config.json", "longshort_rope.method")
    assert "would import, running top-level code of json" in str(e.value)


LAZY = {  # a library whose submodules load on first attribute access (as torch's and transformers' do)
    "lazy_pkg/__init__.py": "import importlib\n\n\ndef __getattr__(name):\n"
                            "    return importlib.import_module(f'{__name__}.{name}')\n",
    "lazy_pkg/boom.py": "import os\nfrom pathlib import Path\nPath(os.environ['GATE_MARKER']).write_text('imported')\n"
                        "MINE = 1\n",
}


def test_a_path_into_the_package_that_walks_out_of_it_is_refused(tmp_path, monkeypatch):
    """torchtune_longshort.models.hf_model.torch.onnx.X was taken as the package's own (its first part) and its lookup
    imported torch.onnx untrusted, walking out through hf_model's attribute torch; the same with a library of one's
    own a module of the package holds (the marker file, written by the submodule's import, the witness)."""
    import sys

    from user_modules import forget_user_module, write_user_module

    from torchtune_longshort.models import families

    write_user_module(tmp_path / "mods", LAZY, monkeypatch)
    monkeypatch.setenv("GATE_MARKER", str(tmp_path / "marker"))
    forget_user_module("lazy_pkg")
    import lazy_pkg

    monkeypatch.setattr(families, "lazy_pkg", lazy_pkg, raising=False)  # as hf_model holds torch
    path = f"{PACKAGE}.models.families.lazy_pkg.boom.MINE"
    config = {"model_type": "llama", "longshort_family": path}
    try:
        with checkpoint_code(False, "FIX"), pytest.raises(UntrustedCheckpointCode) as e:
            families.family_of(config, "x/config.json")
        assert not (tmp_path / "marker").exists() and "lazy_pkg.boom" not in sys.modules
        assert str(e.value) == (
            f"x/config.json: longshort_family={path!r} names code outside {PACKAGE} (in lazy_pkg, reached through a "
            f"module of {PACKAGE}), which reading this checkpoint would import, running top-level code of lazy_pkg: "
            "not imported; if you trust this checkpoint and lazy_pkg, pass FIX")
        with checkpoint_code(True), pytest.raises(ValueError, match="is not a model family"):
            families.family_of(config, "x/config.json")  # the reference: the lookup itself imports the submodule
        assert (tmp_path / "marker").read_text() == "imported"
    finally:
        forget_user_module("lazy_pkg")


UNKNOWN = "json.tool_not_a_module_xyz.X"  # refused untrusted (test above); checking it imports nothing


def _refused(path, registry=None, key="longshort_family", **gate):
    """Whether check_checkpoint_path refuses ``path`` inside checkpoint_code(**gate): the reference each case below
    compares with, the same path under the same gate less the one thing that lets it through."""
    try:
        with checkpoint_code(**gate):
            check_checkpoint_path(path, registry or {}, "x/config.json", key)
    except UntrustedCheckpointCode:
        return True
    return False


def test_a_path_the_caller_names_or_the_registry_holds_is_not_refused():
    assert _refused(UNKNOWN, trust_remote_code=False) and not _refused(UNKNOWN, trust_remote_code=True)
    assert not _refused(UNKNOWN, trust_remote_code=False, own=[UNKNOWN])
    assert _refused(UNKNOWN, trust_remote_code=False, own=[UNKNOWN + "Y"])
    assert not _refused(UNKNOWN, {UNKNOWN: object()}, trust_remote_code=False)


def test_a_component_told_false_inside_a_trusting_reader_refuses_as_it_does_alone():
    from torchtune_longshort.rope.checkpoint_code import MODEL_FIX, component_code

    with checkpoint_code(False, MODEL_FIX), pytest.raises(UntrustedCheckpointCode, match="model.trust_remote_code"):
        check_checkpoint_path(UNKNOWN, {}, "x/config.json", "longshort_family")  # the reference: the component alone
    with checkpoint_code(True):
        with component_code(None, MODEL_FIX):  # not given: read as the reader reads it
            check_checkpoint_path(UNKNOWN, {}, "x/config.json", "longshort_family")
        with component_code(False, MODEL_FIX), pytest.raises(UntrustedCheckpointCode, match="model.trust_remote_code"):
            check_checkpoint_path(UNKNOWN, {}, "x/config.json", "longshort_family")


def test_a_rope_method_held_already_is_said_to_be_used_as_one():
    with checkpoint_code(False, "FIX"), pytest.raises(UntrustedCheckpointCode) as e:
        check_checkpoint_path("subprocess.Popen", {}, "x/config.json", "longshort_rope.method")
    assert "would use as its RoPE method: not used" in str(e.value) and "model family" not in str(e.value)
