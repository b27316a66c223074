"""The one rule for which settings of a learned RoPE a new scaling keeps (CLEX over CLEX: its ODE's width,
activation, step, query scale), asked by the training path (``rope_scaled``, resume) and the evaluation's override
(``rope=clex``) alike, and the one line both say about it.

:class:`LearnedSettingsRule` is a base of :class:`~torchtune_longshort.rope.base.ScaledRoPE`: every method asks it
as ``ScaledRoPE``'s own classmethods. Pure Python: nothing here imports torch.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple


class LearnedSettingsRule:
    """What a RoPE method's learned parameters were trained with, and what a new scaling over them keeps."""

    method: str  # the method's name (ScaledRoPE.method)
    # Whether the method has learned parameters (saved in the checkpoint's RoPE side file).
    has_learned_parameters: bool = False
    # The settings that say what those learned parameters compute (CLEX's ODE width, activation, step, query scale):
    # a later scaling of the same method on such a checkpoint keeps the checkpoint's, where it gives none.
    learned_settings: Tuple[str, ...] = ()

    @classmethod
    def learns_over(cls, trained: Optional[Mapping[str, Any]]) -> bool:
        """Whether a new scaling by this method over a RoPE of spec ``trained`` (``spec()``'s; None: plain) takes
        that RoPE's learned parameters: both are this method, and it has learned parameters (CLEX over CLEX)."""
        return cls.has_learned_parameters and (trained or {}).get("method") == cls.method

    @classmethod
    def kept_learned_settings(cls, trained: Optional[Mapping[str, Any]], given: Mapping[str, Any]
                              ) -> Tuple[Dict[str, Any], Dict[str, Tuple[Any, Any]]]:
        """The one rule for which settings of a learned RoPE a new scaling keeps, asked by the training path
        (``rope_scaled``, resume) and the evaluation's override (``rope=clex``) alike. Over a RoPE of spec
        ``trained`` that :meth:`learns_over`, the ``learned_settings`` its parameters were trained with that
        ``given`` (the new scaling's keywords; a None value is not given) leaves out, and those ``given`` changes
        as ``{key: (trained value, given value)}``; ``({}, {})`` otherwise. Everything else of ``trained`` (how
        training draws t, the length it targeted) is the new scaling's own; where it sits (base, head size,
        pre-trained length) each caller takes as it needs."""
        if not cls.learns_over(trained):
            return {}, {}
        kept = {k: trained[k] for k in cls.learned_settings if k in trained and given.get(k) is None}
        changed = {k: (trained[k], given[k]) for k in cls.learned_settings
                   if k in trained and given.get(k) is not None and given[k] != trained[k]}
        return kept, changed

    @classmethod
    def learned_settings_note(cls, kept: Mapping[str, Any], changed: Mapping[str, Tuple[Any, Any]],
                              key_prefix: str = "", runs: str = "train on") -> str:
        """What :meth:`kept_learned_settings` decided, in words: the settings kept, and each one changed named as
        its caller types it (``key_prefix``: ``rope_`` for an override, ``""`` for a config node), for the one line
        both paths say."""
        said = (f"keeps the settings its learned {cls.method} parameters were trained with: "
                f"{', '.join(f'{k}={v!r}' for k, v in kept.items()) or 'none'}")
        if not changed:
            return said
        replaced = ", ".join(f"{key_prefix}{k}={new!r} replaces {old!r}" for k, (old, new) in changed.items())
        return f"{said}; {replaced} (the learned parameters {runs} under the new value{'s' * (len(changed) > 1)})"
