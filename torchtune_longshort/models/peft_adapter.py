"""A LoRA run's adapters as a PEFT adapter folder: ``adapter_model.safetensors`` + ``adapter_config.json``, what
``peft.PeftModel.from_pretrained(base, folder)``, vLLM and the hub load, written and read by this one module.

The recipe writes it as ``step_<k>/adapter/`` beside the merged weights of ``step_<k>/``, not into ``step_<k>/``
itself: transformers 5 loads a folder holding both ``config.json`` and ``adapter_config.json`` as the model *plus*
the adapter (it calls ``load_adapter`` on the merged weights; with peft 0.18.1 that call fails, ``No module named
'peft.utils.transformers_weight_conversion'``), so ``AutoModelForCausalLM.from_pretrained`` and lm-eval's ``hf``
model read ``step_<k>/`` as the merged model it is only while the adapter sits in its own folder.

Weight names and layouts are converted by the folder's model family (:mod:`~torchtune_longshort.models.families`:
torchtune's own conversions, the ones the merged checkpoint is written with), so an adapter is right wherever the
merged weights are: the q/k rows permuted for Llama-layout RoPE, not permuted for Qwen2, and torchtune's separate
q/k/v (gate/up) projections fused into Phi-3's ``qkv_proj`` (``gate_up_proj``). A conversion only moves rows
(permutes, concatenates), so ``B`` (``[out, r]``) goes through it as a weight and ``A`` keeps its layout; an HF
module fed by several torchtune modules gets their ``A`` stacked and their ``B`` side by side (rank ``k r``, alpha
``k alpha``: the same scale ``alpha / r``), declared in ``rank_pattern`` / ``alpha_pattern``. Trained embeddings and
norms (LongQLoRA) are PEFT ``modules_to_save``. ``longshort_adapter.json`` records which torchtune module went where,
so that :func:`read_peft_adapter` (a resumed run) gets the exact tensors back, and, when the run changed the
base's RoPE (a scaling, a length, a base), ``base_config``: an adapter carries no RoPE, so PEFT on the start folder
as it is evaluates another model (SmolLM2, YaRN x2: 13% off in logits); the base must load with the step folder's
``config.json`` (:func:`base_config_note`, which the recipe prints once the run ends).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch

from torchtune_longshort.models.families import ModelFamily, family_of
from torchtune_longshort.models.hf_rope import not_representable_method, rope_of_config, saved_hf_config
from torchtune_longshort.output_guard import plain_file_mode
from torchtune_longshort.refusals import RESTART
from torchtune_longshort.started_as import EVAL_MAIN, advised_command

ADAPTER_DIR = "adapter"  # the adapter folder's name inside a step folder
WEIGHTS_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
LAYOUT_FILE = "longshort_adapter.json"
ADAPTER_FILES = (WEIGHTS_FILE, CONFIG_FILE, LAYOUT_FILE)  # every file write_peft_adapter writes (PEFT's config too)
PEFT_PREFIX = "base_model.model."
_LORA_A, _LORA_B = ".lora_a.weight", ".lora_b.weight"

StateDict = Dict[str, torch.Tensor]


def adapter_folder_hint(folder: Path, peft_route: bool = False) -> str:
    """What to do with a PEFT adapter folder given where a model folder goes (no config.json beside its
    ``adapter_config.json``); "" for another folder. ``peft_route``: also name lm-eval's ``hf`` with ``peft=``,
    for the caller that is that command (a training run, ``longshort-misalignment`` and the ``longshort`` model take
    no adapter: there the step folder is the one fix)."""
    if not (folder / CONFIG_FILE).is_file() or (folder / "config.json").is_file():
        return ""
    step = f"its step folder {str(folder.parent)!r} (the adapters merged)" if (folder / LAYOUT_FILE).is_file() \
        else "the merged model"
    if not peft_route:
        return f"it is a PEFT adapter folder, no model: give {step} instead"
    return (f"it is a PEFT adapter folder, no model: evaluate {step}, or the base with it: --model hf --model_args "
            f"pretrained=<its base>,peft={folder}")


def is_adapter_key(key: str) -> bool:
    """Whether torchtune state-dict entry ``key`` is an adapter's (LoRA's ``lora_a`` / ``lora_b``, DoRA's
    ``magnitude``), which a merged checkpoint does not hold."""
    return "lora_" in key or key.endswith("magnitude")


def lora_modules(tune_sd: StateDict) -> List[str]:
    """The torchtune module names that carry LoRA weights, sorted."""
    return sorted(k[: -len(_LORA_A)] for k in tune_sd if k.endswith(_LORA_A))


def _group(module: str) -> str:
    """Modules one conversion call must see together: one decoder layer (a fused HF module's partners), or the
    top level (``output``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) + "." if parts[0] == "layers" else ""


def _blocks_to_hf(family: ModelFamily, config: Dict[str, Any], tune_sd: StateDict, modules: List[str], width: int
                  ) -> Dict[str, List[Tuple[str, torch.Tensor]]]:
    """``{hf weight name: [(torchtune module, its B with rows as the HF module has them), ...]}`` for ``modules`` of
    one group: each module's ``B`` sits in its own column block of a ``[out, width]`` matrix under its weight's name,
    the group's other weights are zeros (a fusing conversion needs its partners), and the family's conversion moves
    the rows; a ones-probe through the same conversion says which block landed in which HF weight."""
    r = tune_sd[modules[0] + _LORA_B].shape[1]
    prefix = _group(modules[0])
    names = [k for k, v in tune_sd.items() if k.startswith(prefix) and k.endswith(".weight") and v.dim() == 2
             and ".lora_" not in k]
    real = {k: torch.zeros(tune_sd[k].shape[0], width) for k in names}
    probe = {k: torch.zeros(tune_sd[k].shape[0], width) for k in names}
    for j, m in enumerate(modules):
        real[m + ".weight"][:, j * r:(j + 1) * r] = tune_sd[m + _LORA_B].float()
        probe[m + ".weight"][:, j * r:(j + 1) * r] = 1.0
    hf_real, hf_probe = family.tune_to_hf(real, config), family.tune_to_hf(probe, config)
    out: Dict[str, List[Tuple[str, torch.Tensor]]] = {}
    for key, p in hf_probe.items():
        for j, m in enumerate(modules):
            if p[:, j * r:(j + 1) * r].any():
                b = hf_real[key][:, j * r:(j + 1) * r].to(tune_sd[m + _LORA_B].dtype)
                out.setdefault(key, []).append((m, b))
    return out


def peft_adapter(tune_sd: StateDict, hf_config: Dict[str, Any], alpha: float, trainable: Iterable[str] = ()
                 ) -> Tuple[StateDict, Dict[str, Any], Dict[str, Any]]:
    """``(PEFT state dict, LoraConfig keyword arguments, layout)`` of the LoRA weights in ``tune_sd`` (torchtune
    names) and of the other ``trainable`` weights (embeddings, norms: ``modules_to_save``)."""
    family = family_of(hf_config, where="the adapter's config.json")
    modules = lora_modules(tune_sd)
    if not modules:
        raise ValueError("no LoRA weights (*.lora_a.weight) in the state dict: nothing to write as a PEFT adapter")
    if any(k.endswith(".magnitude") for k in tune_sd):
        raise ValueError("DoRA adapters (use_dora=True) are not written as PEFT files: train with LoRA")
    r = int(tune_sd[modules[0] + _LORA_A].shape[0])
    width = int(hf_config["hidden_size"])  # a Llama-layout q/k permutation needs rows of the model's width
    per_call = max(1, width // r)
    groups: Dict[str, List[str]] = {}
    for m in modules:
        groups.setdefault(_group(m), []).append(m)
    fed: Dict[str, List[Tuple[str, torch.Tensor]]] = {}
    for members in groups.values():
        for i in range(0, len(members), per_call):  # as many r-wide blocks as the width holds per call
            for key, parts in _blocks_to_hf(family, hf_config, tune_sd, members[i:i + per_call], width).items():
                fed.setdefault(key, []).extend(parts)
    sd: StateDict = {}
    layout: Dict[str, Any] = {"rank": r, "alpha": alpha, "modules": {}, "modules_to_save": {}}
    rank_pattern, alpha_pattern = {}, {}
    for key, parts in sorted(fed.items()):
        hf_module = key[: -len(".weight")]
        sd[f"{PEFT_PREFIX}{hf_module}.lora_A.weight"] = torch.cat([tune_sd[m + _LORA_A] for m, _ in parts])
        sd[f"{PEFT_PREFIX}{hf_module}.lora_B.weight"] = torch.cat([b for _, b in parts], dim=1).contiguous()
        for j, (m, _) in enumerate(parts):
            layout["modules"][m] = {"hf_module": hf_module, "offset": j * r}
        if len(parts) > 1:
            rank_pattern[hf_module], alpha_pattern[hf_module] = r * len(parts), alpha * len(parts)
    saved = sorted(k for k in trainable if ".lora_" not in k and ".pos_embeddings." not in k)
    for tune_key in saved:
        (hf_key, value), = family.tune_to_hf({tune_key: tune_sd[tune_key]}, hf_config).items()
        sd[PEFT_PREFIX + hf_key] = value.contiguous()
        layout["modules_to_save"][tune_key] = hf_key
    # whole module paths: PEFT takes each name that a module's path ends with, so a bare "norm" also took every
    # "*_layernorm" (weights this file lacks, when only some norms trained: PEFT's load then failed)
    to_save = {k.rsplit(".", 1)[0] for k in layout["modules_to_save"].values()}
    tied = _tied_output(hf_config, layout["modules_to_save"].values())
    kwargs = {"r": r, "lora_alpha": alpha, "target_modules": sorted({v["hf_module"].rsplit(".", 1)[-1]
                                                                      for v in layout["modules"].values()}),
              "rank_pattern": rank_pattern, "alpha_pattern": alpha_pattern, "lora_dropout": 0.0, "bias": "none",
              "task_type": "CAUSAL_LM", "modules_to_save": sorted(to_save) or None}
    if tied:  # PEFT's own flag: lm_head follows the trained embeddings (without it, it kept the base ones: 30% off).
        # lm_head is not listed in modules_to_save besides: its own copy made the model's tie_weights() (which
        # lm-eval's hf model calls after loading the adapter) raise KeyError "attribute 'weight' already exists"
        kwargs["ensure_weight_tying"] = True
    return sd, kwargs, layout


def _tied_output(hf_config: Dict[str, Any], saved_hf_keys: Iterable[str]) -> Optional[str]:
    """The trained input embedding's key among ``saved_hf_keys`` when the model ties its output to it (SmolLM2,
    Llama-3.2, the small Qwen2.5, Gemma), else None. PEFT's ``modules_to_save`` copies the embedding and leaves
    ``lm_head`` on the base weights (logits 30% off the merged checkpoint's) unless ``ensure_weight_tying`` ties it
    to the trained copy."""
    if not hf_config.get("tie_word_embeddings"):
        return None
    return next((k for k in saved_hf_keys if k.endswith("embed_tokens.weight")), None)


def write_peft_adapter(out_dir: Path, tune_sd: StateDict, hf_config: Dict[str, Any], *, alpha: float,
                       trainable: Iterable[str] = (), base_model: Optional[str] = None, dropout: float = 0.0,
                       quantized_base: Optional[str] = None, rope_spec: Optional[Dict[str, Any]] = None) -> Path:
    """Write ``out_dir`` (created) as a PEFT adapter folder of the LoRA weights of ``tune_sd`` (see the module doc);
    ``base_model`` becomes ``base_model_name_or_path``, ``dropout`` the config's ``lora_dropout`` (the run's, for
    whoever trains the adapter on with PEFT). ``quantized_base`` (QLoRA: ``"nf4"``) goes into the layout file as
    ``base_quantization``: those adapters were trained on the quantized base, so PEFT on ``base_model`` in full
    precision is not the trained model (the merged step folder is). ``rope_spec``: the run's RoPE scaling, as the
    step folder is written with it; the layout's ``base_config`` says so where ``base_model``'s RoPE is another.
    Returns ``out_dir``."""
    from peft import LoraConfig
    from safetensors.torch import save_file

    sd, kwargs, layout = peft_adapter(tune_sd, hf_config, alpha, trainable)
    layout["base_quantization"] = quantized_base
    layout["base_config"] = _base_config(saved_hf_config(hf_config, rope_spec, family_of(hf_config).hf_rope_types),
                                         base_model)
    kwargs["lora_dropout"] = float(dropout)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in sd.items()}, str(out_dir / WEIGHTS_FILE), metadata={"format": "pt"})
    plain_file_mode(out_dir / WEIGHTS_FILE)  # safetensors >= 0.8 leaves 0600
    # PEFT keeps target_modules as a set and writes it in the set's order, which each process's string hash seed
    # changes (two runs of one training, 1 or 2 processes, wrote adapter_config.json files that differed): sorted
    config = LoraConfig(base_model_name_or_path=base_model, **kwargs)
    for name, value in vars(config).items():
        if isinstance(value, set):
            setattr(config, name, sorted(value))
    config.save_pretrained(str(out_dir))
    (out_dir / LAYOUT_FILE).write_text(json.dumps(layout, indent=2) + "\n")
    return out_dir


