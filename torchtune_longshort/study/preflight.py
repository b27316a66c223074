"""The study's pre-flight check: whether every cell of the report can be measured, asked before anything trains.

A cell that comes out NaN for a reason the config and the data decide (a text source that holds too few sequences of
a length in the eval tokenizer's tokens, a length past the eval model's ``max_length``) is known before the first
fine-tune step; a GPU study that finds out after its evaluations has spent its budget on nothing. :func:`preflight`
asks, with the tokenizer the evaluation will use and the ``--metadata`` the study gives lm-eval
(:meth:`~torchtune_longshort.study.runner.Study.task_metadata`):

- every length of ``eval.ppl_lengths``, ``eval.passkey_lengths`` and ``eval.misalignment_lengths`` and every
  BABILong label of ``eval.babilong.lengths`` is at most ``eval.max_length`` (the study generates BABILong rows
  whose whole request, prompt and generation budget included, fits the label: ``generator --fit prompt``, so a
  label within ``max_length`` fits the model);
- BABILong's ``"0k"`` (no haystack: a row is its facts alone, whose request no budget of 0 tokens can hold) is
  sized by its real requests: :data:`ZERO_K_STORIES` stories per QA task, measured as the generator measures a
  row (lm-eval's prompt with its examples, the facts, the question, the generation budget) with the eval
  tokenizer; longer than ``eval.max_length`` is refused, naming the tokens needed. (Sized, not refused outright:
  ``0k`` is BABILong's no-distractor baseline, a cell worth having wherever the model holds its prompt.) With
  ``eval.babilong.depths`` set, ``"0k"`` is refused: the generator writes no row of it (no haystack to put a
  depth in);
- ``longshort_ppl`` and ``longshort_misalignment`` get their ``num_samples`` sequences at every length from their
  text source: the tasks' own functions cut them (:func:`~torchtune_longshort.eval.tasks.ppl.task.ppl_samples`,
  :func:`~torchtune_longshort.eval.tasks.misalignment.task.misalignment_samples`), so the check and the tasks
  cannot disagree;
- a given base (``base.checkpoint_dir``) opens with the eval tokenizer through the models' one checkpoint path
  (:func:`~torchtune_longshort.models.checkpoint_open.open_checkpoint`, with the eval model's own arguments,
  :meth:`~torchtune_longshort.study.run_configs.RunConfigs.eval_model_args`): a folder or tokenizer the evaluation
  would refuse is refused here; the positions it covers and its verdict at ``eval.max_length`` are logged (every
  study evaluation allows extrapolation past them: that is what the study measures).

A refusal is the study config's (:class:`~torchtune_longshort.study.config.StudyConfigError`: exit 2, nothing
written under the output folder), one line per problem naming the fields, the length, how many sequences the
source gives and what to change. Documents are tokenized once per check (shared by every length and family).

Not checked, and said so in the log: sources the evaluation reads from the Hugging Face hub (``pg19``, ``hf``), and
an eval tokenizer that does not exist and that no run trains. A study whose base is pre-trained here gets its
tokenizer from its first recipe run; the check trains it first, with the recipe config's own tokenizer component in
a temporary folder (its own progress lines dropped: a refusal is one line on stderr), and once the config passes puts
it where that run would (``Study.tokenizer_dir``), so the evaluation uses the tokenizer that was checked.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from omegaconf import OmegaConf

from torchtune_longshort._quiet import dropping
from torchtune_longshort.config.values import resolve_component
from torchtune_longshort.data.tokenizer_training import sentencepiece_file
from torchtune_longshort.eval.tasks import TASK_FAMILIES
from torchtune_longshort.eval.tasks.babilong.generator import DEFAULT_SEED, stream_seed
from torchtune_longshort.eval.tasks.babilong.haystack import LENGTHS, load_token_counter
from torchtune_longshort.eval.tasks.babilong.official_prompts import PROMPT_KEY, check_prompt_style
from torchtune_longshort.eval.tasks.babilong.stories import make_story
from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.eval.tasks.common.long_text import HF_PRESETS, flag
from torchtune_longshort.eval.tasks.common.token_sequences import TaskTokenizer
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError
from torchtune_longshort.models.checkpoint_open import ArgNames, open_checkpoint
from torchtune_longshort.made_folders import folder_beside, named_in_place
from torchtune_longshort.refusals import one_line
from torchtune_longshort.study.config import StudyConfigError
from torchtune_longshort.study.eval_config import FAMILY_METADATA_PREFIX, FAMILY_TASK


# How the study's settings are named in the checkpoint path's messages (models.checkpoint_open).
NAMES = ArgNames(checkpoint="base.checkpoint_dir", length="eval.max_length",
                 allow="allow_extrapolation=true (every study evaluation runs with it)",
                 tokenizer="base.tokenizer")

# BABILong's label without a haystack, and how many stories per QA task the pre-flight measures its requests on (drawn
# from the stream the study's generator draws that task's 0k rows from: its first ones are the study's rows).
ZERO_K = next(label for label, n in LENGTHS.items() if n == 0)
ZERO_K_STORIES = 32

# The logger the tiny configs' tokenizer says its progress in (training.bootstrap: torchtune's logger).
TOKENIZER_LOG = "torchtune.utils._logging"


@dataclass(frozen=True)
class _Sampled:
    """A family whose sequences are cut from a text source: its task's sample function and the fields that set it."""

    family: str  # the study family (eval.<family>_lengths)
    prefix: str  # its task's metadata prefix
    num_field: str  # the eval field of its num_samples
    sampler: Callable[..., Any]  # (metadata, length, tokenizer) -> samples; raises TaskDataError


