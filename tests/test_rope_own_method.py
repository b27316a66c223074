"""A RoPE method of one's own, named by its class's dotted path where a registry name is accepted (as torchtune's
``_component_``): an installed package cannot be edited, and a name put into ``ROPE_METHODS`` by hand lived only in
the process that put it there, so a folder trained with it could not be loaded by ``longshort-eval`` ("not a RoPE
method")."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from user_modules import forget_user_module, write_user_module

from torchtune_longshort.models import load_hf_checkpoint, save_hf_checkpoint
from torchtune_longshort.rope import ROPE_METHODS, build_rope, check_rope_method

MODULE = "own_rope_pkg.mixed"
PATH = f"{MODULE}.LinearNTKRoPE"

SOURCE = '''
from torchtune_longshort.rope import ScaledRoPE
from torchtune_longshort.rope.base import default_inv_freq


class LinearNTKRoPE(ScaledRoPE):
    """Half the factor as PI, half as an NTK base change."""
    method = "linear_ntk"  # replaced by the path it is named by, which the saved spec records
    has_factor = True
    scale_parameter = "factor"
    transformers_representable = False

    def __init__(self, dim, max_seq_len, base=10_000.0, *, factor, layout="interleaved"):
        super().__init__(dim, max_seq_len, base, layout)
        self.factor = float(factor)
        self.rope_init()

    def compute_inv_freq(self, device=None):
        s = self.factor ** 0.5
        return default_inv_freq(self.dim, self.base * s ** (self.dim / (self.dim - 2)), device) / s

    def extra_spec(self):
        return {"factor": self.factor}


class NotRoPE:
    pass
'''


def _forget():
    forget_user_module("own_rope_pkg")


@pytest.fixture
def own_module(tmp_path, monkeypatch):
    write_user_module(tmp_path, {"own_rope_pkg/__init__.py": "", "own_rope_pkg/mixed.py": textwrap.dedent(SOURCE)},
                      monkeypatch)
    _forget()
    yield
    _forget()


def test_a_dotted_path_is_built_saved_and_read_back_by_a_process_that_never_imported_it(
        own_module, tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    model = load_hf_checkpoint(tiny_llama2_dir, rope={"method": PATH, "factor": 2}, max_seq_len=512)
    assert model.rope_scaling["method"] == PATH
    assert type(model.layers[0].attn.pos_embeddings).__module__ == MODULE
    tokens = torch.randint(0, 512, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(tokens)
    save_hf_checkpoint(model, tmp_path / "out", tiny_llama2_dir, tokenizer=sp_tokenizer_dir)
    _forget()
    back = load_hf_checkpoint(tmp_path / "out", trust_remote_code=True)  # code the folder names: asked
    assert type(back.layers[0].attn.pos_embeddings).__module__ == MODULE
    with torch.no_grad():
        torch.testing.assert_close(back(tokens), want)


def test_a_dotted_path_is_checked_once_and_kept(own_module):
    assert check_rope_method(PATH, "model.method") == PATH
    rope = build_rope(PATH, head_dim=16, max_seq_len=64, factor=4)
    assert rope.spec()["method"] == PATH
    s = 2.0  # sqrt(4): an independent computation of the mixed frequencies
    base = 10_000.0 * s ** (16 / 14)
    ref = 1.0 / (base ** (torch.arange(0, 16, 2).float() / 16)) / s
    torch.testing.assert_close(rope.compute_inv_freq(), ref)


def test_refusals_name_the_field_the_known_methods_and_how_to_add_one(own_module):
    with pytest.raises(ValueError) as e:
        check_rope_method("linear_ntk", "model.method")
    assert "model.method='linear_ntk' is not a RoPE method" in str(e.value)
    assert "'yarn'" in str(e.value) and "dotted path of a ScaledRoPE subclass of your own" in str(e.value)
    with pytest.raises(ValueError, match=r"model.method='nowhere_pkg.Mine' is not a RoPE method: 'nowhere_pkg.Mine' "
                                         r"does not import \(ModuleNotFoundError.*PYTHONPATH"):
        check_rope_method("nowhere_pkg.Mine", "model.method")
    with pytest.raises(ValueError, match=r"names NotRoPE in module own_rope_pkg.mixed: .* subclass of "
                                         r"torchtune_longshort.rope.base.ScaledRoPE"):
        check_rope_method(f"{MODULE}.NotRoPE", "model.method")
    with pytest.raises(ValueError, match=f"module {MODULE} imports but has no attribute 'Missing'"):
        check_rope_method(f"{MODULE}.Missing", "model.method")
    assert f"{MODULE}.NotRoPE" not in ROPE_METHODS and "nowhere_pkg.Mine" not in ROPE_METHODS


def test_a_shipped_method_named_by_its_path_keeps_its_name():
    """A path to a shipped class (``torchtune_longshort.rope.YaRNRoPE``) must not rename it: every YaRN spec saved
    after would record the path."""
    path = "torchtune_longshort.rope.yarn.YaRNRoPE"
    try:
        assert check_rope_method(path) == path
        assert ROPE_METHODS[path] is ROPE_METHODS["yarn"] and ROPE_METHODS["yarn"].method == "yarn"
        spec = build_rope(path, head_dim=16, max_seq_len=64, factor=2, original_max_seq_len=32).spec()
        assert spec["method"] == "yarn"
    finally:
        dict.pop(ROPE_METHODS, path, None)


def test_a_folder_whose_method_does_not_import_here_is_refused_naming_its_config_json(
        own_module, tiny_llama2_dir, sp_tokenizer_dir, tmp_path, monkeypatch):
    """A step folder written with a method of one's own, read where its module does not import (longshort-eval run
    in another folder): the refusal named the key alone ("longshort_rope.method='...' is not a RoPE method: ..."), not
    which folder's config.json holds it, where a family of one's own in the same place names the file
    ("<folder>/config.json: longshort_family=..."; tests/test_model_family_own.py)."""
    model = load_hf_checkpoint(tiny_llama2_dir, rope={"method": PATH, "factor": 2}, max_seq_len=512)
    save_hf_checkpoint(model, tmp_path / "out", tiny_llama2_dir, tokenizer=sp_tokenizer_dir)
    _forget()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])  # the module is not here
    with pytest.raises(ValueError) as e:
        load_hf_checkpoint(tmp_path / "out", trust_remote_code=True)
    assert str(e.value) == (
        f"{tmp_path / 'out' / 'config.json'}: longshort_rope.method={PATH!r} is not a RoPE method: {PATH!r} does not "
        "import (ModuleNotFoundError: No module named 'own_rope_pkg'): a RoPE method of your own must be importable "
        "in every process that builds or loads the model (pip install its package, or put its folder on PYTHONPATH)")


def test_a_module_found_whose_own_import_fails_is_told_to_install_that(own_module, tmp_path):
    """my_rope.py beside the config, whose first line imports a package not installed here: the refusal told the
    user to 'pip install its package, or put its folder on PYTHONPATH', where the module was found and its folder is
    on the path; it now names the failing import as the thing to install (Python's own line, kept, names it)."""
    (tmp_path / "own_rope_pkg" / "needs.py").write_text("import no_such_dependency_here\n" + textwrap.dedent(SOURCE))
    path = "own_rope_pkg.needs.LinearNTKRoPE"
    with pytest.raises(ValueError) as e:
        check_rope_method(path, "model.method")
    assert str(e.value) == (
        f"model.method={path!r} is not a RoPE method: {path!r} does not import (ModuleNotFoundError: No module named "
        "'no_such_dependency_here'): module own_rope_pkg.needs was found, but an import in it failed: install what it "
        "imports (or mend that import) in every process that builds or loads the model")
