"""Model builders and checkpoint helpers: every model is built by the family table (``hf_decoder``), optionally
with RoPE scaling (``rope_scaled``).

``FullModelHFRopeCheckpointer`` (torchtune's checkpointer that also reads and writes a step's learned RoPE, for
torchtune's own recipes) is imported on first use: it subclasses torchtune's class, and the config checks that import
this package run without torchtune."""

from typing import Any

from torchtune_longshort.models.families import MODEL_FAMILIES, ModelFamily, family_named, family_of
from torchtune_longshort.models.family_builders import UnsupportedModelError
from torchtune_longshort.models.hf_checkpoint import CheckpointFolder, check_checkpoint_folder, read_hf_config
from torchtune_longshort.models.hf_checkpoint_writer import save_hf_checkpoint, write_hf_checkpoint
from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint
from torchtune_longshort.models.hf_model import build_decoder, decoder_config, hf_decoder, load_hf_checkpoint
from torchtune_longshort.models.source_tokenizers import SourceTokenizer
from torchtune_longshort.models.tokenizer_formats import TOKENIZER_FORMATS, checkpoint_tokenizer, load_tokenizer
from torchtune_longshort.models.hf_rope import (
    hf_config_updates,
    rope_scaling_to_hf,
    rope_spec_from_hf_config,
    rope_state_dict,
    split_rope_state_dict,
    update_hf_config,
)
from torchtune_longshort.models.hf_tokenizer import copy_tokenizer, write_hf_tokenizer_files
from torchtune_longshort.models.rope_scaling import apply_rope_scaling, rope_attention_layers, rope_scaled
from torchtune_longshort.models.s2_attn import disable_s2_attn, enable_s2_attn, s2_attention

__all__ = [
    "MODEL_FAMILIES",
    "ModelFamily",
    "UnsupportedModelError",
    "family_named",
    "family_of",
    "CheckpointFolder",
    "FullModelHFRopeCheckpointer",
    "build_decoder",
    "hf_decoder",
    "decoder_config",
    "TOKENIZER_FORMATS",
    "SourceTokenizer",
    "checkpoint_tokenizer",
    "load_tokenizer",
    "check_checkpoint_folder",
    "copy_tokenizer",
    "write_hf_tokenizer_files",
    "write_hf_checkpoint",
    "read_hf_config",
    "write_random_llama2_checkpoint",
    "apply_rope_scaling",
    "rope_scaled",
    "rope_attention_layers",
    "rope_scaling_to_hf",
    "rope_spec_from_hf_config",
    "hf_config_updates",
    "update_hf_config",
    "load_hf_checkpoint",
    "save_hf_checkpoint",
    "rope_state_dict",
    "split_rope_state_dict",
    "enable_s2_attn",
    "disable_s2_attn",
    "s2_attention",
]


def __getattr__(name: str) -> Any:
    if name == "FullModelHFRopeCheckpointer":
        from torchtune_longshort.models import rope_checkpointer  # deferred: torchtune (see the module docstring)

        return rope_checkpointer.FullModelHFRopeCheckpointer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
