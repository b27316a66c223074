"""The ``_component_`` nodes the recipe builds, each checked before it is built where its arguments can be:
arguments bound against the component's signature (in :func:`~torchtune_longshort.config.fields.build_section`), and per
role:

* ``tokenizer``: its ``path`` exists, or (a tokenizer that trains one there) can be created;
* ``model``: every nested node bound too, every RoPE method name known (``rope_scaled``'s ``method``), each
  ``hf_decoder`` given a checkpoint folder or a family with dimensions, and its positions as far as the node declares
  them (:meth:`ModelConfig.declared_positions`); a ``rope_scaled`` node's arguments, start, factor and values
  (:mod:`.rope_node`);
* ``checkpointer``: the start checkpoint folder opens, and ``model_type`` converts its family;
* ``optimizer``: :mod:`.optimizer`'s.
"""

from __future__ import annotations

import importlib.util
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator, List, Mapping, Optional, Tuple

from torchtune_longshort.data.tokenizer_training import check_new_tokenizer_path
from torchtune_longshort.models.families import check_torchtune_model_type
from torchtune_longshort.models.family_builders import UnsupportedModelError, check_nf4_shapes, refuse_tied_output_lora
from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
from torchtune_longshort.models.hf_model import check_decoder_source
from torchtune_longshort.models.lora_settings import check_lora_settings
from torchtune_longshort.models.tokenizer_files import TokenizerError
from torchtune_longshort.models.tokenizer_formats import checkpoint_tokenizer, find_tokenizer
from torchtune_longshort.rope import ROPE_METHODS, check_rope_method, has_learned_parameters
from torchtune_longshort.training.recipe_config.rope_node import HF_DECODER, ROPE_SCALED, check_rope_node
from torchtune_longshort.config.fields import FROM_COMPONENT, ComponentSection, build_section, setting
from torchtune_longshort.config.values import boolean, integer, resolve_component, text

CHECKPOINT_TOKENIZER = "torchtune_longshort.models.checkpoint_tokenizer"


def _no_truncation(path: str, value: Any) -> None:
    """torchtune's tokenizers cut every tokenized sample to ``max_seq_len``: a torchtune dataset's documents would
    reach the stream cut to their first ``max_seq_len`` tokens (a corpus source calls ``encode``, which ignores it)."""
    raise ValueError(f"{path}={value!r} is not accepted: with it torchtune's dataset builders cut each document "
                     f"to its first {value!r} tokens (a corpus source ignores it), while this recipe packs whole "
                     f"documents and cuts its own windows of seq_len tokens; set {path}: null (the window length is "
                     "seq_len)")


@dataclass(frozen=True)
class TokenizerConfig(ComponentSection):
    """``tokenizer``: a torchtune tokenizer component (or ``torchtune_longshort.models.checkpoint_tokenizer``)."""

    LOCAL_CHECKS = True
    # it takes **_ and drops them: tokenizer.pathh=x (or a key of another tokenizer's) was ignored without a word
    DROPS_KWARGS: ClassVar[Tuple[str, ...]] = (f"{checkpoint_tokenizer.__module__}.checkpoint_tokenizer",)

    path: Optional[str] = setting(FROM_COMPONENT, doc="tokenizer file or folder", check=text)
    max_seq_len: Optional[int] = setting(None, doc="must be null: the windows are seq_len tokens of whole documents",
                                         check=_no_truncation)

    def trains_here(self) -> Optional[Path]:
        """The folder the component will train a tokenizer into (``path``, absent or an empty folder, of a component
        that trains a missing path), or None."""
        if self.path is None or not getattr(resolve_component("tokenizer._component_", self.component),
                                            "trains_missing_path", False):
            return None
        p = Path(self.path).expanduser()
        return p if not p.exists() or (p.is_dir() and not any(p.iterdir())) else None

    def check(self, where: str) -> None:
        if self.path is None:
            return
        p = Path(self.path).expanduser()
        component = resolve_component(f"{where}._component_", self.component)
        if getattr(component, "trains_missing_path", False):
            check_new_tokenizer_path(p, f"{where}.path")
            if self.trains_here() is not None and hasattr(component, "check_training_arguments"):
                component.check_training_arguments(self.args, where)
        elif not p.exists():
            raise FileNotFoundError(f"{where}.path={self.path!r} does not exist: name the tokenizer file (or the "
                                    "checkpoint folder, for torchtune_longshort.models.checkpoint_tokenizer)")
        elif component is checkpoint_tokenizer:
            try:  # which file it reads (no tokenizer loaded): a folder without one was refused only at setup
                find_tokenizer(p)
            except TokenizerError as e:
                raise FileNotFoundError(f"{where}.path={self.path!r}: {e}") from None


