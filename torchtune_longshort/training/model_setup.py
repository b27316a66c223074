"""The recipe's model: built from the config (full, LoRA or QLoRA), checked, made trainable, optionally sharded with
FSDP2 (torchtune's ``training.shard_model``), and loaded with its start weights.

Everything here is the model side of the recipe's ``_setup_model`` (``torchtune_longshort/training/recipe_setup.py``);
it reads the config nodes it is given and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchtune import config, modules, training
from torchtune.modules.peft import DoRALinear, LoRALinear, get_adapter_params, set_trainable_params
from torchtune.modules.peft.lora import _lora_a_init_params, _lora_b_init_params

from torchtune_longshort.models.family_builders import NF4_BLOCK as _NF4_BLOCK
from torchtune_longshort.models.hf_checkpoint import own_tensors, shape_mismatch
from torchtune_longshort.models.hf_model import decoder_config
from torchtune_longshort.models.scratch_config import DIMENSION_KEYS
from torchtune_longshort.plural import counted
from torchtune_longshort.training.learned_rope import shard_model
from torchtune_longshort.training.module_names import clean_module_name



def model_kwargs(cfg_model: Mapping[str, Any]) -> Dict[str, Any]:
    """The builder kwargs of the (innermost) model node, looking through ``rope_scaled`` wrappers."""
    node = OmegaConf.to_container(cfg_model, resolve=True) if isinstance(cfg_model, DictConfig) else dict(cfg_model)
    while isinstance(node.get("model"), Mapping):
        node = dict(node["model"])
    return {k: v for k, v in node.items() if k != "_component_"}


def scratch_config(cfg_model: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``config.json`` of random weights the model node gives (:func:`~torchtune_longshort.models.hf_model.
    decoder_config` of its innermost node), a dimension it refuses named by its config path: ``model.vocab_size=-1``
    (``model.model.vocab_size`` inside ``rope_scaled``), as the config check names every other field."""
    node, where = cfg_model, "model"
    while isinstance(node.get("model"), Mapping):
        node, where = node["model"], f"{where}.model"
    try:
        return decoder_config(model_kwargs(cfg_model))
    except ValueError as e:
        said = str(e)
        if said.split("=", 1)[0] in (*DIMENSION_KEYS, "max_seq_len"):
            raise ValueError(f"{where}.{said}") from None
        raise


@dataclass
class LoRAInfo:
    """The adapter settings of a built model (``rank`` is None for full fine-tuning), once :func:`set_trainable`
    ran the names of its trainable parameters (saved with each checkpoint), and the folder of the weights the
    adapters apply to (``base_dir``: the start checkpoint, the saved adapter's ``base_model_name_or_path``)."""

    rank: Optional[int] = None
    alpha: Optional[float] = None
    dropout: float = 0.0  # the adapters' dropout (written into the PEFT adapter's config)
    trainable_names: List[str] = field(default_factory=list)
    base_dir: Optional[str] = None
    quantized_base: Optional[str] = None  # "nf4" for QLoRA: the base the adapters were trained on is not base_dir's

    @property
    def enabled(self) -> bool:
        return self.rank is not None


def build_model(cfg_model: DictConfig, device: torch.device, dtype: torch.dtype, on_meta: bool):
    """``(model, LoRAInfo)``: ``cfg_model`` instantiated in ``dtype`` (on the meta device when sharding follows)."""
    with training.set_default_dtype(dtype), (torch.device("meta") if on_meta else device):
        model = config.instantiate(cfg_model)
    lora = [m for m in model.modules() if isinstance(m, LoRALinear)]
    dropout = getattr(lora[0], "dropout", None) if lora else None
    info = LoRAInfo(rank=lora[0].rank, alpha=lora[0].alpha,
                    dropout=float(dropout.p) if isinstance(dropout, nn.Dropout) else 0.0,
                    quantized_base="nf4" if getattr(lora[0], "_quantize_base", False) else None) if lora else LoRAInfo()
    return model, info