def _sampled_families() -> List[_Sampled]:
    # deferred: lm_eval (these task modules are built on lm-eval's task classes; only a check runs them)
    from torchtune_longshort.eval.tasks.misalignment.task import misalignment_samples
    from torchtune_longshort.eval.tasks.ppl.task import ppl_samples

    return [_Sampled("ppl", FAMILY_METADATA_PREFIX["ppl"], "eval.ppl_num_samples", ppl_samples),
            _Sampled("misalignment", FAMILY_METADATA_PREFIX["misalignment"], "eval.mis_num_samples",
                     misalignment_samples)]


class _MemoTokenizer:
    """A task tokenizer whose ``encode`` remembers what it encoded (one check reads the same documents at every
    length of two families)."""

    def __init__(self, tokenizer: Any):
        self._tok = tokenizer
        self._seen: Dict[str, array] = {}
        self.name = getattr(tokenizer, "name", str(tokenizer))

    def encode(self, text: str) -> List[int]:
        ids = self._seen.get(text)
        if ids is None:
            ids = self._seen[text] = array("l", self._tok.encode(text))
        return list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(ids)


def _metadata_field(study: Any, key: str) -> str:
    """The config field a task metadata key comes from: ``eval.metadata.<key>`` when set there (it wins), else the
    eval section's own field of that name, else ``eval.metadata.<key>`` (unset: the task's default)."""
    ev = study.cfg.eval
    if key in (ev.metadata or {}):
        return f"eval.metadata.{key}"
    return f"eval.{key}" if hasattr(ev, key) else f"eval.metadata.{key}"


def _is_hub_source(metadata: Dict[str, Any], prefix: str) -> bool:
    if metadata.get(f"{prefix}_data_files"):
        return False
    return metadata.get(f"{prefix}_source", "stdlib") in ("hf", *HF_PRESETS)


