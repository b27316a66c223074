"""A model family of one's own, named by the dotted path of a ``ModelFamily`` in the user's module (the README's
worked example, run as written): an installed package cannot be edited, and a folder whose ``config.json`` says a
``model_type`` the table does not list was refused ("is not a supported model family"), as was ``model.family`` beside
``checkpoint_dir``. It trains from a ``mymodel`` folder to the losses of the shipped ``llama`` family on the same
weights (the independent reference), and its step folder, which records the path, is evaluated by a process that
never imported it."""

from __future__ import annotations

import inspect
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

from user_modules import forget_user_module, write_user_module

from torchtune.models.llama2 import llama2

from torchtune_longshort.models import MODEL_FAMILIES, family_named, family_of
from torchtune_longshort.models.family_builders import UnsupportedModelError

REPO = Path(__file__).resolve().parents[1]
PKG = "own_family_pkg"
PATH = f"{PKG}.my_families.MYMODEL"
FAMILY_KEY = "longshort_family"  # the config.json key the README names


def _readme_example() -> str:
    text = (REPO / "README.md").read_text()
    m = re.search(r"<!-- own-family-example: [^>]*-->\n```python\n(.*?)```", text, re.S)
    assert m, "README: the own-family example (its marker and python block) is gone"
    return m.group(1)


def _forget():
    forget_user_module(PKG)


@pytest.fixture
def own_module(tmp_path, monkeypatch):
    write_user_module(tmp_path / "mods", {f"{PKG}/__init__.py": "", f"{PKG}/my_families.py": _readme_example()},
                      monkeypatch)
    _forget()
    yield
    _forget()