def _nodes(node: Mapping[str, Any], where: str) -> Iterator[Tuple[str, Mapping[str, Any]]]:
    """``(path, node)`` of ``node`` and every ``_component_`` node inside its arguments."""
    yield where, node
    for k, v in node.items():
        if isinstance(v, Mapping) and "_component_" in v:
            yield from _nodes(v, f"{where}.{k}")


def _check_tied_output_lora(path: str, node: Mapping[str, Any]) -> None:
    """``apply_lora_to_output`` over a folder whose output layer is tied to its embeddings: refused when the model
    was built, once setup had begun, naming the bare key (longshort-validate said OK)."""
    folder_dir = node.get("checkpoint_dir")
    if not node.get("apply_lora_to_output") or not folder_dir or not Path(str(folder_dir)).is_dir():
        return
    folder = CheckpointFolder.open(folder_dir)
    try:
        refuse_tied_output_lora({"apply_lora_to_output": True}, folder.family.tied_in(folder.config),
                                folder.family.hf_model_type)
    except UnsupportedModelError as e:
        raise ValueError(f"{path}.{e}") from None


@dataclass(frozen=True)
class ModelConfig(ComponentSection):
    """``model``: a builder (``torchtune_longshort.models.hf_decoder`` in every shipped config), possibly wrapped in
    ``rope_scaled``."""

    def check(self, where: str) -> None:
        for path, node in _nodes({"_component_": self.component, **self.args}, where):
            if path != where:
                build_section(ComponentSection, dict(node), path)
            if node["_component_"] == ROPE_SCALED and node.get("method") is not None:
                check_rope_method(node["method"], f"{path}.method")
            for key in ("max_seq_len", "original_max_seq_len"):  # 0 or -1: refused as seq_len past the model's
                # range (fix: lower seq_len), or as a RoPE factor < 1
                if isinstance(node.get(key), int) and node[key] < 1:
                    raise ValueError(f"{path}.{key}={node[key]!r} is not accepted: expected a number of positions >= "
                                     "1, or null")
            inner = node.get("model")
            if node["_component_"] == ROPE_SCALED and not (isinstance(inner, Mapping) and "_component_" in inner):
                # `model.model=<path>` (torchtune's shortcut is for top-level nodes) made the node a string: refused by
                # rope_scaled once the run had started, naming no config key
                raise ValueError(f"{path}.model={inner!r} is not accepted: rope_scaled wraps a model node (a mapping "
                                 f"with _component_, e.g. torchtune_longshort.models.hf_decoder); to change its "
                                 f"builder set {path}.model._component_")
            if node["_component_"] == HF_DECODER:
                check_decoder_source(node, path)
                check_lora_settings(node, path)
                _check_tied_output_lora(path, node)
            if node.get("use_dora"):
                raise ValueError(
                    f"{path}.use_dora={node['use_dora']!r} is not accepted: this recipe trains LoRA adapters; DoRA's "
                    "magnitude vector would need setting from the loaded base weights and its adapters a format of "
                    f"their own, which it does not do (the magnitude would start as uninitialized memory); set "
                    f"{path}.use_dora=False")
            check_rope_node(path, node)

    def open_folders(self, world_size: int = 1) -> None:
        """Open (and so check) each ``hf_decoder`` node's ``checkpoint_dir``, a refusal naming that node's key (it may
        name another folder than ``checkpointer.checkpoint_dir``; the same one is checked under that name first), and
        with ``quantize_base`` the shapes of the weights NF4 quantizes (from its ``config.json``) on ``world_size``
        processes."""
        for path, node in _nodes({"_component_": self.component, **self.args}, "model"):
            if node["_component_"] == HF_DECODER and node.get("checkpoint_dir"):
                folder = CheckpointFolder.open(node["checkpoint_dir"], field=f"{path}.checkpoint_dir")
                try:  # the builder's own refusals, as the run's build gives them
                    folder.family.check_builds(folder.config)
                except UnsupportedModelError as e:
                    raise UnsupportedModelError(f"checkpoint {str(folder.path)!r}: {e}") from None
                if node.get("lora_rank") is not None:  # QLoRA's shapes, from config.json (the build checked them)
                    check_nf4_shapes(folder.config, dict(node), f"{path}.quantize_base", world_size)

    def lora_settings(self) -> List[str]:
        """The ``field=value`` items that make the built model a LoRA one: a node's ``lora_rank``, or a torchtune
        LoRA builder as a component (``lora_llama2``, ``qlora_llama2_7b``, ...)."""
        out = []
        for path, node in _nodes({"_component_": self.component, **self.args}, "model"):
            if node.get("lora_rank") is not None:
                out.append(f"{path}.lora_rank={node['lora_rank']!r}")
            if str(node["_component_"]).rsplit(".", 1)[-1].startswith(("lora_", "qlora_")):
                out.append(f"{path}._component_={node['_component_']!r}")
        return out

    def learned_rope(self, local: bool = True) -> Optional[Tuple[str, str]]:
        """``(field, method)`` when the built model's RoPE has learned parameters (CLEX): the outermost
        ``rope_scaled`` method that says so, else (``local``) an ``hf_decoder`` folder's own scaling; else None."""
        for path, node in _nodes({"_component_": self.component, **self.args}, "model"):
            if node["_component_"] == ROPE_SCALED and node.get("method") in ROPE_METHODS:
                method = node["method"]
                return (f"{path}.method", method) if has_learned_parameters(method) else None
            if node["_component_"] == HF_DECODER and local and node.get("checkpoint_dir"):
                method = (CheckpointFolder.open(node["checkpoint_dir"]).rope_spec or {}).get("method")
                return (f"{path}.checkpoint_dir", method) if has_learned_parameters(method) else None
        return None

    def resumed_node(self, step_spec: Optional[Mapping[str, Any]]):
        """The node a run resuming from a step whose RoPE spec is ``step_spec`` (its config.json's ``longshort_rope``)
        builds: a top-level ``rope_scaled`` of the step's learned method takes the settings the step's learned
        parameters were trained with (CLEX's ``act``, ``param_factor``, ...) where it gives none. ``rope_scaled`` keeps
        the start checkpoint's there; a run saved before it did (2026-12-05) trained its ODE under the node's defaults
        (act silu over a tanh step) and resumed under the start checkpoint's (tanh) without a word."""
        node = self.node()
        cls = ROPE_METHODS.get(self.args.get("method")) if self.component == ROPE_SCALED else None
        if cls is None:
            return node
        kept, _ = cls.kept_learned_settings(step_spec, self.args)  # the method's one rule (rope_scaled asks it too)
        for k, v in kept.items():
            node[k] = v
        return node

    def declared_positions(self, local: bool = True) -> Optional[int]:
        """The positions the built model will have, as far as its node says: the outermost ``max_seq_len`` given,
        an ``hf_decoder``'s folder's usable length (``local``: the folder is read), a builder's default; None when
        only the built model can say."""
        for _, node in _nodes({"_component_": self.component, **self.args}, "model"):
            if isinstance(node.get("max_seq_len"), int):
                return node["max_seq_len"]
            if node["_component_"] == HF_DECODER and not local:
                return None
            if node["_component_"] == HF_DECODER and node.get("checkpoint_dir") and not node.get("plain_rope"):
                return CheckpointFolder.open(node["checkpoint_dir"]).usable_length
            try:
                p = inspect.signature(resolve_component("model", node["_component_"])).parameters.get("max_seq_len")
            except (TypeError, ValueError):
                p = None
            if p is not None and isinstance(p.default, int):
                return p.default
        return None


