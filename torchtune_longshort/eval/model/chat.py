"""Chat templates for the ``longshort`` model (lm-eval's ``--apply_chat_template``): the tokenizer folder's own
template (``chat_template.jinja``, or ``chat_template`` in ``tokenizer_config.json``), rendered by transformers'
tokenizer as lm-eval's ``hf`` model renders it, so both models see the same prompt text. The ``longshort`` model
still encodes with its own tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional


def template_tokenizer(path: Path) -> Optional[Any]:
    """transformers' tokenizer of the folder of ``path`` (a tokenizer folder or file) when it carries a chat
    template, else None."""
    # deferred: transformers (only a run that asks for a chat template needs it)
    from transformers import AutoTokenizer

    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return tokenizer if getattr(tokenizer, "chat_template", None) else None


def lacks_template(path: Path) -> bool:
    """Whether the tokenizer folder (or file) at ``path`` is one transformers loads and it carries no chat template
    (False where it does not load: the model that reads it then says why)."""
    from transformers import AutoTokenizer

    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return not getattr(tokenizer, "chat_template", None)


def no_template_message(path: Path) -> str:
    return (f"--apply_chat_template: the tokenizer at {path} has no chat template (chat_template.jinja, or "
            "chat_template in tokenizer_config.json): evaluate without --apply_chat_template, or name a tokenizer "
            "folder that has one (--model_args tokenizer=...)")


def render(tokenizer: Any, chat_history: List[Dict[str, str]], add_generation_prompt: bool) -> str:
    """The prompt text of ``chat_history`` (lm-eval ``hf``'s ``apply_chat_template``: a template that refuses the
    system role is tried again without it)."""
    import jinja2

    kwargs = dict(tokenize=False, add_generation_prompt=add_generation_prompt,
                  continue_final_message=not add_generation_prompt)
    try:
        return tokenizer.apply_chat_template(chat_history, **kwargs)
    except jinja2.exceptions.TemplateError:
        return tokenizer.apply_chat_template([m for m in chat_history if m["role"] != "system"], **kwargs)