def _as_mymodel(src: Path, dst: Path) -> Path:
    """``src`` (a Llama folder) with config.json saying ``model_type`` mymodel, as the research model's does."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config.update(model_type="mymodel", architectures=["MyModelForCausalLM"])
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def _train(ckpt, tok, out, **over):
    from recipe_config import make_cfg, train_rows

    cfg = make_cfg(ckpt, tok, out, max_steps=2, save_every_n_steps=2, batch_size=2, **{"dataset.limit": 6}, **over)
    return [r["loss"] for r in train_rows(cfg) if "loss" in r]


def test_a_family_of_ones_own_trains_as_the_shipped_llama_and_its_step_folder_evaluates(
        own_module, tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.eval.cli_run import run_cli
    from torchtune_longshort.models import load_hf_checkpoint

    mine = _as_mymodel(tiny_llama2_dir, tmp_path / "mymodel")
    own = _train(mine, sp_tokenizer_dir, tmp_path / "own", **{"model.family": PATH})
    ref = _train(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "ref")
    assert len(own) == 2 and own == pytest.approx(ref, rel=1e-6)
    step = tmp_path / "own" / "step_2"
    saved = json.loads((step / "config.json").read_text())
    assert saved["model_type"] == "mymodel" and saved[FAMILY_KEY] == PATH
    _forget()  # the eval's process never imported it: the step folder's config.json names it
    got = load_hf_checkpoint(step, trust_remote_code=True)  # code the folder names: asked
    want = load_hf_checkpoint(tmp_path / "ref" / "step_2")
    assert all(torch.equal(a, b) for a, b in zip(got.state_dict().values(), want.state_dict().values()))
    _forget()
    res = run_cli(["run", "--model", "longshort", "--model_args", f"pretrained={step},trust_remote_code=True",
                   "--device", "cpu",
                   "--tasks", "longshort_ppl", "--metadata",
                   json.dumps({"max_seq_lengths": [32], "ppl_num_samples": 1, "ppl_source": "stdlib_heldout"}),
                   "--output_path", str(tmp_path / "eval")])
    assert res["results"]["longshort_ppl"]["ppl_32,none"] > 1


def test_the_path_is_refused_in_one_line_when_it_names_no_family(own_module, tiny_llama2_dir, tmp_path):
    with pytest.raises(UnsupportedModelError, match=r"model.family='nowhere_pkg.X' is not a model family: "
                                                    r"'nowhere_pkg.X' does not import .*PYTHONPATH"):
        family_named("nowhere_pkg.X")
    with pytest.raises(UnsupportedModelError, match=r"names function in module own_family_pkg.my_families: a model "
                                                    r"family of your own is an instance of .*\.ModelFamily"):
        family_named(f"{PKG}.my_families.build_mymodel")
    with pytest.raises(UnsupportedModelError, match=r"model.family='mymodell' is not a model family: expected one of "
                                                    r"\['llama', .*\], or the dotted path of a ModelFamily"):
        family_named("mymodell")
    # a config.json of another model_type than the family it names
    with pytest.raises(UnsupportedModelError, match=rf"c.json: {FAMILY_KEY}='{PATH}' reads model_type 'mymodel', "
                                                    r"untied, not this config's model_type='llama'"):
        family_of({"model_type": "llama", FAMILY_KEY: PATH}, "c.json")
    assert family_named(PATH).name == PATH and family_of({"model_type": "mymodel"}).name == PATH


def test_an_unknown_model_type_is_told_how_to_add_a_family(tmp_path):
    with pytest.raises(UnsupportedModelError) as e:
        family_of({"model_type": "mymodel"}, "x/config.json")
    said = str(e.value)
    assert "\n" not in said and said.startswith("x/config.json: model_type='mymodel' (tie_word_embeddings=None) is "
                                                "not a supported model family. A family of your own: the dotted path "
                                                "of a ModelFamily in a module of yours")
    assert f"named as model.family or config.json's '{FAMILY_KEY}'" in said and "Supported: llama (" in said


def test_a_family_of_ones_own_from_dimensions_records_itself_in_step_0(own_module, tmp_path):
    """From random weights the family writes config.json; a folder written from it names the family (the writer
    converts with it, not with the shipped row of the same model_type)."""
    import dataclasses

    from torchtune_longshort.models.hf_model import decoder_config

    mod = sys.modules.get(f"{PKG}.my_families") or __import__(f"{PKG}.my_families", fromlist=["x"])
    mod.MYLLAMA = dataclasses.replace(MODEL_FAMILIES["llama"], name="myllama")  # llama's from_dims: model_type llama
    config = decoder_config({"family": f"{PKG}.my_families.MYLLAMA", "vocab_size": 64, "num_layers": 1,
                             "num_heads": 2, "embed_dim": 16, "max_seq_len": 32})
    assert config[FAMILY_KEY] == f"{PKG}.my_families.MYLLAMA" and config["model_type"] == "llama"
    assert family_of(config) is MODEL_FAMILIES[f"{PKG}.my_families.MYLLAMA"]
    assert family_of({k: v for k, v in config.items() if k != FAMILY_KEY}) is MODEL_FAMILIES["llama"]


def test_a_llama_family_of_ones_own_beside_a_llama_folder_is_told_to_name_it_in_the_folder(own_module,
                                                                                           tiny_llama2_dir,
                                                                                           sp_tokenizer_dir, tmp_path):
    """A family of one's own of model_type llama, named beside a llama folder: the table's llama row reads the folder
    (the README: a llama one goes to the table's llama rows unless config.json names the family). It was refused
    'model dimensions differ ... or give model.checkpoint_dir instead of family and dimensions', which the config
    gives; the fix named is the folder's key, and with it the config passes."""
    import dataclasses

    from recipe_config import make_cfg

    from torchtune_longshort.models import hf_decoder
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    mod = __import__(f"{PKG}.my_families", fromlist=["x"])
    mod.MYLLAMA = dataclasses.replace(MODEL_FAMILIES["llama"], name="myllama")  # reads model_type llama, untied
    mine = f"{PKG}.my_families.MYLLAMA"
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_llama2_dir, folder)
    model = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": str(folder), "family": mine}
    want = (f"model.family='{mine}' does not read checkpoint '{folder}', whose config.json is read by 'llama' (the "
            f"table's row for its model_type 'llama', as no '{FAMILY_KEY}' names one): set \"{FAMILY_KEY}\": "
            f"\"{mine}\" in {folder}/config.json (the folder's config.json decides its family, for evaluation too), "
            "or drop model.family")
    with pytest.raises(ValueError) as refused:
        LongShortFinetuneRecipe(make_cfg(folder, sp_tokenizer_dir, tmp_path / "run", model=model))
    assert str(refused.value) == want and not (tmp_path / "run").exists()
    with pytest.raises(UnsupportedModelError) as built:  # from Python, the builder says the same
        hf_decoder(checkpoint_dir=str(folder), family=mine)
    assert str(built.value) == want
    # a shipped family that does not read the folder (llama_tied: tied) is told to drop the key
    with pytest.raises(UnsupportedModelError, match=r"'llama_tied' reads model_type 'llama', tied, not this one's "
                                                    r"'llama' \(tie_word_embeddings=False\): drop model.family$"):
        hf_decoder(checkpoint_dir=str(folder), family="llama_tied")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, FAMILY_KEY: mine}))
    LongShortFinetuneRecipe(make_cfg(folder, sp_tokenizer_dir, tmp_path / "run", model=model))  # the fix: accepted


