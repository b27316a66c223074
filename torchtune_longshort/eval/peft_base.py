"""``longshort-eval peft-base STEP --out DIR``: the base folder stock lm-eval's ``--model hf --model_args
pretrained=DIR,peft=STEP/adapter`` needs for a LoRA run's adapters (:mod:`torchtune_longshort.models.peft_adapter`).

An adapter carries no RoPE: where the run changed the RoPE scaling (YaRN x2 on SmolLM2), its base is the start
checkpoint's weights loaded with the step's ``config.json``, a folder the user had to build by hand (and
``--model hf`` with the start folder as it is was refused: another model). This writes it: the recorded base's
(``base_model_name_or_path``, found as :func:`~torchtune_longshort.eval.peft_fit.recorded_base_found` finds it, a
hub model's name in the Hugging Face cache as transformers loads it offline) weight files and index, the step's
``config.json`` and the step's tokenizer files (the base's where the step has none), then prints the ``--model_args``
to use.

The weights are hard links where the filesystem allows (transformers' ``from_pretrained`` opens the files by path, so
a link loads as the file does; no space is used, and the folder keeps working if the base is moved or deleted; the
project's checkpoint writers replace files by renaming, so a later write to the base does not reach it), else symbolic
links to the base's files (another filesystem: the Hugging Face hub cache itself is symbolic links, which
transformers follows), else copies. ``config.json`` and the tokenizer files are copied (small; an edit of the step's
does not change this folder's). Refused in one line, before anything is written: a STEP without ``adapter/``, a base
not found, an ``--out`` that exists and is not empty, a RoPE transformers cannot run (CLEX, EABF), a QLoRA run's
adapters (trained on the quantized base: PEFT on the full-precision weights is another model). The folder is built
aside in ``--out``'s parent and renamed into place (an empty ``--out`` is kept, its mode with it: the files are moved
into it); where writing fails, only what this call made is removed (that half-built folder, the files it moved, the
parents it made for ``--out``).
"""

from __future__ import annotations

import os
import shutil
from functools import partial
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple

from torchtune_longshort.disk_space import note_room
from torchtune_longshort.eval.cli_argv import prog as eval_prog
from torchtune_longshort.eval.peft_fit import (hub_cached_folder, hub_named, recorded_base_found, recorded_base_name,
                                              recorded_base_said, recorded_revision, same_checkpoint)
from torchtune_longshort.models.hf_checkpoint import CONFIG_FILE, INDEX_FILE, check_checkpoint_folder, read_hf_config
from torchtune_longshort.models.hf_rope import not_representable_method
from torchtune_longshort.models.hf_tokenizer import copy_tokenizer
from torchtune_longshort.models.peft_adapter import ADAPTER_DIR, LAYOUT_FILE
from torchtune_longshort.models.tokenizer_formats import has_tokenizer
from torchtune_longshort.made_folders import folder_beside, missing_root, named_in_place, remove_made_folders
from torchtune_longshort.output_guard import read_json
from torchtune_longshort.refusals import ArgumentParser, refusing, user_path

PEFT_CONFIG = "adapter_config.json"
HOW = {"hard links": "hard links (no space used; kept if the base is moved or deleted)",
       "symbolic links": "symbolic links (another filesystem than the base's: no space used; they follow the base)",
       "copies": "copies (this filesystem takes no links)"}


class BasePlan(NamedTuple):
    """What :func:`write_base_folder` writes: ``out`` from ``base``'s ``weights``, ``step``'s config.json and
    ``tokenizer``'s files (None: none found)."""
    adapter: Path
    step: Path
    base: Path
    weights: List[Path]
    tokenizer: Optional[Path]
    out: Path


