"""Weight conversions of the model families: a Hugging Face state dict to torchtune's and back, each torchtune's own
``convert_weights`` function (the one its ``FullModelHFCheckpointer`` dispatches on ``model_type``) with the head
counts read from the folder's ``config.json``.

Which conversion a folder gets is the family table's (:data:`~torchtune_longshort.models.families.MODEL_FAMILIES`:
``hf_to_tune`` / ``tune_to_hf``); torchtune is imported on the first conversion, not on import.
"""

from __future__ import annotations

from typing import Any, Dict

import torch

from torchtune_longshort.models.family_builders import Config, kv_heads

StateDict = Dict[str, torch.Tensor]


def _heads(config: Config) -> Dict[str, Any]:
    return dict(num_heads=int(config["num_attention_heads"]), num_kv_heads=kv_heads(config),
                dim=int(config["hidden_size"]), head_dim=config.get("head_dim"))


def hf_to_tune_default(sd: StateDict, config: Config) -> StateDict:
    from torchtune.models.convert_weights import hf_to_tune

    sd = {k: v for k, v in sd.items() if "rotary_emb.inv_freq" not in k}
    out = hf_to_tune(sd, **_heads(config))
    if config.get("tie_word_embeddings"):
        out.pop("output.weight", None)  # a tied folder may still store lm_head (a copy of the embeddings)
    return out


def tune_to_hf_default(sd: StateDict, config: Config) -> StateDict:
    from torchtune.models.convert_weights import tune_to_hf

    return tune_to_hf(sd, **_heads(config))


def hf_to_tune_qwen2(sd: StateDict, config: Config) -> StateDict:
    from torchtune.models.qwen2._convert_weights import qwen2_hf_to_tune

    return qwen2_hf_to_tune(sd, **_heads(config), tie_word_embeddings=bool(config.get("tie_word_embeddings")))


def tune_to_hf_qwen2(sd: StateDict, config: Config) -> StateDict:
    from torchtune.models.qwen2._convert_weights import qwen2_tune_to_hf

    return qwen2_tune_to_hf(sd, **_heads(config), tie_word_embeddings=bool(config.get("tie_word_embeddings")))


def hf_to_tune_phi3(sd: StateDict, config: Config) -> StateDict:
    from torchtune.models.phi3._convert_weights import phi3_hf_to_tune

    h = _heads(config)
    return phi3_hf_to_tune(sd, num_heads=h["num_heads"], num_kv_heads=h["num_kv_heads"], dim=h["dim"])


def tune_to_hf_phi3(sd: StateDict, config: Config) -> StateDict:
    from torchtune.models.phi3._convert_weights import phi3_tune_to_hf

    return phi3_tune_to_hf(sd)