def test_a_family_of_ones_own_inside_rope_scaled_passes_the_config_check(own_module, tiny_llama2_dir, tmp_path):
    """The README's family of one's own named beside checkpoint_dir inside rope_scaled (model.model.family), YaRN to
    twice the folder's positions: the config check opened the folder to find the scaling's start before the family
    was imported, and refused it ("model_type='mymodel' ... is not a supported model family"); now the start is the
    folder's own max_position_embeddings (read here from its config.json)."""
    from torchtune_longshort.training.recipe_config.rope_node import scaling_start_of_node

    folder = _as_mymodel(tiny_llama2_dir, tmp_path / "ckpt")
    positions = json.loads((folder / "config.json").read_text())["max_position_embeddings"]
    model = {"_component_": "torchtune_longshort.models.rope_scaled", "method": "yarn", "max_seq_len": 2 * positions,
             "model": {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": str(folder),
                       "family": PATH}}
    assert PKG not in sys.modules  # as in a fresh longshort-validate / tune run process
    assert scaling_start_of_node(model) == positions


def test_the_readme_family_builds_the_rope_base_transformers_5_writes(own_module):
    """transformers 5 writes a folder's RoPE base inside rope_parameters, with no top-level rope_theta; the README's
    build_mymodel read config.get("rope_theta", 10_000.0) and built base 10000 for a 500000 folder (silently another
    model). Reference: the base transformers' own LlamaConfig holds after reading that config.json."""
    from transformers import LlamaConfig

    written = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    config = written.to_dict()
    assert "rope_theta" not in config  # the layout the README's builder must read
    model = family_named(PATH).build(config, 64, None)
    assert model.layers[0].attn.pos_embeddings.base == LlamaConfig(**config).rope_parameters["rope_theta"]


def test_the_readme_family_reads_left_out_kv_heads_as_transformers_does(own_module):
    """The README's build_mymodel read a left-out num_key_value_heads as num_attention_heads
    (``config.get("num_key_value_heads") or heads``), where the shipped rows ask transformers' class of the folder's
    model_type: copied for a model_type transformers knows, it built 64 key/value heads where MistralConfig gives 8.
    Reference: MistralConfig's own num_key_value_heads for that config.json; for mymodel, num_attention_heads."""
    from transformers import MistralConfig

    config = dict(vocab_size=32, hidden_size=512, intermediate_size=32, num_hidden_layers=1, num_attention_heads=64,
                  model_type="mistral")
    with torch.device("meta"):
        model = family_named(PATH).build(config, 64, None)
        mine = family_named(PATH).build(dict(config, model_type="mymodel"), 64, None)
    assert model.layers[0].attn.num_kv_heads == MistralConfig(**config).num_key_value_heads
    assert mine.layers[0].attn.num_kv_heads == config["num_attention_heads"]
    # rms_norm_eps left out too (config["rms_norm_eps"] raised KeyError): MistralConfig's, else llama2()'s own 1e-5
    assert model.norm.eps == MistralConfig(**config).rms_norm_eps
    assert mine.norm.eps == inspect.signature(llama2).parameters["norm_eps"].default