def _rope_of(config: Dict[str, Any]) -> Tuple[Any, Any]:
    try:
        return rope_of_config(config)
    except (KeyError, TypeError, ValueError):
        return None, None


def _base_config(hf_config: Dict[str, Any], base_model: Optional[str]) -> Optional[Dict[str, Any]]:
    """The layout file's ``base_config``: None when ``base_model``'s own config.json has the run's RoPE (or cannot be
    read: a hub name), else the step's RoPE and how to load the base with it."""
    try:
        base = json.loads((Path(base_model) / "config.json").read_text()) if base_model else None
    except (OSError, ValueError):
        base = None
    if not isinstance(base, dict) or _rope_of(base) == _rope_of(hf_config):
        return None
    keys = ("rope_scaling", "rope_parameters", "rope_theta", "max_position_embeddings")
    return {"config": "../config.json", **{k: hf_config[k] for k in keys if k in hf_config}}


def _scaling_said(base_config: Dict[str, Any]) -> str:
    for key in ("rope_scaling", "rope_parameters"):
        if base_config.get(key):
            return f"{key} {base_config[key]}"
    return ", ".join(f"{k} {base_config.get(k)}" for k in ("rope_theta", "max_position_embeddings"))


def peft_base_command() -> str:
    """The command that writes the base folder --model hf needs for a step's adapters (eval/peft_base.py), named as
    this process was started (:func:`~torchtune_longshort.started_as.advised_command`: ``python -m
    torchtune_longshort.eval peft-base`` under ``python -m``, else ``longshort-eval peft-base``)."""
    return f"{advised_command(EVAL_MAIN)} peft-base"


