"""A RoPE override as a user types it: ``rope=<method>`` with ``rope_<param>=<value>`` (the ``longshort`` eval
model's ``--model_args``), or ``<method>,rope_<param>=<value>`` (``longshort-misalignment --rope``). One parser and
one set of checks for every command that takes one, each message naming the parameters as typed (``rope_factor``,
``rope_max_seq_len``, never the spec's ``factor`` / ``max_seq_len``), and the one line that says what an override
replaces in a checkpoint that carries a scaling of its own (a YaRN- or CLEX-trained step, a Llama-3.1 config.json).
"""

from __future__ import annotations

import contextlib
import difflib
import re
from typing import Any, Dict, Optional

from torchtune_longshort.lengths import length_value
from torchtune_longshort.models.hf_checkpoint import ROPE_SIDE_FILE, CheckpointFolder
from torchtune_longshort.models.folder_rope import keeps_learned_rope, pretrained_rope
from torchtune_longshort.models.hf_rope import SPEC_CONTEXT_KEYS
from torchtune_longshort.rope import ROPE_METHODS, check_rope_method, has_learned_parameters, method_parameters

# the spec keys a config.json's scaling holds for the model's shape, not for the scaling: not worth a reader's eye
_SHAPE_KEYS = ("head_dim", "layout")


def override_spec(rope: Optional[str], params: Dict[str, Any], where: str) -> Optional[Dict[str, Any]]:
    """``rope`` (a method name, or None: no override) and its parameters ``{"factor": 2}`` (typed ``rope_factor=2``)
    as a spec; ``ValueError`` in one line, prefixed with ``where``, for parameters without a method, a method or a
    parameter the registry does not know (with the nearest name), and a ``rope_max_seq_len`` that is no length."""
    if params and rope is None:
        raise ValueError(f"{where}: rope_* arguments {sorted('rope_' + k for k in params)} given without a method "
                         "(rope=<method>)")
    if rope is None:
        return None
    check_rope_method(str(rope), "rope")
    _check_parameters(str(rope), params, where)
    spec = {"method": str(rope), **params}
    if "max_seq_len" in spec:
        spec["max_seq_len"] = length_value("rope_max_seq_len", spec["max_seq_len"])
    return spec


def _check_parameters(method: str, given: Dict[str, Any], where: str) -> None:
    if "layout" in given:  # the checkpoint's pairing: another one was taken, and rotated the wrong dimensions
        raise ValueError(f"{where}: rope_layout={given['layout']}: which dimensions RoPE pairs is the checkpoint's "
                         "(its family's layout, which its q/k weights were converted for), not the scaling's: leave "
                         "rope_layout out")
    takes = method_parameters(method)
    accepted = None if takes is None else [k for k in takes if k != "layout"]
    # the spec's context keys (rope_original_max_seq_len, rope_base, ...) go to every method's build
    unknown = sorted(k for k in given if accepted is not None and k not in accepted and k not in SPEC_CONTEXT_KEYS)
    if unknown:
        near = difflib.get_close_matches(unknown[0], accepted, n=1)
        scale = getattr(ROPE_METHODS.get(method), "scale_parameter", None)
        if unknown[0] == "factor" and scale not in (None, "factor"):  # the method's own (CLEX's t_max)
            near = [scale]
        hint = f" (did you mean 'rope_{near[0]}'?)" if near else ""
        takes = sorted({*accepted, *SPEC_CONTEXT_KEYS} - {"method", "head_dim", "layout"})
        raise ValueError(f"{where}: rope_{unknown[0]}={given[unknown[0]]} is not a parameter of RoPE method "
                         f"{method!r}{hint}: it takes {['rope_' + a for a in takes]}")


