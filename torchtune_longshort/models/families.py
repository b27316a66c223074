"""Model families: the one table that says, for a Hugging Face checkpoint's ``config.json``, which torchtune decoder
it is, how its weights convert, which checkpointer ``model_type`` torchtune gives it and which tokenizer formats it
ships with.

Everything that builds or converts a model from a checkpoint folder asks :func:`family_of` (through
:class:`~torchtune_longshort.models.hf_checkpoint.CheckpointFolder`): the recipe, the ``longshort`` eval model, the
misalignment CLI, the study and :func:`~torchtune_longshort.models.hf_checkpoint.save_hf_checkpoint`. Nothing else
branches on a family.

=============  ======================  ==============  =======================================================
family         ``config.json``         torchtune       hub models (all tested as tiny random checkpoints in
                                       ``model_type``  their HF layout; SmolLM2-135M also with real weights)
=============  ======================  ==============  =======================================================
llama          llama, untied           LLAMA2/LLAMA3   Llama-2, Llama-3, Llama-3.1 (its ``llama3`` rope type)
                                       (/LLAMA3_2)
llama_tied     llama, tied             LLAMA3_2        Llama-3.2 1B/3B, SmolLM / SmolLM2
                                       (/LLAMA3/2)
mistral        mistral                 MISTRAL         Mistral-7B v0.1-v0.3 (sliding window not applied, as in
                                                       torchtune: full attention)
qwen2          qwen2, tied or untied   QWEN2           Qwen2, Qwen2.5 (q/k/v biases)
gemma          gemma                   GEMMA           Gemma 2B/7B (tied, scaled embeddings, GeGLU)
phi3           phi3                    PHI3_MINI/PHI4  Phi-3-mini 4k / 128k, Phi-3.5-mini, Phi-4 (14B) (fused qkv /
                                                       gate_up; the 128k models' ``longrope`` is :mod:`~torchtune_
                                                       longshort.rope.longrope`; Phi-4's tokenizer.json)
=============  ======================  ==============  =======================================================

Left out, with the reason: **Gemma-2** (torchtune 0.6.1's ``Gemma2FinalNorm`` soft-caps the final *hidden state*
where transformers soft-caps the *logits*, so the two libraries run different models from one folder; and its logit
cap would also bypass the fused loss, which projects hidden states itself); **Phi-4-mini** (a ``phi3`` config that
rotates 3/4 of each head: refused naming ``partial_rotary_factor``); **Qwen3** (no torchtune 0.6.1 builder);
Llama-3.2-Vision, Qwen2-VL, T5, CLIP and reward heads (not RoPE decoders of text alone).

Each builder is torchtune's own component builder with the dimensions read from ``config.json``
(:mod:`~torchtune_longshort.models.family_builders`); the conversions are torchtune's own ``convert_weights``
functions, the ones its ``FullModelHFCheckpointer`` dispatches on ``model_type``
(:mod:`~torchtune_longshort.models.family_conversions`).

A family of one's own (another ``model_type``, a builder and conversions of one's own) is a :class:`ModelFamily` in
one's own module, named by its dotted path (``model.family: my_families.MYMODEL``) wherever a family name goes: the
table (a :class:`~torchtune_longshort.rope.registry.DottedInstances`, as ``ROPE_METHODS`` is for RoPE methods)
imports it on its first lookup in each process, and a checkpoint written from it records the path in its
``config.json`` (:data:`FAMILY_KEY`), which :func:`family_of` reads first.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import nn

from torchtune_longshort.launcher import launched_rank
from torchtune_longshort.models.family_builders import (
    Config, UnsupportedModelError, build_gemma, build_llama, build_mistral, build_phi3, build_qwen2, check_nf4_shapes,
)
from torchtune_longshort.models.family_conversions import (
    StateDict, hf_to_tune_default, hf_to_tune_phi3, hf_to_tune_qwen2, tune_to_hf_default, tune_to_hf_phi3,
    tune_to_hf_qwen2,
)
from torchtune_longshort.models.scratch_config import llama_config
from torchtune_longshort.rope import ROPE_METHODS
from torchtune_longshort.rope.base import check_rope_table
from torchtune_longshort.rope.checkpoint_code import check_checkpoint_path, shipped
from torchtune_longshort.rope.registry import DottedInstances, is_dotted_path

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------ the table
@dataclass(frozen=True)
class ModelFamily:
    """One RoPE decoder family (see the module table).

    ``build(config, max_seq_len, lora)`` is the torchtune decoder with the folder's dimensions and pre-trained RoPE
    base (random weights; ``lora`` holds torchtune's LoRA keywords or None); ``hf_to_tune`` / ``tune_to_hf`` convert
    state dicts; ``tokenizer_formats`` lists the formats of
    :data:`~torchtune_longshort.models.tokenizer_formats.TOKENIZER_FORMATS` its folders ship, in the order tried;
    ``from_dims`` writes the ``config.json`` of random weights from torchtune's dimension keywords (None: none).
    """

    name: str
    hub_models: str
    hf_model_type: str
    tied: Optional[bool]  # the config's tie_word_embeddings this entry takes; None: either
    tied_default: bool  # transformers' default for the model type when config.json omits it
    torchtune_model_types: Tuple[str, ...]  # checkpointer model_type values that convert this family correctly
    architecture: str
    build: Callable[[Config, int, Optional[Dict[str, Any]]], nn.Module]
    hf_to_tune: Callable[[StateDict, Config], StateDict] = hf_to_tune_default
    tune_to_hf: Callable[[StateDict, Config], StateDict] = tune_to_hf_default
    tokenizer_formats: Tuple[str, ...] = ("sentencepiece", "hf_json")
    # transformers rope types the family's transformers config accepts (None: every type); another scaling is
    # written as not representable, so lm-eval's hf refuses the folder instead of running another model.
    hf_rope_types: Optional[Tuple[str, ...]] = None
    notes: str = ""
    from_dims: Optional[Callable[[Dict[str, Any]], Config]] = None
    # config.json keys of an attention window the torchtune builder does not apply (it attends to every position):
    # a window shorter than the model's length is said when the model is built, and a checkpoint this project
    # writes sets the key to null, so that transformers runs the full attention the model has
    unapplied_window_keys: Tuple[str, ...] = ()
    # the tokenizer class transformers' AutoTokenizer builds for every folder of this family, whatever its
    # tokenizer_config.json names (transformers 5 rebuilds Qwen2's split regex and NFC from the vocabulary); a
    # tokenizer.json whose own pipeline differs is read as that class reads it (models.hf_json_tokenizer)
    hf_tokenizer_class: Optional[str] = None

    def decoder(self, config: Config, max_seq_len: int, lora: Optional[Dict[str, Any]] = None) -> nn.Module:
        """:attr:`build`, after refusing a RoPE table of ``max_seq_len`` positions that the device the model is
        built on (the default device) cannot hold (torchtune's RoPE builds it whole, at construction) and QLoRA
        weights NF4 cannot quantize (torchtune quantizes at construction)."""
        head_dim = config.get("head_dim") or int(config["hidden_size"]) // int(config["num_attention_heads"])
        check_rope_table(int(max_seq_len), int(head_dim), torch.get_default_device())
        check_nf4_shapes(config, lora)
        for key in self.unapplied_window_keys:
            window = config.get(key)
            # every process of a launch builds the model: said on rank 0 alone
            if isinstance(window, int) and not isinstance(window, bool) and window < int(max_seq_len) \
                    and launched_rank() == 0:
                logger.warning("%s: config.json %s=%d is not applied: this model attends to every position "
                               "(torchtune's builder), transformers to the last %d only, so the two differ from "
                               "position %d on; checkpoints written here set %s to null (full attention in both)",
                               self.name, key, window, window, window, key)
        return self.build(config, max_seq_len, lora)

    def check_builds(self, config: Config) -> None:
        """Refuse what :attr:`build` refuses in ``config`` (a bias, head size, sliding window or partial rotation) on
        the meta device, as the config check asks before a run (``longshort-validate`` said OK to a folder whose run
        then refused it); at 1 position: none depends on it, and opening the folder checks config.json's positions."""
        with torch.device("meta"):
            self.build(config, 1, None)

    @property
    def torchtune_model_type(self) -> str:
        """The checkpointer ``model_type`` to write in a torchtune config for this family."""
        return self.torchtune_model_types[0]

    def config_from_dims(self, dims: Dict[str, Any], where: str = "model") -> Config:
        """The ``config.json`` of this family's model with torchtune's dimension keywords ``dims`` (a family of one's
        own is recorded in it: :func:`recorded_family`)."""
        if self.from_dims is None:
            have = [f.name for f in MODEL_FAMILIES.values() if f.from_dims is not None]
            raise UnsupportedModelError(f"{where}.family={self.name!r}: random weights from dimensions are written "
                                        f"for {have} only; start from a {self.name} checkpoint (checkpoint_dir)")
        return recorded_family(self.from_dims(dims), self)  # one's own: the folders written from it say so

    def tied_in(self, config: Config) -> bool:
        """Whether a ``config.json`` of this family ties its output layer to its embeddings."""
        return bool(config.get("tie_word_embeddings", self.tied_default))

    def matches(self, config: Config) -> bool:
        if config.get("model_type") != self.hf_model_type:
            return False
        return self.tied is None or self.tied_in(config) == self.tied


# torchtune's FullModelHFCheckpointer converts a Llama folder, tied or not, alike under these three (one hf_to_tune; a
# tied folder has no lm_head): Llama-3.2 from a copied llama3_8b config (LLAMA3) was refused as not converting it
LLAMA_MODEL_TYPES = ("LLAMA2", "LLAMA3", "LLAMA3_2")

# A family of one's own is named by the dotted path of a ModelFamily in a module of one's own (my_module.MYMODEL), as
# a RoPE method of one's own is (rope.registry): imported on first lookup in each process that asks (the config check,
# each rank, the eval reading a checkpoint's config.json, where the checkpoint writer records the path: FAMILY_KEY)
MODEL_FAMILIES: Dict[str, ModelFamily] = DottedInstances({
    f.name: f
    for f in (
        ModelFamily("llama", "Llama-2, Llama-3, Llama-3.1", "llama", tied=False, tied_default=False,
                    torchtune_model_types=LLAMA_MODEL_TYPES, architecture="LlamaForCausalLM",
                    build=lambda c, n, lora: build_llama(c, n, lora, tied=False),
                    tokenizer_formats=("sentencepiece", "hf_json", "tiktoken"),
                    from_dims=lambda dims: llama_config(dims, tied=False)),
        ModelFamily("llama_tied", "Llama-3.2 1B/3B, SmolLM, SmolLM2", "llama", tied=True, tied_default=False,
                    torchtune_model_types=("LLAMA3_2", "LLAMA3", "LLAMA2"), architecture="LlamaForCausalLM",
                    build=lambda c, n, lora: build_llama(c, n, lora, tied=True),
                    tokenizer_formats=("hf_json", "tiktoken", "sentencepiece"),
                    from_dims=lambda dims: llama_config(dims, tied=True)),
        ModelFamily("mistral", "Mistral-7B v0.1-v0.3", "mistral", tied=False, tied_default=False,
                    torchtune_model_types=("MISTRAL",), architecture="MistralForCausalLM", build=build_mistral,
                    notes="sliding_window is not applied (torchtune's mistral builder: full attention)",
                    unapplied_window_keys=("sliding_window",)),
        ModelFamily("qwen2", "Qwen2, Qwen2.5", "qwen2", tied=None, tied_default=False,
                    torchtune_model_types=("QWEN2",), architecture="Qwen2ForCausalLM", build=build_qwen2,
                    hf_to_tune=hf_to_tune_qwen2, tune_to_hf=tune_to_hf_qwen2, tokenizer_formats=("hf_json",),
                    hf_tokenizer_class="Qwen2Tokenizer"),
        ModelFamily("gemma", "Gemma 2B/7B", "gemma", tied=True, tied_default=True,
                    torchtune_model_types=("GEMMA",), architecture="GemmaForCausalLM", build=build_gemma),
        # torchtune's PHI4 (its phi4 configs' model_type) converts as PHI3_MINI does (one branch of its checkpointer)
        ModelFamily("phi3", "Phi-3-mini 4k / 128k, Phi-3.5-mini, Phi-4 (14B)", "phi3", tied=False, tied_default=False,
                    torchtune_model_types=("PHI3_MINI", "PHI4"), architecture="Phi3ForCausalLM", build=build_phi3,
                    hf_to_tune=hf_to_tune_phi3, tune_to_hf=tune_to_hf_phi3, hf_rope_types=("default", "longrope"),
                    notes="sliding_window is not applied (torchtune's phi3 builder: full attention); transformers' "
                          "Phi3Config accepts only default / longrope RoPE (a base change still loads there)",
                    unapplied_window_keys=("sliding_window",)),
    )
}, base=ModelFamily, what="model family", name_attr="name")
# config.json's key naming the family of one's own that reads the folder (written by the checkpoint writer)
FAMILY_KEY = "longshort_family"
OWN_FAMILY_HINT = ("A family of your own: the dotted path of a ModelFamily in a module of yours (my_module.MYMODEL, "
                   f"importable: installed, or its folder on PYTHONPATH), named as model.family or config.json's "
                   f"{FAMILY_KEY!r} (the README shows one: 'A family of your own')")
# Families torchtune 0.6.1 knows but this table leaves out, and why (the refusal says it).
LEFT_OUT = {
    "gemma2": "torchtune 0.6.1 soft-caps Gemma-2's final hidden state where transformers soft-caps its logits: the "
              "two run different models from one folder",
    "mllama": "Llama-3.2-Vision: torchtune 0.6.1 builds it as a vision encoder fused into a decoder with "
              "cross-attention layers (llama3_2_vision), not a RoPE decoder of text alone",
    "qwen3": "torchtune 0.6.1 has no Qwen3 builder: the qwen2 one lacks Qwen3's per-head q/k RMSNorm",
}
VISION_LEFT_OUT = ("mllama",)  # of LEFT_OUT: no model of text alone, for this package or lm-eval's hf


def supported() -> str:
    """One line per family: name, config.json model_type / tying, hub models (for refusals and the README)."""
    rows = [f"{f.name} (model_type {f.hf_model_type!r}{_tying(f)}: {f.hub_models})" for f in MODEL_FAMILIES.values()]
    return "; ".join(rows)


def family_of(config: Config, where: str = "config.json") -> ModelFamily:
    """The family of a parsed ``config.json``: the one its :data:`FAMILY_KEY` names (a family of one's own, imported),
    else the first whose ``model_type`` and tying match; :class:`UnsupportedModelError` naming the supported ones
    (and how to add one) otherwise."""
    mt = config.get("model_type")
    check_checkpoint_code(config, where)
    if config.get(FAMILY_KEY) is not None:
        family = family_named(config[FAMILY_KEY], f"{where}: {FAMILY_KEY}")
        if not family.matches(config):
            raise UnsupportedModelError(
                f"{where}: {FAMILY_KEY}={config[FAMILY_KEY]!r} reads model_type {family.hf_model_type!r}"
                f"{_tying(family)}, not this config's model_type={mt!r} (tie_word_embeddings="
                f"{config.get('tie_word_embeddings')!r}): name the family that reads it, or drop {FAMILY_KEY}")
        return family
    for f in MODEL_FAMILIES.values():
        if f.matches(config):
            return f
    # a text model transformers runs is still evaluated by lm-eval's own model (the vision one is no text model)
    hint = "; lm-eval's --model hf evaluates it" if mt in LEFT_OUT and mt not in VISION_LEFT_OUT else ""
    why = f" ({LEFT_OUT[mt]}{hint})" if mt in LEFT_OUT else f"{_other_tying(config, where)}. {OWN_FAMILY_HINT}"
    raise UnsupportedModelError(
        f"{where}: model_type={mt!r} (tie_word_embeddings={config.get('tie_word_embeddings')!r}) is not a supported "
        f"model family{why}. Supported: {supported()}"
    )


def hf_default_positions(config: Config) -> Optional[int]:
    """The ``max_position_embeddings`` transformers gives a config.json of a family's ``model_type`` that names none:
    its config class's default (``AutoConfig.for_model``: LlamaConfig 2048, Qwen2Config 32768, ...); else None."""
    from transformers import CONFIG_MAPPING, AutoConfig  # only for a folder that leaves the key out

    mt = config.get("model_type")
    known = any(f.hf_model_type == mt for f in MODEL_FAMILIES.values()) and mt in CONFIG_MAPPING
    return int(AutoConfig.for_model(mt).max_position_embeddings) if known else None


def names_own_code(config: Config) -> bool:
    """Whether a checkpoint's parsed ``config.json`` names code outside the package (:func:`check_checkpoint_code`'s
    keys), which a reader asked to trust nothing refuses whatever this process imported."""
    spec = config.get("longshort_rope")
    paths = (config.get(FAMILY_KEY), spec.get("method") if isinstance(spec, dict) else None)
    return any(is_dotted_path(p) and not shipped(p) for p in paths)


def check_checkpoint_code(config: Config, where: str = "config.json") -> None:
    """Refuse, before it is imported, code of one's own that a checkpoint's parsed ``config.json`` names
    (:data:`FAMILY_KEY`, ``longshort_rope.method``) where a reader of someone's checkpoint has not been asked to
    trust it (:mod:`torchtune_longshort.rope.checkpoint_code`); both keys at once, before anything reads either."""
    check_checkpoint_path(config.get(FAMILY_KEY), MODEL_FAMILIES, where, FAMILY_KEY)
    spec = config.get("longshort_rope")
    if isinstance(spec, dict):
        check_checkpoint_path(spec.get("method"), ROPE_METHODS, where, "longshort_rope.method")


def family_named(name: Any, where: str = "model.family") -> ModelFamily:
    """The family of :data:`MODEL_FAMILIES` called ``name``, or a family of one's own at dotted path ``name``
    (imported and kept); a refusal naming the field, the names and how to add one otherwise."""
    if isinstance(name, str) and dict.__contains__(MODEL_FAMILIES, name):
        return MODEL_FAMILIES[name]
    if is_dotted_path(name):
        try:
            return MODEL_FAMILIES.load(name)
        except ValueError as e:
            raise UnsupportedModelError(f"{where}={name!r} is not a model family: {e}") from None
    raise UnsupportedModelError(f"{where}={name!r} is not a model family: expected one of {_shipped()}, or the "
                                "dotted path of a ModelFamily of your own, e.g. my_module.MYMODEL (importable: "
                                "installed, or its folder on PYTHONPATH)")


def check_family_beside(name: Any, folder: str, config: Config, where: str = "model.family") -> None:
    """``model.family`` named beside checkpoint folder ``folder`` (its parsed ``config.json``: ``config``) must be the
    family that reads it (:func:`family_of`), or a refusal with the fix: the folder's config.json names the family
    (:data:`FAMILY_KEY`), which decides it, where ``name``'s family reads that ``model_type`` too (a ``llama`` one
    of one's own: the table's ``llama`` rows read it first); else drop the key."""
    family, theirs = family_named(name, where), family_of(config, f"{folder}/config.json")
    if family is theirs:
        return
    said = f"{where}={name!r} does not read checkpoint {folder!r}, whose config.json is read by {theirs.name!r}"
    if family.matches(config):
        why = (f"its {FAMILY_KEY!r} names it" if config.get(FAMILY_KEY) is not None else
               f"the table's row for its model_type {config.get('model_type')!r}, as no {FAMILY_KEY!r} names one")
        raise UnsupportedModelError(
            f"{said} ({why}): set {json.dumps({FAMILY_KEY: name})[1:-1]} in {folder}/config.json (the folder's "
            f"config.json decides its family, for evaluation too), or drop {where}")
    raise UnsupportedModelError(
        f"{said}; {name!r} reads model_type {family.hf_model_type!r}{_tying(family)}, not this one's "
        f"{config.get('model_type')!r} (tie_word_embeddings={config.get('tie_word_embeddings')!r}): drop {where}")


def recorded_family(config: Config, family: ModelFamily) -> Config:
    """``config`` (a copy) with :data:`FAMILY_KEY` naming ``family`` when it is one of one's own (its name is its
    dotted path), so that a process that never imported it reads the folder: what a written checkpoint says."""
    return dict(config, **{FAMILY_KEY: family.name}) if is_dotted_path(family.name) else dict(config)


def _shipped() -> list:
    return [name for name in MODEL_FAMILIES if not is_dotted_path(name)]


def _other_tying(config: Config, where: str) -> str:
    """Why a family of this ``model_type`` under the other tying does not read ``config``: its builder's own refusal
    where it has one (a tied Phi-4-mini rotates 3/4 of each head: the reason the README names), else the tying."""
    for f in MODEL_FAMILIES.values():
        if f.hf_model_type == config.get("model_type") and f.tied is not None:
            try:
                f.check_builds({**config, "tie_word_embeddings": f.tied})
            except UnsupportedModelError as e:
                raise UnsupportedModelError(f"{where}: {e}") from None
            return f" (family {f.name} reads model_type {f.hf_model_type!r}{_tying(f)} only)"
    return ""


def _tying(family: ModelFamily) -> str:
    return "" if family.tied is None else (", tied" if family.tied else ", untied")


def torchtune_model_type_name(model_type: Any) -> Optional[str]:
    """The torchtune ``ModelType`` name that a config's ``checkpointer.model_type`` spells, case-blind (``llama2`` and
    ``LLAMA2``: one member, whose name is ``LLAMA2`` and value ``llama2``), whether or not torchtune has it; None for
    a value that is no string. Two values name one model type when their names are equal."""
    return model_type.upper() if isinstance(model_type, str) else None


def converted_alike(model_type: Any, other: Any) -> bool:
    """Whether two ``checkpointer.model_type`` values convert a checkpoint alike: one ModelType in any case
    (:func:`torchtune_model_type_name`), or two that one family of the table lists (torchtune's
    ``FullModelHFCheckpointer`` takes one branch for a Llama folder under LLAMA2 / LLAMA3 / LLAMA3_2, and for a Phi
    one under PHI3_MINI / PHI4), so that a resumed run may name either (this recipe converts by the family alone)."""
    a, b = torchtune_model_type_name(model_type), torchtune_model_type_name(other)
    return a is not None and (a == b or any({a, b} <= set(f.torchtune_model_types) for f in MODEL_FAMILIES.values()))


def check_torchtune_model_type(family: ModelFamily, model_type: Optional[str], where: str,
                               decided_by: str = "the folder's config.json") -> None:
    """Refuse a config's ``checkpointer.model_type`` (``where``: its key's path) that would convert ``family``'s
    weights wrongly (``decided_by``: what says the family when the key is left out)."""
    if model_type is None or torchtune_model_type_name(model_type) in family.torchtune_model_types:
        return
    raise UnsupportedModelError(
        f"{where}={model_type!r} does not convert a {family.name!r} checkpoint ({family.hub_models}); "
        f"use model_type: {family.torchtune_model_type} (or leave it out: {decided_by} decides)"
    )


def families_table_markdown() -> str:
    """The family table as Markdown (the README's, generated from :data:`MODEL_FAMILIES`)."""
    lines = ["| family | config.json | torchtune checkpointer `model_type` | tokenizer formats | hub models |",
             "|---|---|---|---|---|"]
    for f in (MODEL_FAMILIES[name] for name in _shipped()):
        tie = "tied or untied" if f.tied is None else ("tied" if f.tied else "untied")
        lines.append(f"| `{f.name}` | `{f.hf_model_type}`, {tie} | {' / '.join(f.torchtune_model_types)} | "
                     f"{', '.join(f.tokenizer_formats)} | {f.hub_models} |")
    return "\n".join(lines)