def peft_base_out(step: Path) -> Path:
    """The ``--out`` a message advises for :func:`peft_base_command` on ``step``: beside the run
    (``run_step_3_base``), not inside it, where the run's own folder rules would meet a folder they did not write."""
    return Path(f"{step.parent}_{step.name}_base")


def base_config_note(step_dir: Optional[Path]) -> str:
    """A line (a newline first) for the user when ``step_dir``'s adapter needs its base loaded with the step's
    config.json (the run changed the RoPE: ``base_config`` in the layout file) or was trained on a quantized base
    (QLoRA: PEFT on the full-precision start is another model), else ""."""
    if step_dir is None:
        return ""
    try:
        layout = json.loads((Path(step_dir) / ADAPTER_DIR / LAYOUT_FILE).read_text())
        base = json.loads((Path(step_dir) / ADAPTER_DIR / CONFIG_FILE).read_text())["base_model_name_or_path"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    adapter, said = Path(step_dir) / ADAPTER_DIR, layout.get("base_config")
    if not said and layout.get("base_quantization"):  # QLoRA that kept the start's RoPE: still another model
        return (f"\n[longshort] adapter:    {adapter} was trained on {base} quantized "
                f"({layout['base_quantization']}): evaluate or serve the merged {step_dir} itself")
    if not said:
        return ""
    scaling, method = _scaling_said(said), not_representable_method(said)
    if method:  # CLEX: transformers refuses the step's config.json, so no base loads with it
        return (f"\n[longshort] adapter:    {adapter} was trained with {method} RoPE, which transformers cannot run: "
                f"evaluate the merged {step_dir} with longshort-eval --model longshort")
    if layout.get("base_quantization"):  # QLoRA: PEFT on the full-precision base is another model, RoPE or not
        return (f"\n[longshort] adapter:    {adapter} was trained on {base} quantized "
                f"({layout['base_quantization']}) and with the RoPE of {Path(step_dir) / 'config.json'} ({scaling}): "
                f"evaluate or serve the merged {step_dir} itself")
    out = peft_base_out(Path(step_dir))
    return (f"\n[longshort] adapter:    {adapter} trained on {base} with the RoPE of {Path(step_dir) / 'config.json'} "
            f"({scaling}), which an adapter cannot carry: {peft_base_command()} {step_dir} --out {out} writes the base "
            f"lm-eval's --model hf needs (pretrained={out},peft={adapter}); in Python, AutoModelForCausalLM."
            f"from_pretrained({str(base)!r}, config=AutoConfig.from_pretrained({str(step_dir)!r})), then "
            f"PeftModel.from_pretrained(base, {str(adapter)!r}); or use the merged {step_dir} itself")


def read_peft_adapter(adapter_dir: Path, hf_config: Dict[str, Any],
                      restart: Optional[Callable[[], str]] = None) -> StateDict:
    """The torchtune-named weights (``*.lora_a.weight``, ``*.lora_b.weight``, the ``modules_to_save`` ones) of an
    adapter folder this module wrote; ``FileNotFoundError`` naming the folder and the missing file. ``restart``: how
    the run trains anew instead (the recipe's ``StepCheckpoints.restart``: a user's file in output_dir named to move
    out first, which the overwrite advised alone then refused); None: start the run again with
    overwrite_output_dir=True."""
    from safetensors.torch import load_file

    adapter_dir = Path(adapter_dir)
    missing = [f for f in (WEIGHTS_FILE, CONFIG_FILE, LAYOUT_FILE) if not (adapter_dir / f).is_file()]
    if missing:
        anew = f"train anew: {restart()}" if restart else RESTART
        raise FileNotFoundError(f"LoRA adapter folder {str(adapter_dir)!r} lacks {', '.join(missing)}: the adapters "
                                f"of this step cannot be read back. Restore the folder, or {anew}")
    family = family_of(hf_config, where=f"{adapter_dir.parent / 'config.json'}")
    sd = load_file(str(adapter_dir / WEIGHTS_FILE))
    layout = json.loads((adapter_dir / LAYOUT_FILE).read_text())
    r, out = int(layout["rank"]), {}
    by_hf: Dict[str, List[Tuple[str, int]]] = {}
    for m, where in layout["modules"].items():
        by_hf.setdefault(where["hf_module"], []).append((m, int(where["offset"])))
    width = int(hf_config["hidden_size"])
    for hf_module, members in by_hf.items():
        a, b = sd[f"{PEFT_PREFIX}{hf_module}.lora_A.weight"], sd[f"{PEFT_PREFIX}{hf_module}.lora_B.weight"]
        for m, off in members:  # the module's r columns of B, back through the family's conversion (rows only)
            padded = torch.zeros(b.shape[0], width)
            padded[:, :r] = b[:, off:off + r].float()
            back = family.hf_to_tune({hf_module + ".weight": padded}, hf_config)
            out[m + _LORA_A] = a[off:off + r].clone()
            out[m + _LORA_B] = back[m + ".weight"][:, :r].to(b.dtype).contiguous()
    for tune_key, hf_key in layout["modules_to_save"].items():
        (key, value), = family.hf_to_tune({hf_key: sd[PEFT_PREFIX + hf_key]}, hf_config).items()
        out[tune_key] = value
    return out