def _value(text: str) -> Any:
    """A ``rope_<param>=`` value typed on a command line, as lm-eval's ``simple_parse_args_string`` reads the
    eval model's: ``true`` / ``false``, an integer, a number, else the text."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_override(text: str, where: str = "--rope") -> Dict[str, Any]:
    """``<method>,rope_<param>=<value>,...`` (``yarn,rope_factor=2``; ``rope=yarn,rope_factor=2`` as the eval's
    ``--model_args`` spell it is taken too) as a spec, through :func:`override_spec`."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ValueError(f"{where}={text!r}: give a RoPE method, e.g. {where} yarn,rope_factor=2")
    method = parts[0][len("rope="):] if parts[0].startswith("rope=") else parts[0]
    check_rope_method(method, where)  # named as typed: --rope='yarnn', not the eval's rope='yarnn'
    params: Dict[str, Any] = {}
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if not sep or not key.startswith("rope_") or not value:
            raise ValueError(f"{where}={text!r}: {part!r} is not rope_<param>=<value>: give e.g. "
                             f"{where} {method},rope_factor=2")
        if key[len("rope_"):] in params:  # the last one was taken, the first dropped without a word
            raise ValueError(f"{where}={text!r}: {key} is given twice ({key}={params[key[len('rope_'):]]}, "
                             f"{key}={value}): give it once")
        params[key[len("rope_"):]] = _value(value)
    try:
        return override_spec(method, params, where)
    except ValueError as e:  # a value's own check (rope_max_seq_len='abc') after where, as every other refusal
        if str(e).startswith(where):
            raise
        raise ValueError(f"{where}: {e}") from None


def typed(spec: Dict[str, Any], prefix: str = "rope=") -> str:
    """The override as the user typed it: ``rope=yarn,rope_factor=2`` (``prefix`` ``"--rope "``: the CLI's)."""
    return ",".join([f"{prefix}{spec['method']}"] + [f"rope_{k}={v}" for k, v in spec.items() if k != "method"])


def raise_as_typed(e: ValueError, spec: Optional[Dict[str, Any]], where: str = "") -> None:
    """A RoPE parameter's own check, named as typed (``rope_factor=0.5`` was "factor=0.5"), after ``where`` (the
    CLI's ``--rope``, which holds the parameters; "": they are arguments of their own, the eval's ``model_args``);
    any other error as it is."""
    said = str(e)
    given = [k for k in spec or {} if k != "method"]
    if not any(said.startswith(f"{k}=") for k in given):
        raise e
    # every mention of a parameter the user gave, as typed: "give max_seq_len >= 2048" too, not only the first
    typed_names = re.sub(r"(?<![\w.])(" + "|".join(map(re.escape, given)) + r")\b", r"rope_\1", said)
    raise ValueError(f"{where}: {typed_names}" if where else typed_names) from None


@contextlib.contextmanager
def parameters_as_typed(spec: Optional[Dict[str, Any]], where: str = ""):
    """Re-raise a RoPE parameter's ``ValueError`` from the block named as typed (:func:`raise_as_typed`)."""
    try:
        yield
    except ValueError as e:
        raise_as_typed(e, spec, where)


def check_override_length(spec: Optional[Dict[str, Any]], pretrained: int, prefix: str = "rope=") -> None:
    """Refuse a ``rope_max_seq_len`` past the positions the override's own scaling reaches from the ``pretrained``
    positions (:meth:`~torchtune_longshort.rope.base.ScaledRoPE.covered_length`): ``rope=linear,rope_factor=2,
    rope_max_seq_len=4096`` on 512 positions covered 4096 (positions 1024-4095 extrapolated, unsaid), and
    ``rope=default,rope_max_seq_len=1024`` ran plain RoPE past its 512 positions with no verdict. One below them
    for a method whose factor it sets (``rope=yarn,rope_max_seq_len=256``) is refused naming ``rope_factor``, not the
    build's ``factor``."""
    if not spec or "max_seq_len" not in spec:
        return
    method = ROPE_METHODS[spec["method"]]
    original = int(spec.get("original_max_seq_len") or pretrained)
    asked = int(spec["max_seq_len"])
    if method.has_factor and "factor" not in spec and asked < original:  # its factor would be asked / original < 1
        raise ValueError(f"{typed(spec, prefix)}: rope_max_seq_len={asked} is below the {original} pre-trained "
                         f"positions it scales from (factor {asked}/{original} < 1): give rope_max_seq_len >= "
                         f"{original} (the length to scale to), or rope_factor=<s >= 1>")
    reach = method.covered_length({k: v for k, v in spec.items() if k != "max_seq_len"}, original)
    if reach is None or asked <= reach:
        return
    given = typed(spec, prefix)
    if method.scale_parameter is None:
        raise ValueError(f"{given}: RoPE method {spec['method']!r} scales nothing, so rope_max_seq_len={asked} is "
                         f"past the {original} pre-trained positions it covers: give a method that scales "
                         f"({prefix}yarn,rope_factor={-(-asked // original)}), or rope_max_seq_len <= {original}")
    param = method.scale_parameter
    raise ValueError(f"{given}: rope_max_seq_len={asked} is past the {reach} positions rope_{param}="
                     f"{spec[param]} scales the {original} pre-trained positions to: give rope_{param}="
                     f"{-(-asked // original)}, or rope_max_seq_len <= {reach} (or leave it out)")


