"""Where the converted-model cache goes (``models.gguf_cache.cache_dir``): the environment's standard variables, read as
huggingface_hub reads them, and a refusal that names the variable when the cache cannot be made."""

import ast
import json
import importlib.util
import subprocess
from pathlib import Path

import pytest

from torchtune_longshort.models import gguf as g


def _clean(monkeypatch, tmp_path):
    for var in ("LONGSHORT_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def _hub_home() -> str:
    """huggingface_hub's ``HF_HOME`` as its ``constants`` module computes it under the environment now (a fresh copy
    of the module, executed apart: the imported one keeps the value of its import)."""
    import huggingface_hub

    source = Path(huggingface_hub.__file__).with_name("constants.py")
    spec = importlib.util.spec_from_file_location("_hub_constants", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HF_HOME


def test_cache_follows_xdg_cache_home_as_huggingface_hub_does(tmp_path, monkeypatch):
    _clean(monkeypatch, tmp_path)
    assert g.cache_dir() == tmp_path / "home" / ".cache" / "torchtune_longshort"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # the reference: huggingface_hub's HF_HOME default under the same environment, one folder beside ours
    monkeypatch.delenv("HF_HOME", raising=False)  # the suite's own (conftest) would take precedence
    assert _hub_home() == str(tmp_path / "xdg" / "huggingface")
    assert g.cache_dir() == tmp_path / "xdg" / "torchtune_longshort"
    monkeypatch.setenv("LONGSHORT_CACHE", str(tmp_path / "mine"))  # ours first, as HF_HOME before XDG_CACHE_HOME
    assert g.cache_dir() == tmp_path / "mine"
    # a ~ in it is the home folder, as huggingface_hub expands one in HF_HOME (LONGSHORT_CACHE="~/c" made a folder
    # named ~ in the working directory)
    monkeypatch.setenv("HF_HOME", "~/hub")
    assert _hub_home() == str(tmp_path / "home" / "hub")
    monkeypatch.setenv("LONGSHORT_CACHE", "~/mine")
    assert g.cache_dir() == tmp_path / "home" / "mine"
    monkeypatch.delenv("LONGSHORT_CACHE")
    for ignored in ("", "relative/cache"):  # unset or relative: the XDG spec's default
        monkeypatch.setenv("XDG_CACHE_HOME", ignored)
        assert g.cache_dir() == tmp_path / "home" / ".cache" / "torchtune_longshort"


@pytest.mark.parametrize("where", ["home", "xdg", "longshort_cache", "relative_xdg"])
def test_an_uncreatable_cache_is_refused_naming_its_variable(where, tmp_path, monkeypatch, capsys):
    # HOME pointing at a file: the refusal named --out, which the user never gave, and no variable
    _clean(monkeypatch, tmp_path)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    var = {"home": "HOME", "xdg": "XDG_CACHE_HOME", "longshort_cache": "LONGSHORT_CACHE", "relative_xdg": "HOME"}[where]
    monkeypatch.setenv(var, str(blocker) if var == "HOME" else str(blocker / "cache"))
    if where == "relative_xdg":  # ignored, as the XDG spec reads a relative one: the home folder chose the cache
        monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a} before refusing"))
    with pytest.raises(SystemExit) as e:
        g.main(["--model", "smollm2-135m-instruct"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert "--out" not in err and str(blocker) in err and "is a file, not a folder" in err, err
    assert ("$XDG_CACHE_HOME" if where == "xdg" else var) in err, err
    assert where == "xdg" or "XDG_CACHE_HOME" not in err, err
    assert where == "longshort_cache" or "LONGSHORT_CACHE=<folder> moves it" in err, err
    assert blocker.read_text() == "not a folder\n"


REPO = Path(__file__).resolve().parents[1]


def _code_strings(path: Path) -> set:
    """The string constants of a Python file's code (its docstrings left out: an example command may name a folder)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs}


def test_no_script_of_the_project_spells_the_cache_folder_itself():
    # benchmarks/fused_precision.py and torchtune_port.py read ~/.cache/torchtune_longshort/... whatever
    # LONGSHORT_CACHE or XDG_CACHE_HOME said; every reader asks models.gguf (cache_dir / pypi_model_dir)
    spelled = []
    owners = {REPO / "torchtune_longshort" / "models" / name for name in ("gguf.py", "gguf_cache.py")}
    for f in [*(REPO / "torchtune_longshort").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]:
        if f in owners:
            continue
        strings = _code_strings(f)
        if any(".cache/torchtune_longshort" in s for s in strings) or {".cache", "torchtune_longshort"} <= strings:
            spelled.append(str(f.relative_to(REPO)))
    assert not spelled, spelled


def test_the_precision_benchmark_finds_the_converted_model_where_the_converter_put_it(tmp_path, monkeypatch):
    _clean(monkeypatch, tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    folder = g.pypi_model_dir("smollm2-135m-instruct")
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    loaded = []

    def load(path, **kwargs):
        loaded.append(Path(path))
        raise RuntimeError("loaded")

    import torchtune_longshort.models as models

    monkeypatch.setattr(models, "load_hf_checkpoint", load)
    spec = importlib.util.spec_from_file_location("_fused_precision", REPO / "benchmarks" / "fused_precision.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(RuntimeError, match="loaded"):
        module.hidden_states()  # before: random hidden states, "the real model is not converted"
    assert loaded == [tmp_path / "xdg" / "torchtune_longshort" / "smollm2-135m-instruct"]


def test_a_model_converted_before_xdg_cache_home_was_read_is_found(tmp_path, monkeypatch):
    # a user with XDG_CACHE_HOME set converted SmolLM2 into ~/.cache/torchtune_longshort (XDG_CACHE_HOME was ignored
    # then); once it was read, the same command fetched and converted the model again into $XDG_CACHE_HOME (500 MB
    # more), or without the gguf package was refused, where it had printed the cached folder
    _clean(monkeypatch, tmp_path)
    name = "smollm2-135m-instruct"
    before = tmp_path / "home" / ".cache" / "torchtune_longshort" / name
    before.mkdir(parents=True)
    (before / g.DONE_MARK).write_text(json.dumps({"conversion": g.CONVERSION}) + "\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(g, "require_gguf", lambda: pytest.fail("fetched a model the cache of before holds"))
    assert g.pypi_model(name) == before
    assert g.pypi_model_dir(name) == before
    chosen = tmp_path / "xdg" / "torchtune_longshort" / name  # converted there too: that one, as cache_dir says
    chosen.mkdir(parents=True)
    (chosen / g.DONE_MARK).write_text(json.dumps({"conversion": g.CONVERSION}) + "\n")
    assert g.pypi_model(name) == chosen
    (chosen / g.DONE_MARK).unlink()
    monkeypatch.setenv("LONGSHORT_CACHE", str(tmp_path / "mine"))  # given: the one place looked at
    assert g.pypi_model_dir(name) == tmp_path / "mine" / name
    assert g.pypi_model_dir(name, tmp_path / "out") == tmp_path / "out" / name
