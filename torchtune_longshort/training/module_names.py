"""Module names as a state dict spells them: without the infixes that wrappers put into ``named_modules()``."""

from __future__ import annotations


def clean_module_name(name: str) -> str:
    """A module name without the wrappers' infixes (activation checkpointing, FSDP)."""
    return name.replace("._checkpoint_wrapped_module", "").replace("._fsdp_wrapped_module", "")