def _length_problems(study: Any) -> List[str]:
    """Lengths past ``eval.max_length``: every request of them would be refused."""
    ev, problems = study.cfg.eval, []
    for family, task in FAMILY_TASK.items():
        over = [n for n in ev.lengths_of(family) if n > ev.max_length]
        if over:
            problems.append(f"eval.{family}_lengths={ev.lengths_of(family)}: {task} at {over} tokens is past "
                            f"eval.max_length={ev.max_length}, every request of it would be refused; drop those "
                            "lengths or raise eval.max_length")
    over = [lab for lab, n in zip(ev.babilong_lengths, ev.babilong_tokens) if n > ev.max_length]
    if over:
        problems.append(f"eval.babilong.lengths={ev.babilong_lengths}: {over} is past eval.max_length={ev.max_length} "
                        "(a label is the token budget of a row's whole request: prompt, question and generation "
                        "budget), every prompt of it would be refused; drop those labels or raise eval.max_length")
    bab = ev.babilong
    if bab is not None and ZERO_K in bab.lengths and bab.depths:
        problems.append(f"eval.babilong.lengths={bab.lengths} with eval.babilong.depths={bab.depths}: {ZERO_K!r} has "
                        "no haystack to put the facts at a depth in, so no row of it would be generated; drop "
                        f"{ZERO_K!r} from eval.babilong.lengths or set eval.babilong.depths: null")
    return problems


def _zero_k_problems(study: Any, count: Callable[[str], int], tok_path: str, log: Callable[[str], None]) -> List[str]:
    """BABILong's ``"0k"`` sized by its real requests (module doc), tokens counted by ``count`` (the eval
    tokenizer's, named ``tok_path``): a problem when they need more than ``eval.max_length`` tokens."""
    ev = study.cfg.eval
    # deferred: lm_eval (a row's request is measured on lm-eval's own task prompt, as the generator measures it)
    from torchtune_longshort.eval.tasks.babilong.prompt import task_prompt

    need = 0
    style = check_prompt_style(ev.metadata_value(PROMPT_KEY))  # the prompt the tasks send (BABILong's is longer)
    for qa in ev.babilong.tasks_asked:
        prompt = task_prompt(qa, style)
        rng = random.Random(stream_seed(DEFAULT_SEED, qa, ZERO_K, None))  # the generator's stream of this 0k
        for _ in range(max(ev.babilong.n, ZERO_K_STORIES)):
            story = make_story(qa, rng)
            need = max(need, prompt.request_tokens(" ".join(story.facts), story.question, count))
    if need > ev.max_length:
        return [f"eval.babilong.lengths={ev.babilong.lengths}: {ZERO_K!r} (no haystack: a row is its facts alone) "
                f"needs requests of up to {need} tokens of {tok_path} (the {style} prompt with its examples, the "
                f"facts, the question and the generation budget; {ZERO_K_STORIES} stories per task measured), past "
                f"eval.max_length={ev.max_length}: every such prompt would be refused; raise eval.max_length to "
                f"{need} or more, or drop {ZERO_K!r}"]
    log(f"[study] pre-flight: eval.babilong.lengths {ZERO_K!r}: requests of up to {need} tokens, within "
        f"eval.max_length={ev.max_length}")
    return []


def _base_problems(study: Any, log: Callable[[str], None]) -> List[str]:
    """A given base opened as its evaluation will open it (the eval model's arguments, through the models' one
    checkpoint path): a folder or tokenizer it refuses is a problem; the positions it covers and what happens past
    them (its verdict at ``eval.max_length``) are logged. A base pre-trained here does not exist yet: nothing to do.
    Table 1 (no base, a RoPE override per cell) opens its checkpoint per cell through the eval model's own
    arguments (``Table1.check_cells``), not here."""
    base = getattr(study.cfg, "base", None)
    if base is None or not base.given:
        return []
    args = study.eval_model_args(study.base_checkpoint())
    try:
        opened = open_checkpoint(args["pretrained"], names=NAMES, tokenizer=args["tokenizer"],
                                 length=args["max_length"], allow_extrapolation=args["allow_extrapolation"] == "true")
    except (FileNotFoundError, ValueError) as err:
        return [f"base.checkpoint_dir={study.cfg.base.checkpoint_dir!r} / base.tokenizer={args['tokenizer']!r}: "
                f"{one_line(err)}"]
    tok, verdict = opened.tokenizer, opened.verdict
    log(f"[study] pre-flight: base {opened.folder.path} ({opened.folder.family.name}, tokenizer {tok.format}: "
        f"{tok.path}) covers {opened.usable_length} positions"
        + (f"; {verdict.message}" if verdict.message else f", eval.max_length={verdict.length} within them"))
    return [verdict.message] if verdict.refused else []


