"""lm-eval's own models (``--model hf`` and kin) given ``--model_args`` that make them evaluate another model than
meant, or fail after lm-eval's start-up log, refused before it starts (:func:`check_other_model_args`):

- ``rope=`` (with its ``rope_<param>=``): the ``longshort`` model's RoPE override; transformers' classes raised a
  61-line ``TypeError`` (``LlamaForCausalLM.__init__() got an unexpected keyword argument 'rope'``) once lm-eval
  loaded it. ``rope_theta=`` alone is transformers' own config override, passed on.
- ``peft=<a LoRA run's step_<k>/adapter>`` (the folder the recipe writes, :mod:`torchtune_longshort.models.
  peft_adapter`) with ``pretrained=``:

  - the adapter's own step folder: it holds the adapters merged already, so they were applied twice (a tiny run's
    perplexity read 420.8 where the trained model gives 451.7);
  - a folder whose RoPE is not the run's: the start checkpoint keeps its own ``config.json``, so a run that changed
    the RoPE scaling (YaRN x2) was evaluated with the start's (8.5% off in logits on SmolLM2);
  - a QLoRA run's adapters (``longshort_adapter.json``: ``base_quantization``) on a full-precision base: trained on
    the quantized base, they give another model than the run's merged ``step_<k>/`` (a warning: serving them so is
    a choice).

  Any adapter (the recipe's, or a plain PEFT one) with ``pretrained=`` a LoRA run's step folder (its weights hold
  that run's adapters merged) it was not trained on (its ``base_model_name_or_path``) is refused: both would be
  applied. Another adapter folder (not the recipe's) is otherwise PEFT's to check, but for adapters whose shapes do
  not fit ``pretrained=``'s weights, any adapter's (:mod:`torchtune_longshort.eval.peft_fit`).

- ``pretrained=`` a path that is no folder here (:func:`refuse_missing_folder`): transformers took it for a hub name;
  a folder whose weight file is cut short (:func:`refuse_torn_weights`): a safetensors traceback, exit 1.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from torchtune_longshort.eval.peft_fit import (hub_named, is_recorded_base, recorded_base_arg, recorded_base_found,
                                              recorded_base_said, recorded_revision, refuse_unfitting_adapter)
from torchtune_longshort.eval.stale_tokenizer_json import warn_stale_tokenizer_json
from torchtune_longshort.eval.tasks.common.missing_tokenizer import hub_offline_variable, missing_tokenizer_line
from torchtune_longshort.eval.tasks.common.unavailable import out_of_reach
from torchtune_longshort.models.hf_checkpoint import CONFIG_FILE, INDEX_FILE, readable_weights
from torchtune_longshort.models.hf_rope import not_representable_method, rope_of_config
from torchtune_longshort.models.peft_adapter import (ADAPTER_DIR, LAYOUT_FILE, adapter_folder_hint,
                                                    peft_base_command, peft_base_out)
from torchtune_longshort.rope.checkpoint_code import UntrustedCheckpointCode

logger = logging.getLogger(__name__)


def check_other_model_args(model_args: Dict[str, Any], model: str) -> None:
    """:func:`check_peft_args` and the ``rope`` keys of ``--model <model>``'s ``model_args`` (module doc); a stale
    ``tokenizer.json`` is warned of (:mod:`~torchtune_longshort.eval.stale_tokenizer_json`)."""
    if "rope" in model_args:
        raise ValueError(f"--model_args rope={model_args['rope']}: a RoPE override is the longshort model's "
                         f"(--model longshort); --model {model} takes none (transformers refused it after lm-eval's "
                         "start-up): evaluate with --model longshort, or a checkpoint saved with that RoPE")
    warn_stale_tokenizer_json(model_args)
    if model == "hf" and isinstance(model_args.get("tokenizer"), str) and model_args["tokenizer"]:
        refuse_unloadable_tokenizer(model_args["tokenizer"])
    if model_args.get("peft"):
        check_peft_args(str(model_args.get("pretrained")), str(model_args["peft"]))
        pretrained = model_args.get("pretrained")
        refuse_unfitting_adapter(str(pretrained) if pretrained else None, str(model_args["peft"]))


def refuse_unloadable_tokenizer(name: str) -> None:
    """``--model hf``'s ``tokenizer=`` that no tokenizer load can find, refused before lm-eval starts (transformers
    raised it, offline, once the model had loaded: an ``OSError`` traceback): a path that is not there, or, offline
    (huggingface_hub's ``is_offline_mode``), a hub name its cache holds no tokenizer file of."""
    # deferred: huggingface_hub (transformers' dependency; asked only of a --model_args tokenizer=)
    from huggingface_hub import constants, try_to_load_from_cache

    if Path(name).expanduser().exists():
        return
    cached = hub_named(name) and any(isinstance(try_to_load_from_cache(name, f), str)
                                     for f in ("tokenizer_config.json", "tokenizer.json", "config.json"))
    if not cached and (not hub_named(name) or constants.is_offline_mode()):
        raise FileNotFoundError(missing_tokenizer_line(name, FileNotFoundError(name), "--model_args tokenizer"))


def check_peft_args(pretrained: Optional[str], peft: str) -> None:
    """Refuse (``ValueError``, one line) or warn about ``pretrained=`` + ``peft=`` of ``--model hf`` (module doc)."""
    adapter = Path(peft).expanduser()
    layout = _json(adapter / LAYOUT_FILE)
    step = adapter.parent
    where = f"--model_args peft={peft}"
    if pretrained is None:
        return
    base = Path(pretrained).expanduser()
    if layout is not None and base.is_dir() and base.resolve() == step.resolve():
        # the way on with peft=: the recorded base, or the folder peft-base writes where the run changed the RoPE
        # (it named "<the run's start checkpoint>", which that run's next command refused as another RoPE)
        recorded = (_json(adapter / "adapter_config.json") or {}).get("base_model_name_or_path")
        found = recorded_base_found(adapter, str(recorded)) if recorded else None
        way = (f"put the adapters on their base ({_base_way(str(recorded), found, adapter)})" if recorded
               else "give pretrained=<the run's start checkpoint>")
        raise ValueError(f"{where} with pretrained={pretrained}: that step folder holds these adapters merged already, "
                         f"so they would be applied twice; drop peft= to evaluate the trained model, or {way}")
    refuse_other_lora_step(base, adapter, where, pretrained)
    if layout is None:
        return  # a plain PEFT adapter: the rest is PEFT's (and peft_fit's) to check
    theirs, ours = _rope(base / CONFIG_FILE), _rope(step / CONFIG_FILE)
    if theirs is not None and ours is not None and theirs != ours:
        # a RoPE transformers cannot run (CLEX, EABF, YaRN on Phi-3): --model hf loads neither the step nor a base
        # with its config.json, so the fix is the longshort model on the merged step
        method = not_representable_method(_json(step / CONFIG_FILE) or {})
        fix = (f"evaluate the merged step folder with --model longshort --model_args pretrained={step} (transformers "
               f"cannot run its {method} RoPE, so --model hf loads neither it nor a base with its config.json)"
               if method else f"evaluate the step folder itself (pretrained={step}, the adapters merged), or give "
               f"pretrained= a folder holding the base's weights and the step's config.json, which "
               f"{peft_base_command()} {step} --out {peft_base_out(step)} writes")
        raise ValueError(f"{where} with pretrained={pretrained}: the run trained these adapters with RoPE "
                         f"{_said(ours)} ({step / CONFIG_FILE}), and pretrained= loads with {_said(theirs)}, another "
                         f"model; {fix}")
    if layout.get("base_quantization"):
        logger.warning("%s: trained on the %s-quantized base, these adapters on pretrained=%s (full precision) give "
                       "another model than the run's; its step folder %s is the trained one (the adapters merged "
                       "into the dequantized base)", where, layout["base_quantization"], pretrained, step)


def refuse_other_lora_step(base: Path, adapter: Path, where: str, pretrained: str) -> None:
    """``pretrained=`` a step folder of a LoRA run (its ``adapter/`` holds PEFT's ``adapter_config.json``, or the
    layout file: the weights hold that run's adapters merged) with any adapter (the recipe's, or a plain PEFT one)
    not trained on that folder (``base_model_name_or_path``), refused: both sets of adapters would be applied (an
    earlier step's adapters on a later merged step of the same run gave a model neither step is, a tiny run's
    perplexity 487.9, exit 0; a plain copy of a step's adapters on its own step, the adapters twice). The merged
    step alone is named as a way on only where the adapters are a step's own (``<step>/adapter``): that step; a copied
    adapter's way on is its recorded base. Unrecorded base: left as it was; a relative record is matched wherever
    this command runs, by the folder above the adapter that holds it where one does
    (:func:`~torchtune_longshort.eval.peft_fit.is_recorded_base`)."""
    recorded = (_json(adapter / "adapter_config.json") or {}).get("base_model_name_or_path")
    own = base / ADAPTER_DIR
    if not base.is_dir() or not recorded or not any((own / f).is_file() for f in (LAYOUT_FILE, "adapter_config.json")):
        return
    if is_recorded_base(base, str(recorded), adapter):
        return  # a chained run's start: the adapters were trained on these merged weights
    alone, found, revision = "", recorded_base_found(adapter, str(recorded)), recorded_revision(adapter)
    if adapter.name == ADAPTER_DIR and (adapter.parent / CONFIG_FILE).is_file():  # <step>/adapter: that step
        alone = f"evaluate the merged step alone (pretrained={adapter.parent}, no peft=), or "
    raise ValueError(f"{where} with pretrained={pretrained}: that folder is a step of a LoRA run, its weights hold "
                     f"its own adapters ({own}) merged already, and these adapters were trained on "
                     f"{recorded_base_said(str(recorded), found, revision)}, so both would be applied; {alone}put the "
                     f"adapters on their base ({_base_way(str(recorded), found, adapter)})")


def _base_way(recorded: str, found: Optional[Path], adapter: Path) -> str:
    """The ``pretrained=...,peft=...`` that puts a recipe's adapters on their recorded base: the base folder itself,
    or, where the run changed the RoPE (the base's ``config.json`` and the step's name another, which
    :func:`check_peft_args` refuses), a folder holding the base's weights and the step's ``config.json``."""
    arg = recorded_base_arg(recorded, found, recorded_revision(adapter))
    step_config = adapter.parent / CONFIG_FILE
    ours = _rope(step_config) if _json(adapter / LAYOUT_FILE) is not None else None
    theirs = _rope((found or Path(recorded).expanduser()) / CONFIG_FILE)
    if ours is None or theirs is None or ours == theirs:
        return f"pretrained={arg},peft={adapter}"
    out = peft_base_out(adapter.parent)
    return (f"pretrained={out},peft={adapter}, after {peft_base_command()} {adapter.parent} --out {out} writes that "
            f"folder of the weights of {arg} and {step_config}: {arg} as it is loads with RoPE {_said(theirs)}, the "
            f"run trained with {_said(ours)}")


def refuse_missing_folder(pretrained: str, model: str, revision: Optional[str] = None,
                          subfolder: Optional[str] = None) -> None:
    """A ``pretrained=`` written as a path (``/``, ``./``, ``../``, ``~``, or any name no hub repository can have:
    ``outputs/x/step_60`` run from another folder, ``my runs/step_2``) that is no folder here, refused before
    lm-eval starts: transformers takes it for a hub name and fails with a traceback ("Repo id must be in the form
    'repo_name' or 'namespace/repo_name'"). A hub name (``nothere/step_2``, a run's folder too) that is no folder
    here is refused likewise when the hub is offline and the Hugging Face cache holds no copy of it at ``revision``
    (transformers failed after its retries, an 80-line traceback); online, the hub is asked as before."""
    folder = Path(pretrained).expanduser()
    if hub_named(pretrained):
        refuse_uncached_offline(pretrained, model, revision, subfolder)
        if folder.is_dir():  # a folder here (step_2, runs/step_2) is what transformers reads, hub-shaped or not
            refuse_torn_weights(folder / (subfolder or ""))
        return
    if not folder.is_dir():
        state = "is a file" if folder.exists() else "does not exist" if folder.is_absolute() else \
            f"does not exist in {str(Path.cwd())!r}, the folder this command runs in"
        raise FileNotFoundError(f"--model_args pretrained={pretrained}: {state}; --model {model} needs a checkpoint "
                                "folder (config.json + weights) or a hub name")
    if adapter_folder_hint(folder):  # transformers: "Unrecognized model ... should have a model_type key"
        raise FileNotFoundError(f"--model_args pretrained={pretrained}: {adapter_folder_hint(folder, peft_route=True)}")
    refuse_torn_weights(folder / (subfolder or ""))


def refuse_torn_weights(folder: Path) -> None:
    """The safetensors files transformers reads from ``folder`` (its index's shards, else ``model.safetensors``),
    each header read: one cut short (a copy or a full disk) was a safetensors traceback once lm-eval had started."""
    try:
        names = set(json.loads((folder / INDEX_FILE).read_text())["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        names = {"model.safetensors"}  # no index, or one transformers names the fault of
    readable_weights([folder / n for n in sorted(n for n in names if isinstance(n, str)) if (folder / n).is_file()])


def refuse_uncached_offline(name: str, model: str, revision: Optional[str] = None,
                            subfolder: Optional[str] = None) -> None:
    """Hub name ``name``, no folder here, refused (one line) when the hub is offline (huggingface_hub's
    ``is_offline_mode``: ``HF_HUB_OFFLINE``, else ``TRANSFORMERS_OFFLINE``) and its cache holds no ``config.json``
    of it at ``revision`` (``try_to_load_from_cache``): nothing would load it."""
    # deferred: huggingface_hub (transformers' dependency; asked only of a --model_args pretrained=)
    from huggingface_hub import constants, try_to_load_from_cache

    if Path(name).is_dir():
        return
    config = "/".join(p for p in (str(subfolder or "").strip("/"), CONFIG_FILE) if p)
    if isinstance(try_to_load_from_cache(name, config, revision=revision), str):
        return
    at = f" at revision {revision}" if revision else ""
    if not constants.is_offline_mode():
        refuse_unanswered_online(name, model, config, revision)
        return
    variable = hub_offline_variable()
    raise FileNotFoundError(
        f"--model_args pretrained={name}: neither a folder in {str(Path.cwd())!r}, the folder this command runs in, "
        f"nor a model in the Hugging Face cache ({constants.HF_HUB_CACHE}){at}, and the hub is offline ({variable}): "
        f"--model {model} needs a checkpoint folder (give its path) or a cached hub model (run once with offline mode "
        "off to download it)")


def refuse_unanswered_online(name: str, model: str, config: str, revision: Optional[str] = None) -> None:
    """Hub name ``name``, no folder here nor in the cache, the hub online: its ``config`` asked of the hub once (a
    HEAD, nothing written), and refused (one line) where the hub cannot be reached or says it has no such model or
    revision: transformers failed there after its retries, a 90-line ``OSError`` traceback. Any other answer (the
    file there, a gated model, a server error) is left to transformers, which asks again."""
    # deferred: huggingface_hub (transformers' dependency; asked only of a --model_args pretrained=)
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    at = f" at revision {revision}" if revision else ""
    start = (f"--model_args pretrained={name}: neither a folder in {str(Path.cwd())!r}, the folder this command runs "
             f"in, nor a model in the Hugging Face cache ({constants.HF_HUB_CACHE}){at}, and the hub "
             f"({constants.ENDPOINT})")
    try:
        get_hf_file_metadata(hf_hub_url(name, config, revision=revision))
    except GatedRepoError:
        return
    except RepositoryNotFoundError:
        raise FileNotFoundError(f"{start} has no model {name} (none this login may read): --model {model} needs a "
                                "checkpoint folder (give its path) or a hub model's name (`hf auth login` first for "
                                "a private one)") from None
    except RevisionNotFoundError:
        raise FileNotFoundError(f"{start} has no revision {revision} of {name}: give a revision it has (a branch, "
                                "tag or commit), or leave revision= out") from None
    except Exception as err:  # noqa: BLE001 -- only a connection failure is refused here; the rest is transformers'
        if not out_of_reach(err):
            return
        said = " ".join(str(err).split())[:200] or type(err).__name__
        raise FileNotFoundError(f"{start} cannot be reached ({said}): --model {model} needs a checkpoint folder (give "
                                "its path), or run again once the hub is reachable (or, with the model cached, with "
                                "HF_HUB_OFFLINE=1)") from None


def _json(path: Path) -> Optional[Dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _rope(config_file: Path) -> Optional[Tuple[Any, float]]:
    """``(RoPE spec, base)`` of a checkpoint's config.json; None when it cannot be read here (a hub name, a
    folder the model's own loader will name)."""
    config = _json(config_file)
    if config is None:
        return None
    try:
        return rope_of_config(config, str(config_file))
    except UntrustedCheckpointCode:  # code it names, not trusted (longshort-eval's gate, eval.trust_args): refused
        raise
    except (KeyError, TypeError, ValueError):
        return None


def _said(rope: Tuple[Any, float]) -> str:
    spec, theta = rope
    method = "plain" if not spec else ", ".join(f"{k}={v}" for k, v in spec.items()
                                                if k != "base" and not isinstance(v, (list, dict)))  # base: after it
    return f"{method} (base {theta:g})"