# torchtune checkpointer arguments that would load a recipe state or an adapter this recipe does not read
UNREAD_CHECKPOINTER_KEYS = ("recipe_checkpoint", "adapter_checkpoint", "resume_from_checkpoint",
                            "should_load_recipe_state")


def _formatted_files(files: Mapping[str, Any], where: str) -> List[str]:
    """The file names torchtune's ``checkpoint_files: {filename_format, max_filename}`` stands for."""
    from torchtune.training.checkpointing._utils import FormattedCheckpointFiles

    try:
        return FormattedCheckpointFiles.from_dict(dict(files)).build_checkpoint_filenames()
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{where}={dict(files)!r} is not accepted ({e}): give filename_format (e.g. "
                         "model-{}-of-{}.safetensors) and max_filename (e.g. '00004'), as torchtune takes them, or a "
                         "list of files, or null") from None


@dataclass(frozen=True)
class CheckpointerConfig(ComponentSection):
    """``checkpointer``: names the start checkpoint folder (the recipe reads it through ``models.hf_checkpoint``)."""

    LOCAL_CHECKS = True
    BUILT = False  # torchtune's checkpointer arguments (checkpoint_files, ...) may be absent
    # ${output_dir} in torchtune's configs: where the run's folder sits (the recipe never builds this checkpointer)
    # trust_remote_code: whether the start folder's code may be imported, not what the run trains
    RESUME_IGNORED: ClassVar[Tuple[str, ...]] = ("output_dir", "trust_remote_code")

    checkpoint_dir: Optional[str] = setting(None, doc="start checkpoint folder (null: random weights, the model node's "
                                            "family and dimensions)", check=text, nullable=True)
    model_type: Optional[str] = setting(FROM_COMPONENT, doc="torchtune's model_type, checked against the folder's "
                                        "family (optional)")
    trust_remote_code: bool = setting(False, doc="import the code of one's own a start folder's config.json names "
                                      "(longshort_family, longshort_rope.method) that this config does not name "
                                      "itself; without it such a folder is refused before that module is imported",
                                      check=boolean)

    def check(self, where: str) -> None:
        for key in UNREAD_CHECKPOINTER_KEYS:  # with or without a start folder
            if self.args.get(key):
                raise ValueError(f"{where}.{key}={self.args[key]!r} is not read by this recipe: it starts from "
                                 "checkpoint_dir's weights (or random ones), and resume=True continues from "
                                 f"output_dir's newest step_<k> (its recipe_state/); drop {where}.{key}")
        safe = self.args.get("safe_serialization", True)
        if safe is not True:  # torchtune's checkpointer then writes torch.save .bin files; this recipe never does
            raise ValueError(f"{where}.safe_serialization={safe!r} is not accepted: every step_<k> is written as "
                             "safetensors shards (the files transformers, lm-eval and torchtune's checkpointer read); "
                             f"set {where}.safe_serialization: True or drop it")
        if self.checkpoint_dir is None:
            files = self.args.get("checkpoint_files")
            if files is not None and files != []:  # random weights: the files were never read, without a word
                raise ValueError(f"{where}.checkpoint_files={files!r} names weight files, but {where}.checkpoint_dir "
                                 "is null: the run starts from random weights (the model node's dimensions); set "
                                 f"checkpoint_dir to the folder that holds them, or {where}.checkpoint_files: null")
            return
        if not Path(self.checkpoint_dir).exists():
            raise FileNotFoundError(f"{where}.checkpoint_dir={self.checkpoint_dir!r} does not exist")
        folder = CheckpointFolder.open(self.checkpoint_dir)
        check_torchtune_model_type(folder.family, self.model_type, f"{where}.model_type")
        self._check_unread(folder, where)

    def _check_unread(self, folder: CheckpointFolder, where: str) -> None:
        """``checkpoint_files``, which this recipe never reads (it opens the folder itself), unless it lists the
        folder's own weight files: one that would make torchtune load other weights is refused, not ignored."""
        files = self.args.get("checkpoint_files")
        if isinstance(files, str):  # one file (checkpoint_files=model.safetensors): as a list of it, not ignored
            files = [files]
        if files is not None and not isinstance(files, (Mapping, list, tuple)):
            raise ValueError(f"{where}.checkpoint_files={files!r} is not accepted: expected a list of checkpoint_dir's "
                             "weight files, torchtune's {filename_format, max_filename}, or null")
        if isinstance(files, Mapping):  # torchtune's {filename_format, max_filename}: the names it stands for
            files = _formatted_files(files, f"{where}.checkpoint_files")
        have = sorted(p.name for p in folder.weight_files)
        if isinstance(files, (list, tuple)) and sorted(Path(str(f)).name for f in files) != have:
            raise ValueError(f"{where}.checkpoint_files={list(files)!r} is not what the recipe loads: it reads every "
                             f"weight file of checkpoint_dir's index ({', '.join(have)}); list exactly those, or null")