def plan_base_folder(given: str, out: str, base: Optional[str] = None) -> BasePlan:
    """Check everything :func:`write_base_folder` needs (``FileNotFoundError`` / ``FileExistsError`` /
    ``ValueError``, one line, nothing written): ``given`` a LoRA run's step folder or its ``adapter/``."""
    folder = Path(given)
    if not folder.is_dir():
        raise FileNotFoundError(f"{given}: no such folder; give a LoRA run's step folder (run/step_<k>) or its "
                                f"{ADAPTER_DIR}/")
    adapter = folder if (folder / PEFT_CONFIG).is_file() else folder / ADAPTER_DIR
    if not (adapter / PEFT_CONFIG).is_file():
        raise FileNotFoundError(f"{given}: holds no {ADAPTER_DIR}/{PEFT_CONFIG}, so no LoRA adapters to put on a base "
                                f"(a full fine-tune's step is evaluated as it is: pretrained={given})")
    step = adapter.parent
    if not (step / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{adapter}: the folder above it ({step}) holds no {CONFIG_FILE}, the step's RoPE: "
                                f"give the adapters inside their step folder (run/step_<k>/{ADAPTER_DIR})")
    quantized = (read_json(adapter / LAYOUT_FILE) or {}).get("base_quantization")
    if quantized:
        raise ValueError(f"{adapter}: trained on the {quantized}-quantized base (QLoRA), so these adapters on the "
                         f"full-precision weights give another model than the run's: evaluate or serve the merged step "
                         f"itself (pretrained={step}, no peft=)")
    method = not_representable_method(read_hf_config(step, field="step"))
    if method:
        raise ValueError(f"{step / CONFIG_FILE}: the run's {method} RoPE is one transformers cannot run, so --model hf "
                         f"loads no base with it: evaluate the merged step with {eval_prog()} run --model longshort "
                         f"--model_args pretrained={step}")
    base_dir = _base(adapter, base)
    weights = check_checkpoint_folder(base_dir)  # refuses, naming it, a folder whose weights are missing or torn
    if (base_dir / INDEX_FILE).is_file():
        weights.append(base_dir / INDEX_FILE)
    target = Path(out).resolve() if Path(out).is_symlink() else Path(out)  # written through, the link kept
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        state = "is a file" if not target.is_dir() else "exists and is not empty"
        raise FileExistsError(f"--out {out}: {state}; give a new or empty folder (nothing there is replaced)")
    tokenizer = next((d for d in (step, base_dir) if has_tokenizer(d)), None)
    return BasePlan(adapter, step, base_dir, weights, tokenizer, target)


def _base(adapter: Path, given: Optional[str]) -> Path:
    """The adapters' recorded base as a folder here (``--base`` where given: it must be that checkpoint where the
    record names one here): a relative record as :func:`recorded_base_found` finds it, else a hub model's folder in
    the Hugging Face cache (:func:`hub_cached_folder`: what transformers loads offline)."""
    recorded = recorded_base_name(adapter)
    if not recorded and not given:
        raise ValueError(f"{adapter / PEFT_CONFIG} names no base_model_name_or_path: give --base <the folder the "
                         "adapters were trained on>")
    found = recorded_base_found(adapter, recorded) if recorded else None
    revision = recorded_revision(adapter)  # PEFT loads the base at it (None: main)
    hub = hub_cached_folder(recorded, revision) if recorded and found is None else None
    at = found or hub or (Path(recorded).expanduser() if recorded else None)
    here = at is not None and (at / CONFIG_FILE).is_file()
    said = partial(recorded_base_said, recorded, found, revision)  # asked only by a refusal
    if given:
        chosen = Path(given)
        if not (chosen / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"--base {given}: no checkpoint folder (no {CONFIG_FILE}); give the folder the "
                                    f"adapters were trained on ({said()})")
        if here and not same_checkpoint(chosen, at):
            raise ValueError(f"--base {given}: not the checkpoint these adapters were trained on, "
                             f"{said()} (another content); leave --base out, or give a copy of that folder")
        return chosen
    if not here:
        raise FileNotFoundError(f"{adapter}: its recorded base {said()} is no checkpoint "
                                f"folder here (no {CONFIG_FILE}){_nor_cached(recorded, revision)}; put it back, or "
                                "give --base <a copy of it>")
    return at


def _nor_cached(recorded: str, revision: Optional[str] = None) -> str:
    """For a refusal of a recorded base that may name a hub model: where transformers would have looked for it, at
    the adapter's ``revision`` (the fetch it names gets that one: ``main`` cached does not serve it)."""
    if not hub_named(recorded):
        return ""
    from huggingface_hub import constants  # deferred: as in peft_fit, asked only of a hub-shaped record

    at, fetch = (f" at the adapter's revision {revision!r}", f" --revision {revision}") if revision else ("", "")
    return (f" nor a hub model the Hugging Face cache holds{at} ({constants.HF_HUB_CACHE}; fetch it with hf download "
            f"{recorded}{fetch} where the hub can be reached)")


