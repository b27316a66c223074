"""The recipe config: every top-level field with its default, doc, check and resume policy (the sections are their own
modules).

Built once by :func:`~torchtune_longshort.training.recipe_config.load_recipe_config` from the OmegaConf node, before
any side effect; the recipe reads its fields and never ``cfg.get(key, default)``.

``resume=`` (:data:`~torchtune_longshort.config.fields.RESUME_POLICIES`): what the run trains (model, data, windows,
loss, batch, seeds, dtype, the LR schedule's shape, which parameters train) is ``exact``; how long, how fast and what it
logs is ``applied``; the folder and how the run was started are ``ignored``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from torchtune_longshort.training.recipe_config.components import (
    CheckpointerConfig, MetricLoggerConfig, ModelConfig, SchedulerConfig, TokenizerConfig,
)
from torchtune_longshort.training.recipe_config.data import DataSourceConfig, ValidationConfig
from torchtune_longshort.config.fields import ComponentSection, Section, setting
from torchtune_longshort.devices import default_device
from torchtune_longshort.training.recipe_config.loss import LossConfig
from torchtune_longshort.training.recipe_config.optimizer import OptimizerConfig
from torchtune_longshort.training.recipe_config.profiler import TRACE_FOLDER, ProfilerConfig
from torchtune_longshort.config.values import (
    boolean, check_device, device_name, integer, number, one_of, refuse, text,
)
from torchtune_longshort.training.recipe_config.paths import START_FOLDER_HINT
from torchtune_longshort.training.recipe_config.windows import WindowsConfig


def start_folder(path: str, value: Any) -> str:
    """``checkpoint_dir``: a non-empty string; ``checkpoint_dir=''`` told how to get the folder, as an empty
    ``checkpoint_dir=`` is (:func:`~.paths.naming_the_source`)."""
    if value == "":
        raise ValueError(f"{path}='' is empty: set {path} to {START_FOLDER_HINT}")
    return text(path, value)

DTYPES = ("fp32", "bf16")


def _dtype(path: str, value: Any) -> str:
    if value == "fp16":  # torchtune's fine-tuning recipes refuse it too
        raise ValueError(f"{path}=fp16 is not accepted: the weights, gradients and AdamW state would all be float16 "
                         "with no loss scaling (measured: a non-finite loss at step 2 of the tiny model on a CPU); use "
                         "dtype=bf16 (same memory), or fp32")
    return one_of(DTYPES)(path, value)


def _clip_grad_norm(path: str, value: Any) -> Optional[float]:
    """A finite number > 0; ``inf`` (YAML ``.inf``, or the text ``inf`` a command line or plain YAML gives) as
    torchtune's recipes take it: no clipping, the norm logged (None here: ``grad_norm`` is logged either way)."""
    if isinstance(value, str) and value.strip().lower() in ("inf", "+inf", ".inf", "infinity"):
        return None
    if isinstance(value, float) and value == float("inf"):
        return None
    try:
        return number(0.0, inclusive=False)(path, value)
    except ValueError:
        raise refuse(path, value, "a finite number > 0, or inf or null (no clipping; grad_norm is logged either "
                     "way)") from None


DEBUG_MODES = ("default", "warn", "error")  # torch.set_deterministic_debug_mode's names for 0, 1, 2


def _debug_mode(path: str, value: Any) -> Any:
    """torchtune's ``cudnn_deterministic_mode``: a ``torch.set_deterministic_debug_mode`` value (its name or 0-2)."""
    if value in DEBUG_MODES or (isinstance(value, int) and not isinstance(value, bool) and value in (0, 1, 2)):
        return value
    raise refuse(path, value, f"one of {list(DEBUG_MODES)} or 0, 1, 2 (torch.set_deterministic_debug_mode), or null")