def check_quantized_shapes(model: nn.Module, world_size: int) -> None:
    """FSDP2 splits each weight along dim 0 across ranks, so every NF4 weight needs numel divisible by
    ``64 * 256 * world_size`` (and dim 0 by ``world_size``). Refuse other shapes before any weight is loaded."""
    bad = []
    for name, p in model.named_parameters():
        if type(p).__name__ == "NF4Tensor" or type(getattr(p, "data", None)).__name__ == "NF4Tensor":
            if p.numel() % (_NF4_BLOCK * world_size) or p.shape[0] % world_size:
                bad.append(f"{name} {tuple(p.shape)}")
    if bad:
        raise ValueError(
            f"QLoRA (NF4) cannot quantize/shard {counted(len(bad), 'weight')} at world_size={world_size}: "
            f"{bad[:3]}... Each quantized weight needs numel divisible by 64 * 256 * world_size = "
            f"{_NF4_BLOCK * world_size} (and dim 0 by world_size); choose model dimensions that satisfy it "
            "(e.g. embed_dim 256, intermediate_dim 768 for 2 processes) or quantize_base=False"
        )


def set_trainable(model: nn.Module, lora: LoRAInfo, train_embeddings_and_norms: bool) -> None:
    """LoRA: the adapters train (and, for LongQLoRA, the embeddings and norms), and a learned RoPE's own parameters
    (CLEX's ODE: the method, not the base; frozen, the released initialisation's ``ode_down_proj = 0`` would stay
    and the run would not be CLEX); full fine-tuning: all. ``lora.trainable_names`` are what the PEFT adapter
    carries; the learned RoPE goes to the checkpoint's side file, as in a full fine-tune."""
    if not lora.enabled:
        return
    trainable = set(get_adapter_params(model))
    if train_embeddings_and_norms:
        trainable |= {n for n, _ in model.named_parameters() if "tok_embeddings" in n or "norm" in n}
    learned_rope = {n for n, _ in model.named_parameters() if ".pos_embeddings." in n}
    set_trainable_params(model, trainable | learned_rope)
    lora.trainable_names = sorted(trainable)


def with_learned_rope(model: nn.Module, saved: Dict[str, torch.Tensor], learned_rope: Dict[str, torch.Tensor]):
    """``saved`` plus learned RoPE parameters (CLEX), which all layers share, under every layer's name."""
    out = dict(saved)
    for k in [n for n in model.state_dict() if ".pos_embeddings." in n]:
        sub = k.split(".pos_embeddings.", 1)[1]
        if sub in learned_rope:
            out[k] = learned_rope[sub]
    return out


def shard_and_load(
    model: nn.Module, model_sd: Dict[str, torch.Tensor], saved: Dict[str, torch.Tensor], device: torch.device,
    dtype: torch.dtype, reshard_after_forward: bool,
) -> None:
    """FSDP2: shard the meta-device ``model`` (a learned RoPE's parameters replicated, not sharded:
    ``torchtune_longshort.training.learned_rope``), materialize what no checkpoint holds, load ``model_sd`` +
    ``saved``."""
    shard_model(
        model,
        # The loss applies model.output itself, outside the decoder's forward; as its own FSDP unit its forward hooks
        # gather the weight whenever the loss calls it (and reshard it after).
        [lambda n, m: isinstance(m, modules.TransformerSelfAttentionLayer) or n in ("output", "decoder.output")],
        reshard_after_forward=reshard_after_forward,
    )
    with training.set_default_dtype(dtype), device:
        for m in model.modules():
            if isinstance(m, (LoRALinear, DoRALinear)) and not saved:
                # A new adapter is in no checkpoint: materialize it (LoRA's B = 0, so step 1's loss is the base
                # model's, as in one process) -- torchtune's lora_finetune_distributed does the same.
                m.to_empty(device=device)
                m.initialize_parameters()
            if hasattr(m, "rope_init"):
                m.rope_init()
    training.load_from_full_model_state_dict(model, {**model_sd, **saved}, device, strict=False)
    training.validate_no_params_on_meta_device(model)


