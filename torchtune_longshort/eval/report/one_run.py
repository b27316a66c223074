"""A run given to the report is one run: every results file under its folder comes from one checkpoint and model
settings (:func:`run_identity`) and one ``--limit``, ``--metadata`` and n-shot (:func:`settings_differences`), or it
is refused naming two files. Merged newest-wins per task, results of different settings would make one report column
of numbers that no single evaluation gave (a ``--limit 1`` ppl beside a full passkey run, under the newest run's
``--limit``); each such run is named on its own instead (its own ``--output_path``, or its results file)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from torchtune_longshort.eval.report.run_files import json_file, limit_text, n_shot, results_files
from torchtune_longshort.eval.tasks import (
    CONTEXT_OPTIONS, IGNORED_KEY, PREFIX, TASK_FAMILIES, TaskFamily, current_name, measured_settings, tasks_path,
)
from torchtune_longshort.eval.tasks.common.lengths import comparable
from torchtune_longshort.eval.tasks.common.unavailable import MODEL_KEY

# model_args that change how fast a run goes, not its numbers
_NOT_IDENTITY = frozenset({"batch_size", "max_batch_size", "device", "trust_remote_code", "parallelize"})
# task metadata that is not the run's --metadata: the YAML's version and path, the model's name (lm-eval also
# copies --model_args into every task's metadata: compared by run_identity)
_NOT_METADATA = frozenset({"version", "config_source", MODEL_KEY})
_UNSET = "(the task's default)"
# (model_args key, the results config's record of the value the model resolved it to: lm-eval hf's and longshort's
# get_model_info): `dtype=float32` given and the checkpoint's own float32 left to its default are one setting
_RESOLVED_ARGS = (("dtype", "model_dtype"), ("max_length", "max_length"), ("truncation", "truncation"))


def _model_args(config: Dict[str, Any]) -> Dict[str, Any]:
    from lm_eval.utils import simple_parse_args_string

    args = config.get("model_args") or {}
    return simple_parse_args_string(args) if isinstance(args, str) else dict(args)


def run_identity(data: Dict[str, Any]) -> Dict[str, Any]:
    """What one column of a report stands for, from a results file's ``config``: the lm-eval model, its
    model_args (``checkpoint_dir`` read as ``pretrained``; batch size and device left out), under ``resolved``
    dtype, max_length and truncation as the model resolved them where its results record that (compared over the
    model_args, not shown as settings given) and, for the
    ``longshort`` model, the checkpoint's content fingerprint (``checkpoint_fingerprint``) and, where the results
    record it (``longshort-eval`` does for any model on a local folder), the folder it resolved ``pretrained`` to
    (``checkpoint_dir``: absolute, links followed), which stands for ``pretrained`` where two runs both have it."""
    config = data.get("config") or {}
    args = {k: str(v) for k, v in _model_args(config).items() if k not in _NOT_IDENTITY}
    if "checkpoint_dir" in args:
        args.setdefault("pretrained", args.pop("checkpoint_dir"))
    if "pretrained" in args:
        args["pretrained"] = args["pretrained"].rstrip("/") or "/"
    ident: Dict[str, Any] = {"model": config.get("model"), "model_args": dict(sorted(args.items()))}
    # what the model ran with, whether --model_args spelled it or not
    ident["resolved"] = {arg: str(config[recorded]).removeprefix("torch.") for arg, recorded in _RESOLVED_ARGS
                         if config.get(recorded) is not None}
    if config.get("checkpoint_fingerprint"):
        ident["checkpoint_fingerprint"] = config["checkpoint_fingerprint"]
    if isinstance(config.get("checkpoint_dir"), str) and config["checkpoint_dir"]:  # resolved by longshort-eval
        ident["checkpoint_dir"] = config["checkpoint_dir"]
    return ident


def _identity_differences(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    diff = [f"model: {a['model']!r} vs {b['model']!r}"] if a["model"] != b["model"] else []
    aa, ba = ({**x["model_args"], **x.get("resolved", {})} for x in (a, b))
    if a.get("checkpoint_dir") and b.get("checkpoint_dir"):  # out/ck, ./out/ck/, a link to it: one folder
        aa["pretrained"], ba["pretrained"] = a["checkpoint_dir"], b["checkpoint_dir"]
    diff += [f"{k}: {aa.get(k)!r} vs {ba.get(k)!r}" for k in sorted(aa.keys() | ba.keys()) if aa.get(k) != ba.get(k)]
    fa, fb = a.get("checkpoint_fingerprint"), b.get("checkpoint_fingerprint")
    if fa and fb and fa != fb:
        diff.append(f"checkpoint content: fingerprint {fa} vs {fb} (the checkpoint folder was rewritten "
                    "between the two evaluations)")
    return diff


@functools.lru_cache(maxsize=1)
def pack_defaults() -> Dict[str, Dict[str, Any]]:
    """``{task: metadata}``: the ``metadata`` block of each of the pack's task YAMLs (its defaults)."""
    loader = type("_Loader", (yaml.SafeLoader,), {})
    loader.add_multi_constructor("!", lambda *_: None)  # lm-eval's !function tags
    out: Dict[str, Dict[str, Any]] = {}
    for f in sorted(tasks_path().glob("*/*.yaml")):
        doc = yaml.load(f.read_text(), Loader=loader)
        if isinstance(doc, dict) and isinstance(doc.get("task"), str) and isinstance(doc.get("metadata"), dict):
            out[doc["task"]] = doc["metadata"]
    return out


