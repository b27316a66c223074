"""Model builders and checkpoint helpers (torchtune decoders + RoPE scaling)."""

from torchtune_longshort.models.families import MODEL_FAMILIES, ModelFamily, UnsupportedModelError, family_of
from torchtune_longshort.models.hf_checkpoint import CheckpointFolder, check_checkpoint_folder, read_hf_config
from torchtune_longshort.models.hf_checkpoint_writer import save_hf_checkpoint, write_hf_checkpoint
from torchtune_longshort.models.hf_llama import hf_config_from_llama_kwargs, write_random_llama2_checkpoint
from torchtune_longshort.models.hf_model import build_decoder, hf_decoder, load_hf_checkpoint
from torchtune_longshort.models.tokenizer_formats import (
    TOKENIZER_FORMATS,
    SourceTokenizer,
    checkpoint_tokenizer,
    load_tokenizer,
)
from torchtune_longshort.models.hf_rope import (
    hf_config_updates,
    rope_scaling_to_hf,
    rope_spec_from_hf_config,
    rope_state_dict,
    split_rope_state_dict,
    update_hf_config,
)
from torchtune_longshort.models.hf_tokenizer import copy_tokenizer, write_hf_tokenizer_files
from torchtune_longshort.models.llama2_longshort import (
    llama2_7b_longshort,
    llama2_13b_longshort,
    llama2_longshort,
    longqlora_llama2,
    longqlora_llama2_7b,
    longqlora_trainable_params,
    lora_llama2_7b_longshort,
    lora_llama2_13b_longshort,
    lora_llama2_longshort,
    qlora_llama2_7b_longshort,
    qlora_llama2_13b_longshort,
)
from torchtune_longshort.models.rope_scaling import apply_rope_scaling, rope_attention_layers, rope_scaled
from torchtune_longshort.models.s2_attn import disable_s2_attn, enable_s2_attn, s2_attention

__all__ = [
    "MODEL_FAMILIES",
    "ModelFamily",
    "UnsupportedModelError",
    "family_of",
    "CheckpointFolder",
    "build_decoder",
    "hf_decoder",
    "TOKENIZER_FORMATS",
    "SourceTokenizer",
    "checkpoint_tokenizer",
    "load_tokenizer",
    "check_checkpoint_folder",
    "copy_tokenizer",
    "write_hf_tokenizer_files",
    "hf_config_from_llama_kwargs",
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
    "llama2_longshort",
    "llama2_7b_longshort",
    "llama2_13b_longshort",
    "lora_llama2_longshort",
    "lora_llama2_7b_longshort",
    "lora_llama2_13b_longshort",
    "qlora_llama2_7b_longshort",
    "qlora_llama2_13b_longshort",
    "longqlora_llama2",
    "longqlora_llama2_7b",
    "longqlora_trainable_params",
    "enable_s2_attn",
    "disable_s2_attn",
    "s2_attention",
]