def load_local(
    model: nn.Module, model_sd: Dict[str, torch.Tensor], saved: Dict[str, torch.Tensor], device: torch.device,
    where: str, fix: Optional[Callable[[str], str]] = None,
) -> None:
    """One process: load ``model_sd`` (refusing a checkpoint that does not fit, named by ``where``, its detail
    framed by ``fix``), then ``saved``."""
    missing, unexpected = model.load_state_dict(model_sd, strict=False)
    missing = [k for k in missing if ".pos_embeddings." not in k and "lora_" not in k and "magnitude" not in k]
    if missing or unexpected:
        detail = f"missing={missing[:5]} unexpected={unexpected[:5]}"
        raise ValueError(f"{where}: {fix(detail) if fix else detail}")
    if saved:
        model.load_state_dict(saved, strict=False)
    model.to(device)


def load_weights(
    model: nn.Module, model_sd: Dict[str, torch.Tensor], resumed: Dict[str, torch.Tensor], *, distributed: bool,
    device: torch.device, dtype: torch.dtype, reshard_after_forward: bool, where: str,
    fix: Optional[Callable[[str], str]] = None,
) -> None:
    """Load the start weights ``model_sd`` and a resumed run's ``resumed`` weights (its adapters, learned RoPE):
    sharded with FSDP2 across ranks (:func:`shard_and_load`) or in one process (:func:`load_local`). A weight whose
    shape is not the model's (a config.json that does not describe its weights) is refused in one line naming
    ``where``, on either path (FSDP2's load raised torch's multi-line size mismatch); ``fix`` frames the detail
    (which weights, how) with what to do."""
    wrong = shape_mismatch(own_tensors(model), model_sd)
    if wrong is not None:
        raise ValueError(f"{where}: {fix(wrong) if fix else wrong}")
    if distributed:
        shard_and_load(model, model_sd, resumed, device, dtype, reshard_after_forward=reshard_after_forward)
    else:
        load_local(model, model_sd, resumed, device, where, fix)


def resumed_weights(model: nn.Module, trainable: Optional[Dict[str, torch.Tensor]],
                    learned_rope: Dict[str, torch.Tensor]):
    """What a resumed run loads over the start weights: the saved trainable weights (LoRA) and the learned RoPE
    parameters of the resumed step (CLEX)."""
    saved = dict(trainable or {})
    return with_learned_rope(model, saved, learned_rope) if learned_rope else saved


def initial_adapters(model: nn.Module, seed: int) -> Dict[str, torch.Tensor]:
    """A new run's LoRA adapters, whole, by state-dict name: drawn by torchtune's own rule (``LoRALinear``'s
    ``_lora_a_init_params`` / ``_lora_b_init_params``: Kaiming-uniform A, zero B) on CPU twins of each module's
    ``lora_a`` / ``lora_b``, from the random stream seeded with ``seed`` (forked: the run's own stream is left as
    it was), module by module in the model's order; float32, cast where they are loaded.

    Loaded in place of the adapters the model drew itself, so that a run starts from the same adapters in one
    process and in several: FSDP2 materializes a sharded model's adapters rank by rank, each shard from the rank's
    own random stream, so the 2-process run's A differed from the 1-process run's (its step-1 loss agreed, B being
    zero; its gradients did not).
    """
    out: Dict[str, torch.Tensor] = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        for name, m in model.named_modules():
            if isinstance(m, LoRALinear):
                prefix = clean_module_name(name)
                for part, init in (("lora_a", _lora_a_init_params), ("lora_b", _lora_b_init_params)):
                    rows, cols = getattr(m, part).weight.shape
                    twin = nn.utils.skip_init(nn.Linear, cols, rows, bias=False, dtype=torch.float32)
                    init(twin)
                    out[f"{prefix}.{part}.weight"] = twin.weight.detach()
    return out