def _sample_problem(study: Any, fam: _Sampled, metadata: Dict[str, Any], length: int, tokenizer: Any) -> str:
    """Why ``fam`` cannot get its sequences at ``length`` ("" when it can)."""
    try:
        fam.sampler(metadata, length, tokenizer)
        return ""
    except (TaskDataError, FileNotFoundError) as err:
        reason = getattr(err, "finding", str(err))  # the counts alone: the fields to change, in study terms, follow
    p = fam.prefix
    source_key = f"{p}_data_files" if metadata.get(f"{p}_data_files") else f"{p}_source"
    source = metadata.get(source_key, "stdlib")
    join_key = f"{p}_join_documents"
    try:
        joined = flag(metadata, join_key)
    except TaskDataError:
        joined = False
    change = [f"{_metadata_field(study, source_key)} (a source with more text)"]
    if not joined:
        change.append(f"{_metadata_field(study, join_key)}: true (pack its short documents into long streams)")
    change.append(f"a lower {fam.num_field}")
    change.append(f"dropping {length} from eval.{fam.family}_lengths")
    return (f"eval.{fam.family}_lengths / {fam.num_field}={metadata.get(f'{p}_num_samples')} / "
            f"{_metadata_field(study, source_key)}={source!r}: {TASK_FAMILIES[fam.family].task} at "
            f"{length_label(length)} ({length} tokens of {tokenizer.name}): {reason}. Change: {', '.join(change)}")


def _trained_tokenizer(study: Any, into: Path, log: Callable[[str], None]) -> Optional[Path]:
    """The tokenizer the study's first recipe run would train, trained in ``into`` by the recipe config's own
    tokenizer component; None when that component does not train a missing path."""
    node = OmegaConf.to_container(OmegaConf.create(study.recipe_config("base")), resolve=True).get("tokenizer") or {}
    try:  # found as the recipe's config check finds it (torchtune's walk: a function inside a class too)
        component = resolve_component("tokenizer._component_", node.get("_component_"))
    except ValueError:  # it does not import: the recipe config's check says so
        component = None
    if not getattr(component, "trains_missing_path", False):
        return None
    folder = into / "tokenizer"
    log(f"[study] pre-flight: training the study's tokenizer first ({node['_component_']}), to count tokens with it")
    # the bootstrap's own progress lines ("Tokenizer: training ... into <the temporary folder>") are dropped: they
    # came on stderr before a refusal's one line, naming a folder that is gone once the pre-flight ends
    with dropping(TOKENIZER_LOG, [(logging.INFO, r"^Tokenizer: ")]):
        component(**{**{k: v for k, v in node.items() if k != "_component_"}, "path": str(folder)})
    return folder