def pack_family(task: str) -> Optional[TaskFamily]:
    """The pack's family of ``task`` (its task, or a member named ``<task>_...``); None for another task."""
    for fam in TASK_FAMILIES.values():
        if task == fam.task or task.startswith(fam.task + "_"):
            return fam
    return None


def _reads(task: str, key: str) -> bool:
    """Whether ``task`` (one of the pack's) reads ``--metadata`` key ``key`` (unknown for any other task: False)."""
    fam = pack_family(task)
    if fam is None:
        return False
    return bool((fam.metadata_prefix and key.startswith(fam.metadata_prefix + "_")) or key == fam.data_dir_key
                or (fam.length_swept and key == "max_seq_lengths"))


def task_metadata(data: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """``{task: metadata}`` of one results file as lm-eval ran each task (the YAML's defaults with ``--metadata``
    over them), without the YAML's version and the model's arguments."""
    skip = _NOT_METADATA | set(_model_args(data.get("config") or {}))
    return {current_name(t): {k: v for k, v in ((cfg or {}).get("metadata") or {}).items() if k not in skip}
            for t, cfg in (data.get("configs") or {}).items() if isinstance(cfg, dict)}


def _family_of_config(task: str, config: Dict[str, Any]) -> Optional[TaskFamily]:
    """The pack's family of ``task`` by its name (:func:`pack_family`), else by the folder its YAML was read from
    (``config_source``: LongBench-E's datasets, ``longshort_longbench_<name>_e``, are not named after their group):
    the pack's folder of any install (``.../torchtune_longshort/eval/tasks``), as runs evaluated elsewhere (a
    checkout, another venv or machine) record theirs."""
    fam = pack_family(current_name(task))
    source = ((config or {}).get("metadata") or {}).get("config_source")
    pack = tasks_path().parts[-3:]
    if fam is None and isinstance(source, str) and Path(source).parent.parent.parts[-3:] == pack:
        fam = next((f for f in TASK_FAMILIES.values() if f.folder == Path(source).parent.name), None)
    return fam


def task_settings(data: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """What a results file says its tasks measured, besides the model: ``{"version": {task: version}}`` (lm-eval's
    ``versions``, as its ``make_table`` shows them) and ``{"settings": {family task: {key: value}}}``, each pack
    family's :attr:`~torchtune_longshort.eval.tasks.TaskFamily.measured_by` keys as its tasks ran
    (:func:`~torchtune_longshort.eval.tasks.measured_settings`; a group's members share one ``--metadata``)."""
    versions = {current_name(t): v for t, v in (data.get("versions") or {}).items()
                if t in (data.get("results") or {}) and v not in (None, "N/A")}
    settings: Dict[str, Dict[str, Any]] = {}
    for task, config in (data.get("configs") or {}).items():
        fam = _family_of_config(task, config) if isinstance(config, dict) else None
        if fam is not None and task in (data.get("results") or {}):
            settings.setdefault(fam.task, measured_settings(fam, config.get("metadata") or {}))
    return {"version": versions, "settings": settings}


def _given(metadata: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """The ``--metadata`` a run was given, as far as its tasks show it: each task's values that are not its
    YAML's default nor the task's own (:attr:`~torchtune_longshort.eval.tasks.TaskFamily.measured_defaults`:
    ``passkey_seed: 0`` spelled out is the value a run that left it out ran at; lm-eval records no ``--metadata`` of
    its own)."""
    out: Dict[str, Any] = {}
    own = {k: v for fam in TASK_FAMILIES.values() for k, v in fam.measured_defaults}  # each task gets every key
    for task, md in metadata.items():
        defaults = {**own, **pack_defaults().get(task, {})}
        for k, v in md.items():
            if k not in defaults or comparable(k, defaults[k]) != comparable(k, v):
                out.setdefault(k, v)
    return out


def _metadata_differences(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    """The ``--metadata`` keys two results files differ in: one given to both with other values, or given to one
    and read by a task of the other, which ran at another value (its own default). A list is compared as its task
    reads it (:func:`~torchtune_longshort.eval.tasks.common.lengths.comparable`: ``"0,50,100"`` is ``[0, 50, 100]``),
    named as each file spells it."""
    ma, mb = task_metadata(a), task_metadata(b)
    ga, gb = _given(ma), _given(mb)
    out = []
    for key in sorted(ga.keys() | gb.keys()):
        if key in ga and key in gb:
            if comparable(key, ga[key]) != comparable(key, gb[key]):
                out.append(f"--metadata {key}: {ga[key]!r} vs {gb[key]!r}")
            continue
        given, other, first = (ga[key], mb, True) if key in ga else (gb[key], ma, False)
        ran = list(dict.fromkeys(repr(md.get(key, _UNSET)) for t, md in other.items()  # as text: a list is unhashable
                                 if _reads(t, key) and comparable(key, md.get(key, _UNSET)) != comparable(key, given)))
        if ran:
            pair = (repr(given), " / ".join(sorted(ran)))
            out.append(f"--metadata {key}: {pair[0] if first else pair[1]} vs {pair[1] if first else pair[0]}")
    return out


def settings_differences(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    """What makes two parsed results files two runs although their model settings agree: ``--limit``,
    ``--metadata`` (:func:`_metadata_differences`), n-shot (of a task both scored, or of the pack's tasks, which all
    default to 0-shot: another value is ``--num_fewshot``) and the chat template (on a task both scored that did not
    ignore it)."""
    la, lb = (d.get("config", {}).get("limit") for d in (a, b))
    diff = [f"--limit: {limit_text(la)} vs {limit_text(lb)}"] if la != lb else []
    diff += _metadata_differences(a, b)
    sa, sb = n_shot(a), n_shot(b)
    shared = [f"{t} {sa[t]} vs {sb[t]}" for t in sorted(sa.keys() & sb.keys()) if sa[t] != sb[t]]
    pa, pb = ({n for t, n in s.items() if t.startswith(PREFIX)} for s in (sa, sb))
    if not shared and pa and pb and pa != pb:
        shared = [f"the pack's tasks {sorted(pa)} vs {sorted(pb)}"]
    diff += [f"n-shot: {'; '.join(shared)}"] if shared else []
    ca, cb = (chat_tasks(d) for d in (a, b))
    both = sorted((ca | cb) & _tasks(a) & _tasks(b))
    if any((t in ca) != (t in cb) for t in both):
        diff.append(f"--apply_chat_template: {'on' if ca & set(both) else 'off'} vs {'on' if cb & set(both) else 'off'}"
                    f" ({', '.join(both)})")
    return diff


def _tasks(data: Dict[str, Any]) -> set:
    return set(data.get("results") or {})


def chat_tasks(data: Dict[str, Any]) -> set:
    """The tasks of one results file a chat template was applied to (not those that ignored it: the pack's
    perplexity records ``--apply_chat_template`` under ``ignored_options``, TaskFamily.fixed_context)."""
    if not data.get("chat_template"):
        return set()
    return {t for t, c in (data.get("configs") or {}).items()
            if CONTEXT_OPTIONS["apply_chat_template"] not in ((c or {}).get(IGNORED_KEY) or ())}


def check_one_run(run: Path) -> Dict[str, Any]:
    """The :func:`run_identity` shared by every results file of ``run``; ``ValueError`` naming two files and what
    differs when they come from different checkpoints or model settings (checkpoint fingerprints are compared where
    both files have one: older results files lack it), or from different ``--limit``, ``--metadata``, n-shot or
    chat template."""
    seen: List[Tuple[Path, Dict[str, Any], Dict[str, Any]]] = []
    for f in results_files(run):
        data = json_file(f)
        ident = run_identity(data)
        for f0, a, data0 in seen:
            diff = _identity_differences(a, ident)
            what = "checkpoints / model settings"
            if not diff:
                diff = settings_differences(data0, data)
                what = "runs (other --limit, --metadata, n-shot or chat template)"
            if diff:
                raise ValueError(
                    f"results_dir={str(run)!r} mixes results of different {what}, which would be merged into one "
                    f"report column: {'; '.join(diff)} ({f0} and {f}). Give each run its own --output_path folder, "
                    "or name one run's results file (lm-eval writes "
                    "<output_path>/<checkpoint path>/results_<date>.json)"
                )
        for key in ("checkpoint_fingerprint", "checkpoint_dir"):
            if seen and ident.get(key) and not seen[0][1].get(key):
                f0, a, data0 = seen[0]
                seen[0] = (f0, {**a, key: ident[key]}, data0)
        seen.append((f, ident, data))
    return seen[0][1] if seen else {}
