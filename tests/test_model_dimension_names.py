"""A model node's dimension refused from random weights (``longshort-validate tiny/longshort_stdlib.yaml
model.vocab_size=-1``) was named 'model: vocab_size=-1 is not accepted: ...' where every other field is named by its
path ('optimizer.lr=-1 is not accepted: ...'); it is now 'model.vocab_size=-1 ...' (``model.model.<key>`` inside a
``rope_scaled`` wrapper), and from Python (``hf_decoder(vocab_size=-1)``) the keyword alone. The reference: the config
check's own words for a field (config.values.refuse)."""

from __future__ import annotations

import pytest
from recipe_config import make_cfg

from torchtune_longshort.config.values import refuse

SCRATCH = {"_component_": "torchtune_longshort.models.hf_decoder", "family": "llama", "vocab_size": 512,
           "num_layers": 1, "num_heads": 4, "num_kv_heads": 2, "embed_dim": 64, "max_seq_len": 256}
ROPE = "torchtune_longshort.models.rope_scaled"
CASES = [("vocab_size", -1, "an integer >= 1"), ("num_layers", 0, "an integer >= 1"),
         ("norm_eps", -1.0, "a finite number > 0 and < 1 (an epsilon: 1e-05 for Llama-2)"),
         ("rope_base", 0.5, "a finite number > 1")]


@pytest.mark.parametrize("key,value,accepted", CASES)
def test_a_dimension_is_named_by_its_path(tmp_path, sp_tokenizer_dir, key, value, accepted):
    from torchtune_longshort.training.recipe_config import load_recipe_config

    for where, model in [("model", {**SCRATCH, key: value}),
                         ("model.model", {"_component_": ROPE, "method": "linear", "max_seq_len": 512,
                                          "model": {**SCRATCH, key: value}})]:
        with pytest.raises(ValueError) as e:
            load_recipe_config(make_cfg(None, sp_tokenizer_dir, tmp_path / "out", model=model))
        assert str(e.value) == str(refuse(f"{where}.{key}", value, accepted))
    assert not (tmp_path / "out").exists()


def test_a_division_names_the_node_and_python_the_keyword(tmp_path, sp_tokenizer_dir):
    from torchtune_longshort.models import hf_decoder
    from torchtune_longshort.training.recipe_config import load_recipe_config

    with pytest.raises(ValueError, match=r"^model\.num_heads=4 is not divisible by num_kv_heads=3 "):
        load_recipe_config(make_cfg(None, sp_tokenizer_dir, tmp_path / "out", model={**SCRATCH, "num_kv_heads": 3}))
    dims = {k: v for k, v in SCRATCH.items() if k != "_component_"}
    with pytest.raises(ValueError) as e:
        hf_decoder(**{**dims, "vocab_size": -1})
    assert str(e.value) == str(refuse("vocab_size", -1, "an integer >= 1"))