def write_base_folder(plan: BasePlan) -> str:
    """Write ``plan.out`` (module doc); returns how the weights were placed (a key of :data:`HOW`). An ``--out`` that
    exists (empty) is kept, its mode and owner with it: the files are moved into it. Where writing fails, what this
    call made is taken back (its files, the folder aside, the parents it made) and nothing else."""
    made = missing_root(plan.out.parent)  # the parents this call makes on the way, taken back if it fails
    kept = plan.out.is_dir()  # the user's empty folder: written into, never replaced
    moved: List[Tuple[Path, os.stat_result]] = []  # each file's place in --out and its own stat (a rename keeps it)
    try:
        aside = folder_beside(plan.out, "peft_base")  # a plain mkdir's mode; a killed run's day-old one removed
        try:
            ways = [_place(f, aside / f.name) for f in plan.weights]
            shutil.copyfile(plan.step / CONFIG_FILE, aside / CONFIG_FILE)
            if plan.tokenizer is not None:
                copy_tokenizer(plan.tokenizer, aside)
            if kept:
                for f in sorted(aside.iterdir()):  # noted before the rename: a Ctrl-C just after it is taken back too
                    moved.append((plan.out / f.name, os.lstat(f)))
                    os.rename(f, plan.out / f.name)  # one filesystem (the folder aside lies beside --out)
                aside.rmdir()
            else:
                os.rename(aside, plan.out)
        except BaseException as e:
            shown = named_in_place(e, aside, plan.out)  # the file as it would have been: the folder aside goes
            note_room(shown)  # the room the write found, before the cleanup below frees what it took
            for f, st in moved:  # this call's files in the user's folder, where moved in (the file it moved)
                if not (os.path.lexists(f) and os.path.samestat(os.lstat(f), st)):
                    continue
                if f.is_dir() and not f.is_symlink():
                    shutil.rmtree(f)
                else:
                    f.unlink()
            shutil.rmtree(aside, ignore_errors=True)  # the half-built folder this call made, nothing else
            if shown is not e:
                raise shown from e
            raise
    except BaseException:
        remove_made_folders(plan.out.parent, made)
        raise
    return max(ways, key=list(HOW).index)


def _place(source: Path, target: Path) -> str:
    try:  # to the file itself: Linux's link() of a symbolic link (the hub cache's, relative) links the link
        os.link(source.resolve(), target)
        return "hard links"
    except OSError:  # another filesystem (EXDEV), or one without hard links
        pass
    try:
        os.symlink(source.resolve(), target)
        return "symbolic links"
    except OSError:
        shutil.copyfile(source, target)
        return "copies"


def main(argv: List[str], prog: str) -> int:
    """Parse ``argv`` (after ``peft-base``), refuse or write, print the folder and the ``--model_args``."""
    ap = ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0], examples=[
        f"{prog} run/step_3 --out run_step_3_base",  # the command as it was started, as its other lines say
        'lm-eval run --model hf --model_args pretrained=run_step_3_base,peft=run/step_3/adapter '
        f'--include_path "$({eval_prog()} tasks-path)" --tasks longshort_ppl'])
    ap.add_argument("step", type=user_path, help="a LoRA run's step folder (run/step_<k>), or its adapter/")
    ap.add_argument("--out", required=True, type=user_path, help="the folder to write (new, or empty)")
    ap.add_argument("--base", type=user_path, help="the adapters' base where it no longer lies at its recorded path "
                                                   "(a copy of it)")
    args = ap.parse_args(argv)
    plan = refusing(prog, lambda: plan_base_folder(args.step, args.out, args.base))
    how = refusing(prog, lambda: write_base_folder(plan))
    tokenizer = f"the tokenizer files of {plan.tokenizer}" if plan.tokenizer else \
        "no tokenizer (neither folder holds one: add tokenizer=<folder> to --model_args)"
    print(f"{plan.out}: the weights of {plan.base} as {HOW[how]}, {plan.step / CONFIG_FILE}, {tokenizer}")
    print(f"--model hf --model_args pretrained={plan.out},peft={plan.adapter}")
    return 0