def preflight(study: Any, log: Callable[[str], None] = print, last_check: Callable[[], None] = lambda: None) -> None:
    """Refuse (:class:`StudyConfigError`) a study whose evaluation cannot measure every cell, before anything
    trains (see the module doc); logs what was checked, what was not, and the time it took. ``last_check``: the
    caller's own check that has a side effect (importing matplotlib writes under HOME), run once every problem here
    is ruled out and before the study's tokenizer is put in its output folder."""
    t0 = time.time()
    cfg, ev = study.cfg, study.cfg.eval
    problems = _length_problems(study) + _base_problems(study, log)
    families = [f for f in _sampled_families() if ev.lengths_of(f.family)]
    metadata = study.task_metadata()
    if ev.longbench_e_data_dir and not Path(ev.longbench_e_data_dir).expanduser().is_dir():
        log(f"[study] pre-flight: eval.longbench_e_data_dir={ev.longbench_e_data_dir!r} is not a folder here: "
            "LongBench-E is not run (its table is left out)")
    todo = [f for f in families if not _is_hub_source(metadata, f.prefix)]
    zero_k = bool(ev.babilong and ZERO_K in ev.babilong.lengths and not ev.babilong.depths)
    for f in families:
        if f not in todo:
            log(f"[study] pre-flight: eval.{f.family}_lengths not checked: its source "
                f"{metadata.get(f'{f.prefix}_source')!r} is read from the Hugging Face hub by the evaluation")
    with tempfile.TemporaryDirectory(prefix="study_preflight_") as tmp:
        trained = None
        tok_path = study.eval_tokenizer()
        if (todo or zero_k) and not Path(tok_path).exists() and not cfg.base.given:
            trained = _trained_tokenizer(study, Path(tmp), log)
            tok_path = str(sentencepiece_file(trained)) if trained else tok_path
        tokenizer = None
        if todo:
            try:
                tokenizer = _MemoTokenizer(TaskTokenizer(tok_path, True))  # trusted, as the evaluations read it
            except Exception as err:  # noqa: BLE001 -- a tokenizer that cannot be had is the run's error, not ours
                log(f"[study] pre-flight: sequence counts not checked: the eval tokenizer {tok_path!r} cannot be "
                    f"loaded here ({type(err).__name__}: {err})")
        if tokenizer is not None:
            metadata = {**metadata, "tokenizer": tok_path, "max_length": ev.max_length}
            for fam in todo:
                bad = [p for p in (_sample_problem(study, fam, metadata, n, tokenizer)
                                   for n in ev.lengths_of(fam.family) if n <= ev.max_length) if p]
                problems += bad
                if not bad:
                    n = metadata.get(f"{fam.prefix}_num_samples")
                    source = metadata.get(f"{fam.prefix}_data_files") or metadata.get(f"{fam.prefix}_source", "stdlib")
                    log(f"[study] pre-flight: eval.{fam.family}_lengths {ev.lengths_of(fam.family)}: {n} "
                        f"sequence{'' if n == 1 else 's'} at each length from {source!r}"
                        + (" (documents joined)" if metadata.get(f"{fam.prefix}_join_documents") else ""))
        if zero_k:
            try:
                count = load_token_counter(tok_path, trust_remote_code=True)  # as the generator is run
            except Exception as err:  # noqa: BLE001 -- a tokenizer that cannot be had is the run's error, not ours
                log(f"[study] pre-flight: BABILong {ZERO_K!r} not sized: the eval tokenizer {tok_path!r} cannot be "
                    f"loaded here ({type(err).__name__}: {err})")
            else:
                problems += _zero_k_problems(study, count, study.eval_tokenizer(), log)
        if problems:
            raise StudyConfigError("study config: the evaluation could not measure every cell (pre-flight check, "
                                   "before anything trains):\n  - " + "\n  - ".join(problems))
        last_check()
        if trained is not None and not study.tokenizer_dir().exists():
            study.claim_output()
            _put_in_place(trained, study.tokenizer_dir())
    log(f"[study] pre-flight check passed ({time.time() - t0:.1f} s)")


def _put_in_place(trained: Path, target: Path) -> None:
    """``trained``'s files copied into a folder beside ``target``, renamed into place once whole: a full disk (or a
    kill) part-way leaves no ``target`` (a cut one, ``tokenizer.model`` empty, was taken by the rerun as trained, and
    every run failed reading it). An error naming the copy's file is raised naming ``target``'s instead; one naming
    the file read (``trained``'s) keeps it."""
    tmp = folder_beside(target, "copying")
    try:
        for f in sorted(trained.iterdir()):
            try:
                shutil.copyfile(f, tmp / f.name)
            except OSError as e:
                shown = named_in_place(e, tmp, target)
                if shown is e:
                    raise
                raise shown from e
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone once renamed
