"""torchtune's ``FullModelHFCheckpointer`` for a step with learned RoPE parameters (CLEX's ODE), for torchtune's own
recipes (``tune run generate``, ``full_finetune_single_device``, ``lora_finetune_single_device``, ...).

A step keeps CLEX's ODE in a side file (:data:`~torchtune_longshort.models.hf_rope.ROPE_SIDE_FILE`) beside the HF
weights, which torchtune's checkpointer does not read: a model built by
:func:`~torchtune_longshort.models.hf_model.hf_decoder` then misses ``layers.<i>.attn.pos_embeddings.ode_up_proj``,
... in the recipe's strict ``load_state_dict``, and saving such a model stops in torchtune's ``tune_to_hf``
(``Found unexpected key``). :class:`FullModelHFRopeCheckpointer` is the same checkpointer with the side file read
and written; on a folder without one it is torchtune's, unchanged::

    checkpointer:
      _component_: torchtune_longshort.models.FullModelHFRopeCheckpointer
      checkpoint_dir: <run>/step_<k>
      ...                                   # torchtune's FullModelHFCheckpointer arguments
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import torch
from torchtune import training
from torchtune.training import FullModelHFCheckpointer

from torchtune_longshort.models.hf_checkpoint import CONFIG_FILE, check_rope_side_file, load_rope_parameters
from torchtune_longshort.models.hf_checkpoint_writer import write_rope_side_file
from torchtune_longshort.models.hf_rope import SPEC_KEY, split_rope_state_dict
from torchtune_longshort.rope import ROPE_METHODS
from torchtune_longshort.rope.checkpoint_code import check_checkpoint_path, component_code

# How torchtune's own recipes trust the RoPE method of one's own a step folder names (no reader's gate around them).
CHECKPOINTER_FIX = ("checkpointer.trust_remote_code=true (FullModelHFRopeCheckpointer's argument; from Python, "
                    "trust_remote_code=True)")
_ATTENTION_KEY = re.compile(r"^(layers\.\d+\.attn)\.")


def check_side_file(checkpoint_dir: Path, trust_remote_code: Optional[bool] = None) -> None:
    """Refuse, in one line naming the folder, a ``config.json`` whose RoPE method learns parameters without the side
    file that holds them, or a side file beside a method that has none (the two would load another model); a method
    of one's own it names is imported only when trusted (:func:`~torchtune_longshort.rope.checkpoint_code.
    component_code`: torchtune's recipes set no reader's gate, ``checkpointer.trust_remote_code: true``)."""
    config_file = checkpoint_dir / CONFIG_FILE
    if not config_file.is_file():
        return  # torchtune's checkpointer names the missing config.json
    try:  # only this project's spec names a learned method; a hub config.json is torchtune's to read
        method = (json.loads(config_file.read_text()).get(SPEC_KEY) or {}).get("method")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return
    with component_code(trust_remote_code, CHECKPOINTER_FIX):
        check_checkpoint_path(method, ROPE_METHODS, str(config_file), f"{SPEC_KEY}.method")
        check_rope_side_file(checkpoint_dir, method, f"checkpointer.checkpoint_dir={str(checkpoint_dir)!r}",
                             fix="copy the step folder whole")


class FullModelHFRopeCheckpointer(FullModelHFCheckpointer):
    """torchtune's ``FullModelHFCheckpointer`` (same arguments) that also reads and writes the step's learned RoPE
    parameters (CLEX's ODE: :data:`~torchtune_longshort.models.hf_rope.ROPE_SIDE_FILE`).

    ``load_checkpoint`` returns them under the model's keys, ``layers.<i>.attn.pos_embeddings.<name>`` for every
    layer (the RoPE module is one, shared by every attention), as :func:`~torchtune_longshort.models.hf_model.
    load_hf_checkpoint` loads them; ``save_checkpoint`` takes them out of the state dict torchtune converts and
    writes them, once, to ``epoch_<n>/`` + the side file (torchtune copies ``config.json``, which names the
    method). A folder with no learned RoPE loads and saves exactly as with torchtune's class.
    """

    def __init__(self, checkpoint_dir: str, checkpoint_files: Union[List[str], Dict[str, str]], model_type: str,
                 output_dir: str, adapter_checkpoint: Optional[str] = None, recipe_checkpoint: Optional[str] = None,
                 resume_from_checkpoint: bool = False, safe_serialization: bool = True,
                 should_load_recipe_state: bool = False, trust_remote_code: Optional[bool] = None) -> None:
        # torchtune's arguments, spelled out: tune validate and the recipe's config check read this signature
        check_side_file(Path(checkpoint_dir), trust_remote_code)  # before torchtune's makes output_dir
        super().__init__(checkpoint_dir, checkpoint_files, model_type, output_dir,
                         adapter_checkpoint=adapter_checkpoint, recipe_checkpoint=recipe_checkpoint,
                         resume_from_checkpoint=resume_from_checkpoint, safe_serialization=safe_serialization,
                         should_load_recipe_state=should_load_recipe_state)

    def load_checkpoint(self) -> Dict[str, Any]:
        state = super().load_checkpoint()
        learned = load_rope_parameters(self._checkpoint_dir)
        if learned:
            model_sd = state[training.MODEL_KEY]
            attentions = sorted({m.group(1) for m in map(_ATTENTION_KEY.match, model_sd) if m},
                                key=lambda p: int(p.split(".")[1]))
            for attn in attentions:
                for name, value in learned.items():
                    model_sd[f"{attn}.pos_embeddings.{name}"] = value
        return state

    def save_checkpoint(self, state_dict: Dict[str, Any], epoch: int, intermediate_checkpoint: bool = False,
                        adapter_only: bool = False) -> None:
        rope_sd: Dict[str, torch.Tensor] = {}
        if not adapter_only and training.MODEL_KEY in state_dict:
            state_dict[training.MODEL_KEY], rope_sd = split_rope_state_dict(state_dict[training.MODEL_KEY])
        super().save_checkpoint(state_dict, epoch, intermediate_checkpoint=intermediate_checkpoint,
                                adapter_only=adapter_only)
        if rope_sd:
            write_rope_side_file(Path(self._output_dir) / f"epoch_{epoch}", rope_sd)
