"""A checkpoint tokenizer as torchtune's ``ModelTokenizer``: messages in, ``tokens`` and ``mask`` out.

torchtune's recipes and chat datasets call a model tokenizer on a sample (``tokenizer({"messages": [...]},
inference=True)`` in ``tune run generate``; ``alpaca_dataset`` / ``chat_dataset`` for training) and read its
``stop_tokens``. A checkpoint folder's tokenizer is one of three formats (:mod:`~torchtune_longshort.models.
tokenizer_formats`), and for a ``tokenizer.json``-only model (SmolLM2, Qwen2) torchtune 0.6.1 has no model tokenizer.
The messages are formatted as the checkpoint's own model expects them:

- the folder's chat template (``chat_template.jinja``, else ``tokenizer_config.json``'s ``chat_template``), rendered
  by transformers' own renderer (``apply_chat_template``'s), the whole text encoded at once with special-token strings
  mapped to their ids; a trailing empty assistant message (what ``generate`` sends) becomes the template's
  generation prompt (``add_generation_prompt=True``);
- otherwise, or when a torchtune ``prompt_template`` is given (then applied first, as torchtune's tokenizers do):
  torchtune's own ``tokenize_messages_no_special_tokens``, ``[BOS] + each message's text (+ EOS after an
  assistant message)``, BOS where the source model adds one, EOS unless ``inference``, a message that continues a
  turn encoded without a leading word-start marker (a folder without a template and no ``prompt_template``: said
  once, naming the folder, since transformers' ``apply_chat_template`` refuses such a folder).

``mask`` is each token's message's ``masked`` (the generation prompt counts as masked); where the text does not show
a message's end (a template that renders a message otherwise when it ends the conversation, ``loop.last``), the
tokens it shares with the next message whose end it shows take ``masked`` if either is masked, said once.
``max_seq_len`` truncates as torchtune's tokenizers do: EOS kept last when end tokens are added, and masked, as
torchtune's Llama-3, Qwen2 and Qwen2.5 tokenizers mask it (it kept the cut answer's mask: a model trained through
``tokenizer.max_seq_len`` learned to end a turn mid-answer; torchtune's Phi-3 tokenizer keeps it). A template that
fails on a conversation (``raise_exception``, a syntax error, an undefined name) or one transformers refuses is
refused in one line naming its file (``ValueError``).
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from torchtune_longshort.launcher import launched_rank
from torchtune_longshort.models.tokenizer_files import named_tokens, read_json

CHAT_TEMPLATE_FILE = "chat_template.jinja"
logger = logging.getLogger(__name__)


def chat_template_of(folder: Path) -> Optional[str]:
    """The chat template a folder's ``AutoTokenizer`` uses: ``chat_template.jinja``, else ``tokenizer_config.json``'s
    ``chat_template`` (a string, or transformers' list of ``{name, template}`` / mapping of name to template: the
    ``default`` one); None when there is none. One transformers refuses (a list or mapping without ``default``, a
    value that is not text) or an empty ``chat_template.jinja`` is refused naming the file and the fix: it read as
    no template, and the messages were formatted as plain text without a word."""
    f = folder / CHAT_TEMPLATE_FILE
    if f.is_file():
        text = f.read_text()
        if not text.strip():
            raise ValueError(f"{f} is empty: write the model's chat template there, or delete the file (then "
                             "tokenizer_config.json's chat_template is used, else torchtune's plain message format)")
        return text
    config = folder / "tokenizer_config.json"
    t = config_chat_templates(folder)
    if isinstance(t, dict):
        if "default" not in t:
            raise ValueError(f"{config}: chat_template holds the templates {sorted(map(str, t))} and none named "
                             f"'default' (transformers refuses it too): name the one to use 'default', or write it "
                             f"to {f}")
        t = t["default"]
    if t is not None and not isinstance(t, str):
        raise ValueError(f"{config}: chat_template is {t!r:.60}, not a template's text (transformers "
                         f"refuses it too): give the template as a string, or write it to {f}")
    return t if t else None


def config_chat_templates(folder: Path) -> Any:
    """``tokenizer_config.json``'s ``chat_template`` as transformers reads it: a template's text, or its named
    templates (transformers' list of ``{name, template}``, or a mapping) as ``{name: template}``, ``default``
    among them or not; None without one. :func:`chat_template_of` takes its ``default``; the eval model's own-code
    folders (``eval.model.chat``) all of them, as ``--apply_chat_template <name>`` picks one."""
    t = read_json(folder / "tokenizer_config.json").get("chat_template")
    if isinstance(t, list):  # transformers' list of {name, template}
        t = {e.get("name"): e.get("template") for e in t if isinstance(e, dict)}
    return t


def chat_template_file(folder: Path) -> str:
    """Where :func:`chat_template_of` read ``folder``'s template from, for a message."""
    f = folder / CHAT_TEMPLATE_FILE
    return str(f) if f.is_file() else f"{folder / 'tokenizer_config.json'} (chat_template)"


def stop_ids(folder: Path, eos_id: int, extra: Sequence[int] = ()) -> List[int]:
    """EOS, ``generation_config.json``'s ``eos_token_id`` (an id or a list: e.g. Llama-3-Instruct's ``<|eot_id|>``)
    and ``extra``, each once."""
    value = read_json(folder / "generation_config.json").get("eos_token_id")
    more = value if isinstance(value, list) else [value] if isinstance(value, int) else []
    return list(dict.fromkeys([int(eos_id), *(int(i) for i in more), *(int(i) for i in extra)]))


def chat_template_tokens(folder: Path, bos_token: Optional[str], eos_token: Optional[str]) -> Dict[str, str]:
    """The special tokens ``apply_chat_template`` hands a template besides the messages: the ``special_tokens_map``
    of transformers' own tokenizer of ``folder`` (every named token it has, ``unk_token``, ``pad_token``, ... and
    its class's defaults, e.g. Qwen2's ``unk_token``; one it lacks stays undefined, as a template may test). Where
    transformers does not load the folder: the named tokens its files give (:func:`~torchtune_longshort.models.
    tokenizer_files.named_tokens`), with ``bos_token`` / ``eos_token`` as the checkpoint tokenizer resolves them;
    so too for a folder whose tokenizer is its own code (``auto_map``), which is never run (transformers asked
    ``Do you wish to run the custom code? [y/N]`` on the console and waited 15 s)."""
    from transformers import AutoTokenizer

    try:
        loaded = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
        return dict(loaded.special_tokens_map)
    except Exception:  # noqa: BLE001 - a folder transformers cannot load: the files' own names
        names = {**named_tokens(folder), "bos_token": bos_token, "eos_token": eos_token}
        return {k: v for k, v in names.items() if v is not None}


def render_chat_template(template: str, messages: List[Dict[str, str]], add_generation_prompt: bool,
                         continue_final_message: bool = False, **tokens: Optional[str]) -> str:
    """``template`` rendered by transformers' own renderer (what ``apply_chat_template`` calls); ``tokens``:
    ``bos_token``, ``eos_token``, ... as the template reads them; ``continue_final_message``: the text ends where the
    last message's content does (``apply_chat_template``'s)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template([messages], chat_template=template, add_generation_prompt=add_generation_prompt,
                                        continue_final_message=continue_final_message, **tokens)
    return rendered[0]


def _items(message: Any) -> List[str]:
    """The text items of a torchtune ``Message`` (a prompt template adds its tags as items of their own)."""
    items = message.content if isinstance(message.content, list) else [{"type": "text", "content": message.content}]
    for item in items:
        if item.get("type") != "text":
            raise ValueError(f"tokenizer: a {message.role} message holds {item.get('type')!r} content; a checkpoint "
                             "tokenizer reads text messages only")
    return [item["content"] for item in items]


def _text(message: Any) -> str:
    return "".join(_items(message))


def _truncate(tokens: List[int], mask: List[bool], max_seq_len: Optional[int],
              eos_id: Optional[int]) -> Tuple[List[int], List[bool]]:
    if max_seq_len is None or len(tokens) <= max_seq_len:
        return tokens, mask
    tokens, mask = tokens[:max_seq_len], mask[:max_seq_len]
    if eos_id is not None:  # the EOS put at the cut is not an answer's end: masked, as torchtune's chat tokenizers do
        tokens[-1], mask[-1] = eos_id, True
    return tokens, mask


def tokenize_messages(tok: Any, messages: Sequence[Any], add_end_tokens: bool = True,
                      prompt_template: Optional[Callable] = None) -> Tuple[List[int], List[bool]]:
    """``(tokens, mask)`` of torchtune ``Message`` s for the checkpoint tokenizer ``tok`` (a
    :class:`~torchtune_longshort.models.source_tokenizers.SourceTokenizer`); the format: the module docstring."""
    messages = list(messages)
    template = None if prompt_template is not None else tok.chat_template
    if prompt_template is not None:
        messages = list(prompt_template(messages))
    if template is None:
        from torchtune.modules.transforms.tokenizers import tokenize_messages_no_special_tokens

        if prompt_template is None:  # transformers refuses such a folder; torchtune formats it so: said once
            _say_once(tok, "_said_no_template",
                      "%s has no chat template (chat_template.jinja, tokenizer_config.json's chat_template): the "
                      "messages are formatted as torchtune's tokenizers format them without a prompt_template, "
                      "[BOS] + each message's text (+ EOS after an answer), no roles; for an instruct model add "
                      "its chat_template.jinja, or set tokenizer.prompt_template (e.g. "
                      "torchtune.data.ChatMLTemplate)", tok.path.parent)

        return tokenize_messages_no_special_tokens(
            _TorchtuneBase(tok), messages, bos_id=tok.bos_id if tok.adds_bos else None,
            eos_id=tok.eos_id if add_end_tokens else None)
    generation_prompt = bool(messages) and messages[-1].role == "assistant" and not _text(messages[-1])
    if generation_prompt:
        messages = messages[:-1]
    dicts = [{"role": m.role, "content": _text(m)} for m in messages]
    names = tok.template_tokens

    def encode(text: str) -> List[int]:
        return tok.encode_plain(text, parse_special_tokens=True)  # a template writes special tokens as text

    try:
        text = render_chat_template(template, dicts, generation_prompt, **names)
    except Exception as e:  # noqa: BLE001 - the template's own error (raise_exception, a syntax or undefined name)
        raise ValueError(
            f"the chat template of {chat_template_file(tok.path.parent)} fails on this conversation (roles "
            f"{[d['role'] for d in dicts]}): {type(e).__name__}: {' '.join(str(e).split())}; transformers' "
            "apply_chat_template fails the same way: fix the template or the data (e.g. a system message the "
            "template refuses), or set tokenizer.prompt_template to format the messages with torchtune's") from None
    tokens = encode(text)
    # where each message ends in the text: the rendered conversation up to it, when the whole one starts with it
    ends: List[Optional[int]] = []
    for i in range(len(messages)):
        try:
            prefix = render_chat_template(template, dicts[:i + 1], False, **names)
        except Exception:  # a template that refuses a partial conversation: this message's end stays open
            prefix = None
        ends.append(len(prefix) if prefix is not None and text.startswith(prefix) else None)
    cuts = sorted({e for e in ends if e is not None} | {len(text)})
    pieces = [encode(text[a:b]) for a, b in zip([0] + cuts[:-1], cuts)]
    if [t for piece in pieces for t in piece] == tokens:  # the text encodes piece by piece: one encode per message
        at = dict(zip(cuts, itertools.accumulate(len(piece) for piece in pieces)))
        token_ends = [None if e is None else at[e] for e in ends]
    else:  # a piece's first token merges with the one before it: the prefix's own encoding says where it ends
        token_ends = [None if e is None else len(encode(text[:e])) for e in ends]
    mask = [True] * len(tokens)  # the generation prompt (what is left past the last message) is prompt
    start, first, mixed = 0, 0, 0
    for k, (m, e) in enumerate(zip(messages, token_ends)):
        if e is None:
            continue
        end = min(max(e, start), len(tokens))
        # messages first..k share the tokens [start, end): those whose ends the text does not show (a template that
        # renders a message otherwise when it ends the conversation, loop.last) share the closing message's; a
        # span of prompt and answer is prompt (its answer tokens not trained on, never its prompt tokens trained)
        masked = [messages[j].masked for j in range(first, k + 1)]
        if len(set(masked)) > 1:
            mixed += end - start
        mask[start:end] = [any(masked)] * (end - start)
        start, first = end, k + 1
    if mixed:
        _say_once(tok, "_said_mixed_mask",
                  "%s: the chat template renders a message otherwise when it ends the conversation (loop.last), so "
                  "where it ends in a longer one is not known: %d tokens of prompt and answer together are masked "
                  "as prompt (said once)", chat_template_file(tok.path.parent), mixed)
    return _truncate(tokens, mask, tok.max_seq_len, tok.eos_id if add_end_tokens else None)


def _say_once(tok: Any, said: str, message: str, *args: Any) -> None:
    """``message`` as a warning once per tokenizer (its attribute ``said`` set), and under a launcher (``tune run
    --nproc_per_node N``) on rank 0 alone, as the recipe's own lines: every process tokenizes its share of the
    records with the same tokenizer, and each said the line (two processes: twice)."""
    if getattr(tok, said, False):
        return
    setattr(tok, said, True)
    if launched_rank() == 0:
        logger.warning(message, *args)


class _TorchtuneBase:
    """The checkpoint tokenizer as torchtune's ``BaseTokenizer`` (``encode(text, add_bos, add_eos,
    trim_leading_whitespace)``), for torchtune's own ``tokenize_messages_no_special_tokens``."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.max_seq_len = tok.max_seq_len

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False,
               trim_leading_whitespace: bool = False) -> List[int]:
        return (self.tok.encode_continuation if trim_leading_whitespace else self.tok.encode_plain)(text)