@dataclass(frozen=True)
class SchedulerConfig(ComponentSection):
    """``lr_scheduler``: built by the recipe with the optimizer and ``num_training_steps = max_steps``."""

    PASSED_BY_RECIPE: ClassVar[Tuple[str, ...]] = ("optimizer", "num_training_steps", "last_epoch")

    def check(self, where: str) -> None:
        """A negative ``num_warmup_steps``: torchtune's schedules took it without a word (the cosine one started
        part-way down its decay)."""
        if self.args.get("num_warmup_steps") is not None:
            integer(0)(f"{where}.num_warmup_steps", self.args["num_warmup_steps"])


# torchtune's metric loggers that import a package of their own when built (TensorBoard's through torch)
LOGGER_PACKAGES = {"WandBLogger": "wandb", "TensorBoardLogger": "tensorboard", "CometLogger": "comet_ml",
                   "MLFlowLogger": "mlflow"}


@dataclass(frozen=True)
class MetricLoggerConfig(ComponentSection):
    """``metric_logger``: a torchtune metric logger (the recipe also writes ``output_dir/metrics.jsonl``)."""

    # they take **kwargs and drop them: metric_logger.filname=x was ignored without a word
    DROPS_KWARGS: ClassVar[Tuple[str, ...]] = tuple(f"torchtune.training.metric_logging.{n}Logger" for n in ("Disk",
                                                                                                            "Stdout"))
    log_dir: Optional[str] = setting(FROM_COMPONENT, doc="folder of the logger's own files", check=text)

    def check(self, where: str) -> None:
        """A torchtune logger whose package is not installed: refused now (torchtune's ``ImportError`` came as a
        traceback once the run had claimed, and an overwrite cleared, its output folder)."""
        cls = resolve_component(f"{where}._component_", self.component)
        package = LOGGER_PACKAGES.get(getattr(cls, "__name__", ""))
        if (package is not None and str(getattr(cls, "__module__", "")).startswith("torchtune.")
                and importlib.util.find_spec(package) is None):
            raise ValueError(f"{where}._component_={self.component!r} needs the {package!r} package, which is not "
                             f"installed here: pip install {package.replace('_', '-')}, or log with "
                             "torchtune.training.metric_logging.DiskLogger (log_dir: ${output_dir}/logs; the recipe "
                             "writes output_dir/metrics.jsonl either way)")
