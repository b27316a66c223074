"""Every config, every model family and every RoPE method, trained through ``tune run`` and then evaluated, as a user
chains them.

Each shipped config under ``configs/`` (the study configs aside) is shrunk by command-line overrides only to a tiny
random model (same method, same loss, same recipe path: full / LoRA / QLoRA / S2-Attn), trained 2 steps, and its
``step_2`` folder is evaluated with ``longshort_ppl`` (stdlib) through lm-eval twice: with our ``longshort`` model and
with lm-eval's own ``hf`` model (transformers), where transformers can represent the method. The two perplexities
must agree (rel 1e-4): the reference is transformers' implementation reading the same folder. The same for every
method of ``ROPE_METHODS`` and both ``POSITION_SAMPLERS``. Where transformers cannot represent the method (EABF,
CLEX), ``hf`` must refuse the folder rather than run another model.

Every config builds its model from the checkpoint's ``config.json`` (``models.hf_decoder``), so each is shrunk by
pointing ``checkpoint_dir`` at a tiny random checkpoint: a Llama-2-shaped one for the Llama-2-7B and tiny configs, and
for Llama-3, Mistral, Qwen2.5, Gemma, Phi-3, Phi-3.5 and SmolLM2 one of that family in its real Hugging Face layout,
tokenizer format included (``tests/family_checkpoints.py``); every family of ``MODEL_FAMILIES`` must be covered by one
of them.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from warm_start import with_warm_start

pytest.importorskip("lm_eval")

from torchtune_longshort.eval.tasks import tasks_path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TUNE = str(Path(sys.executable).with_name("tune"))
RECIPE = "torchtune_longshort/recipes/longshort_finetune.py"
L0, L_TARGET, EVAL_LEN = 64, 256, 128  # base positions, scaled target, evaluation length (2x the training L)
DIMS = dict(vocab_size=512, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=172)
# NF4 quantizes blocks of 64 x 256 values: QLoRA needs every quantized weight's numel % 16384 == 0.
QDIMS = dict(vocab_size=512, num_layers=2, num_heads=4, num_kv_heads=4, embed_dim=128, intermediate_dim=384)


def _kv(prefix: str, d: dict) -> list:
    return [f"{prefix}{k}={v}" for k, v in d.items()]


COMMON = [
    "tokenizer._component_=torchtune.models.llama2.llama2_tokenizer",
    "checkpointer.checkpoint_files=null",
    "dataset._component_=torchtune_longshort.data.corpus.stdlib",
    "dataset.include_tests=False",
    "dataset.limit=20",
    "validation=null",
    "device=cpu",
    "dtype=fp32",
    "compile=False",
    "enable_activation_checkpointing=False",
    "optimizer.fused=False",
    f"seq_len={L0}",
    "batch_size=2",
    "gradient_accumulation_steps=1",
    "max_steps=2",
    "save_every_n_steps=2",
    "loss.num_chunks=2",
    "lr_scheduler.num_warmup_steps=0",  # the configs warm up for 20+ steps: at step 1 the LR would be 0
]
# The Llama-2-7B configs (rope_scaled over hf_decoder): their folder is the tiny Llama-2 base (L0 positions), scaled
# to L_TARGET.
LLAMA2_SCALED = [f"model.max_seq_len={L_TARGET}"]


# Configs whose model is read from the checkpoint folder: the folder is their whole shrink (256 positions, scaled
# to 512), with the long ones' windows and the tiny corpus of COMMON.
FAMILY_SHRINK = [f"model.max_seq_len={2 * L_TARGET}"]
# The configs that name the real base's pre-trained length (Qwen2.5: 32768, Mistral: 8192, where their config.json
# says more) start from the tiny folder's own 256 positions instead
FAMILY_SHRINK_FROM_FOLDER = FAMILY_SHRINK + ["model.original_max_seq_len=256"]
# config -> (base checkpoint: "tiny" | "qlora" | "family:<layout>", overrides that shrink it). Every
# config must have an entry.
CONFIGS = {
    # LoRA on one CLEX config: its ODE must train beside the adapters (test_clex_recipe_checkpoint_carries_...);
    # t_min=2: every step solves the ODE (at t = 1 it has no gradient, and 2 steps may both draw it)
    "llama2_7b/clex_4k_pg19.yaml": ("tiny", LLAMA2_SCALED + ["model.t_min=2", "model.model.lora_rank=8",
                                                             "model.model.lora_alpha=16"]),
    "llama2_7b/clex_4k_redpajama_book.yaml": ("tiny", LLAMA2_SCALED + ["model.t_min=2"]),
    "llama2_7b/eabf_8k_redpajama_book.yaml": ("tiny", LLAMA2_SCALED),
    "llama2_7b/longqlora_8k_redpajama_book.yaml": (
        "qlora",
        [f"model.max_seq_len={L_TARGET}", f"model.factor={math.ceil(L_TARGET / L0)}", "model.model.lora_rank=8"],
    ),
    "llama3_8b/eabf_16k_redpajama_book.yaml": ("family:llama3", FAMILY_SHRINK),
    "mistral_7b/eabf_16k_redpajama_book.yaml": ("family:mistral", FAMILY_SHRINK_FROM_FOLDER),
    "qwen2_5_7b/yarn_64k_redpajama_book.yaml": ("family:qwen2", FAMILY_SHRINK_FROM_FOLDER),
    "gemma_2b/pi_16k_redpajama_book.yaml": ("family:gemma", FAMILY_SHRINK),
    "phi3_mini_4k/yarn_16k_redpajama_book.yaml": ("family:phi3", FAMILY_SHRINK),
    # The folder's own LongRoPE (Phi-3.5's config.json): trained on 64-token windows (its short factors, at the
    # switch), evaluated at 128 tokens (its long factors), in both lm-eval models.
    "phi3_5_mini/longrope_16k_redpajama_book.yaml": ("family:phi3_5", FAMILY_SHRINK),
    "smollm2_135m/yarn_16k_stdlib.yaml": ("family:smollm2", FAMILY_SHRINK),
    "smollm2_135m/lora_yarn_16k_stdlib.yaml": ("family:smollm2", FAMILY_SHRINK),
    "tiny/longshort_from_checkpoint.yaml": ("tiny", [f"model.max_seq_len={L_TARGET}"]),
    "tiny/lora_from_checkpoint.yaml": ("tiny", [f"model.max_seq_len={L_TARGET}"]),
    "tiny/qlora_from_checkpoint.yaml": ("qlora", [f"model.max_seq_len={L_TARGET}"]),
}
# Configs trained elsewhere as a user runs them: the README's main job from the installed wheel, evaluated there with
# both models (tests/test_wheel_install.py).
ELSEWHERE = {"tiny/longshort_stdlib.yaml"}


# Each other RoPE method rides on a Llama-2-7B config (rope_scaled over hf_decoder) with its method swapped.
METHOD_HOST = "llama2_7b/eabf_8k_redpajama_book.yaml"


def _method_overrides(method: str) -> list:
    return [f"model.max_seq_len={L_TARGET}", f"model.method={method}"]


SAMPLERS = {
    "random_pos": ["position_sampler._component_=torchtune_longshort.rope.RandomPositions",
                   f"position_sampler.max_position={L_TARGET}"],
    "pose": ["position_sampler._component_=torchtune_longshort.rope.PoSEPositions",
             f"position_sampler.target_len={L_TARGET}"],
}


def _all_cases() -> dict:
    from torchtune_longshort.rope import POSITION_SAMPLERS, ROPE_METHODS

    assert set(SAMPLERS) == set(POSITION_SAMPLERS), "a position sampler has no case in this matrix"
    cases = {f"config:{c}": (c, *CONFIGS[c]) for c in CONFIGS}
    # by the tiny from-checkpoint configs, the Llama-2-7B CLEX / EABF configs, the family configs (YaRN: Qwen2.5,
    # SmolLM2, Phi-3; LongRoPE: Phi-3.5, whose factor lists come from its folder) and the Llama-3.1 layout's own
    # `llama3` rope type under YaRN; `linear` (PI) stays
    covered = {"default", "clex", "eabf", "yarn", "llama3", "longrope"}
    # each position sampler rides on one of those method cases (a run of its own per sampler cost ~10% of the
    # matrix): the method's RoPE scales the positions the sampler draws, as in a user's run
    riders = dict(zip(("linear", "ntk"), SAMPLERS))
    for m in ROPE_METHODS:
        if m not in covered:
            key, ov = f"method:{m}", _method_overrides(m)
            if m in riders:
                key, ov = f"{key}+sampler:{riders[m]}", ov + SAMPLERS[riders[m]]
            cases[key] = (METHOD_HOST, "tiny", ov)
    assert sorted(k.split("+sampler:")[1] for k in cases if "+sampler:" in k) == sorted(SAMPLERS)
    return cases


def test_every_config_has_a_matrix_entry():
    shipped = {str(p.relative_to(REPO / "configs")) for p in (REPO / "configs").rglob("*.yaml")}
    shipped = {c for c in shipped if not c.startswith("study/")}
    assert shipped == set(CONFIGS) | ELSEWHERE, f"configs without a shrink entry: {sorted(shipped - set(CONFIGS))}"


def test_every_model_family_is_in_the_matrix(family_dirs):
    """Each family of the table is trained and evaluated through at least one shipped config (the Llama-2 layout
    through the tiny configs, whose base is a Llama-2-shaped checkpoint)."""
    from torchtune_longshort.models import MODEL_FAMILIES, CheckpointFolder

    covered = {CheckpointFolder.open(family_dirs[base.split(":", 1)[1]]).family.name
               for base, _ in CONFIGS.values() if base.startswith("family:")}
    covered.add("llama")  # "tiny" / "qlora": Llama-2 layout
    assert covered == set(MODEL_FAMILIES), f"families without a config in the matrix: {set(MODEL_FAMILIES) - covered}"


def _env(tmp: Path) -> dict:
    env = dict(os.environ)
    # the recipe runs from the installed package, as a user runs it (PYTHONPATH: only tests/warm's start-up hook)
    env.update(PYTHONPATH=with_warm_start(), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return env


@pytest.fixture(scope="module")
def bases(tmp_path_factory, sp_tokenizer_dir, family_dirs):
    """Base checkpoints with the tokenizer in them (as a hub folder has): L0 = 64 positions; ``family:<layout>``:
    the tiny checkpoints of every family (256 positions)."""
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    out = {}
    for name, dims in (("tiny", DIMS), ("qlora", QDIMS)):
        d = tmp_path_factory.mktemp(f"base_{name}")
        write_random_llama2_checkpoint(d, max_seq_len=L0, seed=0, **dims)
        for f in sp_tokenizer_dir.iterdir():
            shutil.copy(f, d / f.name)
        out[name] = d
    out["tokenizer"] = sp_tokenizer_dir
    out.update({f"family:{k}": v for k, v in family_dirs.items()})
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory, bases):
    """Train every case 2 steps through ``tune run`` (two processes at a time, from a folder outside the repo)."""
    tmp = tmp_path_factory.mktemp("matrix")
    cases = _all_cases()

    def run(item):
        key, (cfg, base, overrides) = item
        out = tmp / key.replace(":", "_").replace("/", "_")
        args = [f"output_dir={out}"]
        if base.startswith("family:"):
            args += [f"checkpoint_dir={bases[base]}"]  # the config reads model and tokenizer from the folder
        else:
            args += [f"checkpoint_dir={bases[base]}", f"tokenizer.path={bases[base] / 'tokenizer.model'}"]
        if base.startswith("family:"):
            args = [a for a in COMMON if not a.startswith(("tokenizer.", "checkpointer."))] + args
        else:
            args = COMMON + args
        cmd = [TUNE, "run", RECIPE, "--config", str(REPO / "configs" / cfg), *args, *overrides]
        p = subprocess.run(cmd, cwd=tmp, env=_env(tmp), capture_output=True, text=True, timeout=600)
        return key, out, p

    results = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for key, out, p in pool.map(run, cases.items()):
            if p.returncode != 0:
                raise AssertionError(f"{key}: tune run failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-5000:]}")
            results[key] = out / "step_2"
    return results


@pytest.fixture(scope="module")
def task_manager(bases):
    """lm-eval task indexes, one per tokenizer (building one costs seconds; the evaluations are tiny): the task cuts
    its samples with the tokenizer of its metadata, as the CLI's model_args would give it. Cases of the Llama-2
    layout share one tokenizer; each family checkpoint has its own."""
    import functools

    from lm_eval.tasks import TaskManager

    import torchtune_longshort.eval.model.adapter  # noqa: F401  (registers ``longshort``)

    @functools.lru_cache(maxsize=None)
    def for_tokenizer(tokenizer: str):
        meta = {"ppl_source": "stdlib", "ppl_num_samples": 2, "tokenizer": tokenizer, "max_seq_lengths": [EVAL_LEN]}
        return TaskManager(include_path=str(tasks_path()), include_defaults=False, metadata=meta)

    def of(step_dir: Path):
        from torchtune_longshort.models.tokenizer_formats import SP_FILE

        sp = step_dir / SP_FILE
        same = sp.is_file() and sp.read_bytes() == (bases["tokenizer"] / SP_FILE).read_bytes()
        return for_tokenizer(str(bases["tokenizer"]) if same else str(step_dir))

    return of


def _ppl(task_manager, model: str, model_args: str) -> float:
    """lm-eval's evaluator (the CLI's own ``simple_evaluate``) on ``longshort_ppl`` at ``EVAL_LEN`` tokens."""
    from lm_eval import simple_evaluate

    res = simple_evaluate(model=model, model_args=model_args, tasks=["longshort_ppl"], batch_size=2,
                          device="cpu", task_manager=task_manager, log_samples=False, bootstrap_iters=0)
    return float(res["results"]["longshort_ppl"][f"ppl_{EVAL_LEN},none"])


def _representable(step_dir: Path) -> bool:
    from torchtune_longshort.models import CheckpointFolder
    from torchtune_longshort.models.hf_rope import transformers_representable

    folder = CheckpointFolder.open(step_dir)
    return folder.rope_spec is None or transformers_representable(folder.rope_spec, folder.family.hf_rope_types)


@pytest.mark.slow
def test_matrix_trains_and_evaluates_equally_in_longshort_and_hf(trained, task_manager):
    from torchtune_longshort.models import load_hf_checkpoint

    refused = []
    for key, step in trained.items():
        load_hf_checkpoint(step)  # the project's loader takes every folder the recipe writes
        tm = task_manager(step)
        ours = _ppl(tm, "longshort", f"pretrained={step}")
        assert math.isfinite(ours), f"{key}: longshort ppl {ours}"
        if _representable(step):
            theirs = _ppl(tm, "hf", f"pretrained={step},dtype=float32,max_length={EVAL_LEN}")
            assert ours == pytest.approx(theirs, rel=1e-4), f"{key}: longshort {ours} vs hf {theirs}"
        else:
            with pytest.raises(Exception, match="not representable in transformers"):
                _ppl(tm, "hf", f"pretrained={step},dtype=float32")
            refused.append(key)
    assert any("clex" in k for k in refused) and any("eabf" in k for k in refused)
    assert "config:phi3_mini_4k/yarn_16k_redpajama_book.yaml" in refused  # transformers' Phi3Config takes no YaRN
    assert "config:phi3_5_mini/longrope_16k_redpajama_book.yaml" not in refused  # ... but takes LongRoPE


@pytest.mark.slow
def test_clex_recipe_checkpoint_carries_its_trained_parameters(trained):
    """The learned ODE weights travel in the side file and load back into the model, and they were trained (the
    released initialisation has ode_down_proj = 0) in a full fine-tune and in a LoRA one, where they train beside
    the adapters."""
    from safetensors.torch import load_file

    from torchtune_longshort.models import load_hf_checkpoint
    from torchtune_longshort.models.hf_checkpoint import ROPE_SIDE_FILE

    for config in ("llama2_7b/clex_4k_redpajama_book.yaml", "llama2_7b/clex_4k_pg19.yaml"):  # full, LoRA
        step = trained[f"config:{config}"]
        side = load_file(str(step / ROPE_SIDE_FILE))
        assert side["ode_down_proj"].abs().max() > 0, config  # LoRA froze it before the fix: all zero
        model = load_hf_checkpoint(step)
        rope = model.layers[0].attn.pos_embeddings
        for k, v in side.items():
            assert (getattr(rope, k).detach() == v).all(), (config, k)
    assert (trained["config:llama2_7b/clex_4k_pg19.yaml"] / "adapter" / "adapter_config.json").is_file()