@dataclass(frozen=True)
class RecipeConfig(Section):
    """``tune run torchtune_longshort/recipes/longshort_finetune.py --config <this>``."""

    LOCAL_CHECKS = True  # the device must exist here

    # where it writes
    output_dir: str = setting(doc="folder for the step_k checkpoints, metrics.jsonl and logs", check=text,
                              resume="ignored")
    overwrite_output_dir: bool = setting(False, doc="replace a folder an earlier run of this recipe made "
                                         "(with resume=True the run resumes and nothing is deleted)",
                                         check=boolean, resume="ignored")
    resume: bool = setting(False, doc="continue from the newest resumable step_k", check=boolean, resume="ignored")
    # what it builds
    checkpoint_dir: Optional[str] = setting(None, doc="start checkpoint folder (interpolated into the nodes below)",
                                            check=start_folder, nullable=True, resume="exact")
    tokenizer: TokenizerConfig = setting(doc="tokenizer component", section=TokenizerConfig, resume="exact")
    model: ModelConfig = setting(doc="model builder component", section=ModelConfig, resume="exact")
    checkpointer: CheckpointerConfig = setting(doc="names the start weights (checkpoint_dir, model_type)",
                                               section=CheckpointerConfig, resume="exact")
    loss: LossConfig = setting(doc="LongShortLoss component", section=LossConfig, resume="exact")
    optimizer: OptimizerConfig = setting(doc="optimizer component (on resume its arguments are applied, its class is "
                                                "exact)", section=OptimizerConfig, resume="applied")
    lr_scheduler: Optional[SchedulerConfig] = setting(
        None, doc="LR scheduler component (optional; lr_scheduler=null turns it off)", section=SchedulerConfig,
        resume="exact")
    metric_logger: MetricLoggerConfig = setting(doc="torchtune metric logger component", section=MetricLoggerConfig,
                                                resume="applied")
    profiler: Optional[ProfilerConfig] = setting(
        None, doc="torchtune's setup_torch_profiler node (optional), stepped once per optimizer step",
        section=ProfilerConfig, resume="applied")
    position_sampler: Optional[ComponentSection] = setting(
        None, doc="position-id sampler component (optional: PoSE, random_pos)", section=ComponentSection,
        resume="exact")
    # what it reads
    dataset: DataSourceConfig = setting(doc="the training documents (data source component)",
                                        section=DataSourceConfig, resume="exact")
    validation: Optional[ValidationConfig] = setting(None, doc="fixed-length validation set (optional)",
                                                     section=ValidationConfig, resume="applied")
    windows: WindowsConfig = setting(doc="seq_len, e_range, window_bos (top-level keys)", section=WindowsConfig,
                                     flat=True)
    # how long and how
    batch_size: int = setting(doc="global sequences per optimizer step", check=integer(1), resume="exact")
    gradient_accumulation_steps: int = setting(1, doc="micro-batches per optimizer step", check=integer(1),
                                               resume="exact")
    max_steps: int = setting(doc="optimizer steps", check=integer(1), resume="applied")
    stop_after_step: Optional[int] = setting(None, doc="end this process early (resume=True continues)",
                                             check=integer(1), resume="applied")
    equal_compute_overhead: Optional[float] = setting(
        None, doc="Appendix F: alpha > 0 runs get floor(max_steps / ratio) steps", check=number(1.0), resume="applied")
    clip_grad_norm: Optional[float] = setting(None, doc="max gradient norm (null or inf, torchtune's 'log only': no "
                                              "clipping; grad_norm is logged either way)", check=_clip_grad_norm,
                                              nullable=True, resume="applied")
    clip_rope_separately: bool = setting(False, doc="clip the RoPE's trainable parameters (CLEX) as their own group",
                                         check=boolean, resume="applied")
    seed: Optional[int] = setting(
        0, doc="model init seed; also the shifts' and position ids' seed unless data_seed is set. null (torchtune's): "
        "one seed drawn when the run starts, printed and recorded as the run's seed (torchtune_config.yaml, the "
        "recipe state, metrics.jsonl); resume=True with null continues with the recorded one",
        check=integer(0), nullable=True, resume="exact")
    cudnn_deterministic_mode: Optional[Any] = setting(
        None, doc="torchtune's: torch.set_deterministic_debug_mode with the seed ('default'/0: cuDNN benchmark on; "
        "'warn'/1, 'error'/2: deterministic algorithms, warn or fail on one without; null: leave torch's setting)",
        check=_debug_mode, nullable=True, resume="applied")
    data_seed: Optional[int] = setting(None, doc="seed of the shifts e, of a position_sampler's ids and of shuffle's "
                                       "order (default: seed)", check=integer(0), resume="exact")
    shuffle: bool = setting(False, doc="read each pass's documents in torchtune's shuffle: True order (its "
                            "DistributedSampler seeded data_seed, set_epoch per pass); false: the source's order. "
                            "Needs random access (a streamed source is refused) and dataset.shuffle_seed unset",
                            check=boolean, resume="exact")
    train_embeddings_and_norms: bool = setting(False, doc="LoRA: also train embeddings and norms (LongQLoRA)",
                                               check=boolean, resume="exact")
    # where it runs
    device: str = setting("cpu", doc="cpu, cuda, cuda:N, mps or mps:N (the device must exist); null: torchtune's "
                          "get_device(None), cuda where this machine has it, else cpu (the run's log names it)",
                          check=device_name, null=default_device, resume="applied")
    dtype: str = setting("fp32", doc="fp32 or bf16 (fp16: refused, as torchtune's recipes do)", check=_dtype,
                         resume="exact")
    compile: bool = setting(False, doc="torch.compile each decoder layer (the loss runs eager: README, compile)",
                            check=boolean, resume="applied")
    enable_activation_checkpointing: bool = setting(False, doc="checkpoint each transformer layer", check=boolean,
                                                    resume="applied")
    enable_activation_offloading: bool = setting(
        False, doc="CUDA: move the checkpointed layers' inputs to host memory (torchtune's; needs checkpointing)",
        check=boolean, resume="applied")
    tiled_mlp_tokens: Optional[int] = setting(
        None, doc="run each layer's MLP over tiles of this many token rows, each recomputed in backward (null: off)",
        check=integer(1), nullable=True, resume="applied")
    fsdp_reshard_after_forward: bool = setting(True, doc="FSDP2 reshard_after_forward", check=boolean,
                                               resume="applied")
    cpu_keep_freed_blocks: bool = setting(True, doc="CPU: glibc keeps large freed blocks for reuse", check=boolean,
                                          resume="applied")
    # what it reports and keeps
    save_every_n_steps: Optional[int] = setting(None, doc="checkpoint period in steps (default: the last step only)",
                                                check=integer(1), resume="applied")
    log_every_n_steps: int = setting(1, doc="logging period in steps", check=integer(1), resume="applied")
    keep_recipe_states: int = setting(1, doc="resumable states kept in recipe_state/ beside the step_k folders "
                                      "(the newest; every step_k folder stays)", check=integer(1), resume="applied")

    def check(self, where: str) -> None:
        check_device("device", self.device)
        # output_dir and metric_logger.log_dir: asked by check_overwrite, after the rules that keep them out of the
        # run's inputs (the question makes and removes a folder in the nearest existing parent)

    @property
    def trace_dir(self) -> Optional[str]:
        """The folder the enabled profiler writes its traces to (``profiler.output_dir``, else
        ``output_dir/profiling_outputs``); None when it is off."""
        if self.profiler is None or not self.profiler.enabled:
            return None
        return self.profiler.output_dir or os.path.join(self.output_dir, TRACE_FOLDER)

    @property
    def seq_len(self) -> int:
        return self.windows.seq_len

    @property
    def order_seed(self) -> int:
        """The seed of the shifts e, the sampled position ids and ``shuffle``'s order: ``data_seed``, else ``seed``."""
        return self.seed if self.data_seed is None else self.data_seed
