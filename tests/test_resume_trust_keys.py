"""A component's ``trust_remote_code`` (62c7b95: ``hf_decoder``'s, ``checkpoint_tokenizer``'s,
``FullModelHFRopeCheckpointer``'s; the recipe's config accepts each) says whether a folder's code of one's own may be
imported, not what the run trains; ``resume=True ... model.model.trust_remote_code=true`` was refused 'resume=True
with a config that changes what the run trains ...: model.model.trust_remote_code: None -> True'. The reference:
``checkpointer.trust_remote_code``, the recipe's own key for the same permission, which a resume never compares
(components.RESUME_IGNORED); a real change beside it is still refused."""

from __future__ import annotations

import pytest

from torchtune_longshort.training.resume import RESUME_POLICY, compare_resume_config

INNER = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "start"}
SAVED = {"output_dir": "o", "seq_len": 64, "max_steps": 2,
         "model": {"_component_": "torchtune_longshort.models.rope_scaled", "method": "linear", "max_seq_len": 512,
                   "model": INNER},
         "tokenizer": {"_component_": "torchtune_longshort.models.checkpoint_tokenizer", "path": "start"},
         "checkpointer": {"_component_": "torchtune_longshort.models.FullModelHFRopeCheckpointer",
                          "checkpoint_dir": "start", "checkpoint_files": ["model.safetensors"], "model_type": "LLAMA2",
                          "output_dir": "o"}}


def _with(config, path, value):
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items()}
    node, *rest = path.split(".")
    if rest == ["model", "trust_remote_code"]:
        out["model"]["model"] = {**out["model"]["model"], "trust_remote_code": value}
    else:
        out[node][rest[-1]] = value
    return out


@pytest.mark.parametrize("key", ["model.model.trust_remote_code", "tokenizer.trust_remote_code"])
@pytest.mark.parametrize("value", [True, False])
def test_a_components_trust_remote_code_is_not_compared_on_resume(key, value):
    assert RESUME_POLICY["checkpointer.trust_remote_code"] == "ignored"  # the reference
    assert compare_resume_config(SAVED, _with(SAVED, "checkpointer.trust_remote_code", value)) == []
    assert compare_resume_config(SAVED, _with(SAVED, key, value)) == []  # added on resume
    assert compare_resume_config(_with(SAVED, key, True), SAVED) == []  # dropped on resume
    changed = _with(_with(SAVED, key, value), "tokenizer.max_seq_len", 99)
    with pytest.raises(ValueError, match=r"tokenizer\.max_seq_len: .* -> 99") as e:
        compare_resume_config(SAVED, changed)
    assert "trust_remote_code" not in str(e.value)
