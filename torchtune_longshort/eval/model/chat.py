"""Chat templates for the ``longshort`` model (lm-eval's ``--apply_chat_template``): the tokenizer folder's own
template (``chat_template.jinja``, or ``chat_template`` in ``tokenizer_config.json``), rendered by transformers'
tokenizer as lm-eval's ``hf`` model renders it, so both models see the same prompt text. The ``longshort`` model
still encodes with its own tokenizer.

``--apply_chat_template <name>`` picks a template as lm-eval's ``hf`` picks it (``TemplateLM.chat_template``): from a
tokenizer with named templates (``chat_template`` a dict: ``additional_chat_templates/<name>.jinja`` beside
``chat_template.jinja``, the ``default``) the one of that name, refused in one line naming the names it has; a
tokenizer with a single template uses it, with one warning that the name is not used. Before, the name was silently
unused. The prompts render through the template picked (lm-eval 0.4.13's ``hf`` records the named template in the
results but renders the tokenizer's default).

A folder whose tokenizer is its own code (``tokenizer_config.json``'s ``auto_map``) is never run: transformers does
not load it without running that code, so its template is read from the files (:class:`FileTemplates`) and rendered
by transformers' own renderer, as the checkpoint tokenizer formats chat messages for such a folder
(:mod:`torchtune_longshort.models.chat_messages`). Before, such a folder was refused as having no chat template."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from torchtune_longshort.models.chat_messages import (CHAT_TEMPLATE_FILE, chat_template_of, config_chat_templates,
                                                      render_chat_template)
from torchtune_longshort.models.tokenizer_files import named_tokens, read_json


def _loaded(path: Path) -> Optional[Any]:
    """transformers' tokenizer of the folder of ``path`` (a tokenizer folder or file), None where it does not load.
    A folder whose tokenizer is its own code (``auto_map``) is never run, nor asked about: transformers put ``Do
    you wish to run the custom code? [y/N]`` on the console and waited 15 s (as ``models.chat_messages``)."""
    # deferred: transformers (only a run that asks for a chat template needs it)
    from transformers import AutoTokenizer

    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _file_templates(folder: Path) -> Union[None, str, Dict[str, str]]:
    """The folder's chat templates as transformers' tokenizer holds them (``chat_template``): the one template
    (:func:`~torchtune_longshort.models.chat_messages.chat_template_of`), or with named ones
    (``additional_chat_templates/<name>.jinja``, or ``tokenizer_config.json``'s list or mapping of them) a dict of
    them and the ``default`` where there is one (named templates without a default are a dict too, as
    transformers holds them: ``--apply_chat_template <name>`` picks one, and the folder was refused as having no
    chat template, or its list as lacking ``default``); None without any."""
    named = {p.stem: p.read_text() for p in sorted((folder / "additional_chat_templates").glob("*.jinja"))}
    raw = None if (folder / CHAT_TEMPLATE_FILE).is_file() else config_chat_templates(folder)
    if isinstance(raw, dict):
        named = {**raw, **named}
        default = named.pop("default", None)
        if "default" in raw:  # read as the checkpoint tokenizer reads it (a value that is not text: refused)
            default = chat_template_of(folder)
    else:
        default = chat_template_of(folder)
    if not named:
        return default
    return {**named, "default": default} if default else named


class FileTemplates:
    """The chat-template part of transformers' tokenizer for a folder whose tokenizer is its own code: its
    ``chat_template`` read from the files, and ``apply_chat_template(..., tokenize=False)`` through transformers'
    renderer with the named tokens the files give (what ``apply_chat_template`` hands a template)."""

    def __init__(self, folder: Path) -> None:
        self.chat_template = _file_templates(folder)
        self._tokens = named_tokens(folder)

    def apply_chat_template(self, conversation: List[Dict[str, str]], tokenize: bool = False,
                            add_generation_prompt: bool = False, continue_final_message: bool = False,
                            chat_template: Optional[str] = None) -> str:
        assert not tokenize, "the text only: the longshort model encodes with its own tokenizer"
        template = chat_template or (self.chat_template["default"] if isinstance(self.chat_template, dict)
                                     else self.chat_template)
        messages = [{k: v for k, v in m.items() if v is not None} for m in conversation]  # as transformers drops them
        return render_chat_template(template, messages, add_generation_prompt, continue_final_message, **self._tokens)


def _own_code(folder: Path) -> bool:
    """Whether the folder's tokenizer is its own code (``auto_map`` in ``tokenizer_config.json``)."""
    return bool(read_json(folder / "tokenizer_config.json").get("auto_map"))


def template_tokenizer(path: Path) -> Optional[Any]:
    """transformers' tokenizer of the folder of ``path`` (a tokenizer folder or file) when it carries a chat
    template (a :class:`FileTemplates` where the tokenizer is the folder's own code), else None."""
    tokenizer = _loaded(path)
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    if tokenizer is None and _own_code(folder):
        tokenizer = FileTemplates(folder)
    return tokenizer if getattr(tokenizer, "chat_template", None) else None


def lacks_template(path: Path) -> bool:
    """Whether the tokenizer folder (or file) at ``path`` is one transformers loads and it carries no chat template
    (False where it does not load: the model that reads it then says why)."""
    tokenizer = _loaded(path)
    return tokenizer is not None and not getattr(tokenizer, "chat_template", None)


def no_template_message(path: Path) -> str:
    return (f"--apply_chat_template: the tokenizer at {path} has no chat template (chat_template.jinja, or "
            "chat_template in tokenizer_config.json): evaluate without --apply_chat_template, or name a tokenizer "
            "folder that has one (--model_args tokenizer=...)")


def template_name(chat_template: Any) -> Optional[str]:
    """The template name in lm-eval's ``apply_chat_template`` value (``--apply_chat_template <name>``): a string
    other than true/false, else None (the tokenizer's default template)."""
    if isinstance(chat_template, str) and chat_template.strip().lower() not in ("true", "false", ""):
        return chat_template
    return None


def select_template(templates: Any, name: Optional[str], path: Path) -> Tuple[str, Optional[str]]:
    """The template of ``templates`` (a tokenizer's ``chat_template``: one template, or a dict of named ones) that
    ``--apply_chat_template [name]`` picks, as lm-eval's ``TemplateLM.chat_template`` (its ``hf`` model) picks it,
    and the warning to log (None: none). ``ValueError`` in one line for a name the dict lacks, or a dict without
    ``default`` and no name."""
    if isinstance(templates, dict):
        key = "default" if name is None else name
        if key not in templates:
            given = "--apply_chat_template" if name is None else f"--apply_chat_template {name}"
            raise ValueError(f"{given}: the tokenizer at {path} has no chat template named {key!r}: give one of "
                             f"{sorted(templates)} (--apply_chat_template <name>)")
        return templates[key], None
    if name is None:
        return templates, None
    return templates, (f"--apply_chat_template {name}: the tokenizer at {path} has a single chat template, not named "
                       "ones: that template is used (as lm-eval's hf does)")


def render(tokenizer: Any, chat_history: List[Dict[str, str]], add_generation_prompt: bool,
           template: Optional[str] = None) -> str:
    """The prompt text of ``chat_history`` through ``template`` (default: the tokenizer's own; lm-eval ``hf``'s
    ``apply_chat_template``: a template that refuses the system role is tried again without it)."""
    import jinja2

    kwargs = dict(tokenize=False, add_generation_prompt=add_generation_prompt,
                  continue_final_message=not add_generation_prompt, chat_template=template)
    try:
        return tokenizer.apply_chat_template(chat_history, **kwargs)
    except jinja2.exceptions.TemplateError:
        return tokenizer.apply_chat_template([m for m in chat_history if m["role"] != "system"], **kwargs)
