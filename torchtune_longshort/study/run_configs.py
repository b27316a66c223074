"""What each run of a study trains from: its recipe config (the recipe YAML, ``recipe_overrides``, then the
pre-training's or the fine-tune's own keys: model, lengths, steps, seed, alpha, the method's and the variant's
overrides), the base checkpoint it starts from and the tokenizer it is evaluated with. A mixin of
:class:`~torchtune_longshort.study.runner.Study` (it sets ``cfg``, ``root``, ``out`` and ``run_dir``).

A recipe config is written as the plain YAML the recipe reads (``<run>/recipe.yaml``, :meth:`RunConfigs.recipe_config`)
and read back through the recipe's own typed config (:meth:`RunConfigs.recipe_fields`), never key by key."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional

from omegaconf import OmegaConf

from torchtune_longshort.data.tokenizer_training import sentencepiece_file
from torchtune_longshort.study.grid import Run, merged

if TYPE_CHECKING:
    from torchtune_longshort.study.config import StudyConfig
    from torchtune_longshort.training.recipe_config import RecipeConfig


class RunConfigs:
    """The recipe configs, base checkpoint and tokenizer of a study's runs."""

    cfg: "StudyConfig"
    root: Path
    out: Path

    def tokenizer_dir(self) -> Path:
        return self.out / "tokenizer"

    def eval_tokenizer(self) -> str:
        base = self.cfg.base
        if base.given:
            return str(base.tokenizer)
        return str(sentencepiece_file(self.tokenizer_dir()))

    def base_checkpoint(self) -> Path:
        base = self.cfg.base
        if base.given:
            return Path(base.checkpoint_dir).resolve()
        return self.run_dir("base") / "train" / f"step_{base.pretrain.max_steps}"

    def _recipe_base(self) -> Dict[str, Any]:
        c = OmegaConf.to_container(OmegaConf.load(self.cfg.recipe_config_file(self.root)), resolve=False)
        c = merged(c, self.cfg.recipe_overrides)
        tok = c.get("tokenizer") or {}
        if self.cfg.base.given:
            tok["path"] = str(self.cfg.base.tokenizer)
            # the recipe config's own `checkpoint_dir` (its nodes interpolate ${checkpoint_dir}) is the base's
            c["checkpoint_dir"] = str(self.base_checkpoint())
        elif str(tok.get("_component_", "")).endswith("stdlib_sentencepiece_tokenizer"):
            tok["path"] = str(self.tokenizer_dir())  # trained once, on the first (pre-training) run
        c["tokenizer"] = tok
        # Evaluation is lm-eval's job; the recipe's held-out validation (val_ce every n steps: a convergence curve)
        # runs only where finetune.overrides / base.pretrain.overrides set `validation`.
        c["validation"] = None
        c["resume"], c["overwrite_output_dir"] = False, False
        return c

    def recipe_config(self, key: str, run: Optional[Run] = None) -> Dict[str, Any]:
        """The full recipe YAML (as a dict) of the pre-training (``key == "base"``) or of one fine-tune."""
        cfg = self.cfg
        c = self._recipe_base()
        model = dict(cfg.model, max_seq_len=cfg.L0)
        if "checkpoint_dir" in model:  # a builder that reads its checkpoint (hf_decoder): the base's
            model["checkpoint_dir"] = str(self.base_checkpoint())
        train_dir = str(self.run_dir(key) / "train")
        if key == "base":
            pre = cfg.base.pretrain
            c = merged(c, {"model": model, "seq_len": cfg.L0, "max_steps": pre.max_steps, "seed": 0,
                           "loss": {"alpha": 0.0}, "checkpointer": {"checkpoint_dir": None}})
            c["model"] = model  # replace, not merge: the recipe config's own model node may have other keys
            c = merged(c, pre.overrides)
        else:
            scaled = {"_component_": "torchtune_longshort.models.rope_scaled", **run.rope, "max_seq_len": cfg.L,
                      "model": model}
            c = merged(c, {"seq_len": cfg.L, "max_steps": cfg.finetune.max_steps, "seed": run.seed,
                           "loss": {"alpha": run.alpha},
                           "checkpointer": {"checkpoint_dir": str(self.base_checkpoint())}})
            c["model"] = scaled
            c = merged(c, cfg.finetune.overrides)
            c = merged(c, run.overrides)  # the method's and the variant's own keys (e_range, divergence, ...)
        c["output_dir"] = train_dir
        c.setdefault("save_every_n_steps", c["max_steps"])
        if isinstance(c.get("checkpointer"), dict):
            c["checkpointer"]["output_dir"] = "${output_dir}"
        return c

    def recipe_fields(self, key: str, run: Optional[Run] = None) -> "RecipeConfig":
        """:meth:`recipe_config` read as the recipe reads it: the recipe's own config check (keys, values and the
        rules between fields: a batch the accumulation steps do not divide, a length past the model's positions;
        the files and devices it names are not asked for, as the run may not have made them yet)."""
        from torchtune_longshort.training.recipe_config import load_recipe_config

        return load_recipe_config(OmegaConf.create(self.recipe_config(key, run)), local=False)
