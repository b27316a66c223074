"""A config.json that is no JSON object, or whose model_type is no string, is refused naming the file, as transformers
refuses it too."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("content", [[{"model_type": "llama"}], {"model_type": ["llama"]}, {"model_type": 5}, "x"])
def test_a_config_json_that_is_no_object_or_names_no_model_type_string_is_refused(content, tmp_path):
    """A list at the top, or model_type ["llama"], raised AttributeError / "unhashable type" tracebacks; transformers
    refuses both folders too."""
    from transformers import AutoConfig

    from torchtune_longshort.models.hf_checkpoint import read_hf_config

    (tmp_path / "config.json").write_text(json.dumps(content))
    with pytest.raises((ValueError, TypeError)):
        AutoConfig.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match=rf"^{tmp_path}/config.json: (holds a JSON|model_type=)"):
        read_hf_config(tmp_path)