def replacement_note(folder: CheckpointFolder, spec: Optional[Dict[str, Any]], prefix: str = "rope=") -> Optional[str]:
    """The one line that says what the override ``spec`` replaces in ``folder``: its own scaling (config.json's),
    and whether its learned RoPE parameters (CLEX's ODE) are kept (the same method: with the settings they were
    trained with that the override does not give, and each one it changes, as ``rope_scaled`` says it) or not used
    (another method); None where the folder has plain RoPE or there is no override."""
    own = folder.rope_spec
    if spec is None or not own:
        return None
    shown = {k: v for k, v in own.items() if k not in _SHAPE_KEYS}
    _, original = pretrained_rope(folder)
    said = (f"{typed(spec, prefix)} replaces the RoPE scaling of checkpoint {str(folder.path)!r} ({shown}, from its "
            f"config.json): the override scales its {original} pre-trained positions")
    if not has_learned_parameters(own.get("method")) or not folder.rope_parameters():
        return said
    if keeps_learned_rope(folder, spec):
        kept, changed = ROPE_METHODS[own["method"]].kept_learned_settings(own, spec)
        note = ROPE_METHODS[own["method"]].learned_settings_note(kept, changed, "rope_", "run")
        return f"{said}; its learned {own['method']} parameters ({ROPE_SIDE_FILE}) are kept: the override {note}"
    return (f"{said}; its learned {own['method']} parameters ({ROPE_SIDE_FILE}) are not used (the weights run "
            f"without them): leave out {prefix.strip()} to evaluate the step as trained, or give "
            f"{prefix}{own['method']} to keep them")


def factor_from_length_note(folder: CheckpointFolder, spec: Optional[Dict[str, Any]], length: int, length_name: str,
                            where: str, prefix: str = "rope=") -> Optional[str]:
    """What an override of a method that scales the length (its ``scale_parameter``: ``factor``, CLEX's ``t_max``),
    given neither ``rope_<that>`` nor ``rope_max_seq_len``, does at the run's ``length`` (typed as ``length_name``;
    its factor is ``length`` / the pre-trained positions): refused below them (a factor < 1, which the build refused
    naming ``max_seq_len`` -- CLEX's its ``t_max`` and ``max_seq_len`` --, neither typed by the user), a note at them
    (factor 1: the RoPE the checkpoint already has, said nowhere before). A method whose rotation follows the
    sequence's length (dynamic NTK) scales past them anyway."""
    method = None if spec is None else ROPE_METHODS[spec["method"]]
    scale = None if method is None else method.scale_parameter
    if scale is None or scale in spec or "max_seq_len" in spec:
        return None
    original = int(spec.get("original_max_seq_len") or pretrained_rope(folder)[1])
    value = "<s >= 1>" if scale == "factor" else "<an integer >= 1>"
    fix = f"give rope_{scale}={value}, or {length_name}=<the target length, past {original}>"
    if length < original:
        raise ValueError(f"{where + ': ' if where else ''}{prefix}{spec['method']} without rope_{scale} scales to "
                         f"{length_name}={length}, "
                         f"below the {original} positions {str(folder.path)!r} was pre-trained for ({scale} "
                         f"{length}/{original} < 1): {fix}")
    if scale != "factor" and length % original:  # an integer scale (CLEX's t_max = length // original): short
        raise ValueError(f"{where + ': ' if where else ''}{prefix}{spec['method']} without rope_{scale} scales to "
                         f"{length_name}={length} by an integer {scale}={length // original}, which covers "
                         f"{length // original * original} of its positions ({original} pre-trained in "
                         f"{str(folder.path)!r}; past them unscaled): give rope_{scale}={-(-length // original)}")
    if length > original or method.length_dependent:
        return None
    return (f"{prefix}{spec['method']} without rope_{scale} scales to {length_name}={length}, the {original} "
            f"positions {str(folder.path)!r} was pre-trained for: {scale} 1, the checkpoint's RoPE unscaled; {fix}")
