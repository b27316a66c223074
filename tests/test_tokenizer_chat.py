"""checkpoint_tokenizer's chat templates (training), against transformers' apply_chat_template on the same folder:
a torchtune model tokenizer that renders the folder's template and masks the prompt, a loop.last template that never
trains on the prompt, a template transformers refuses refused naming its file, a chat cut at max_seq_len, a folder
without a template tokenized as torchtune's tokenizer (said once, by rank 0); a long chat encoded once, the template
read once. Split from test_tokenizer_specials.py (special-token strings)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA2_CHAT = ("{% for m in messages %}{% if m['role'] == 'user' %}"
               "{{ bos_token + '[INST] ' + m['content'] + ' [/INST]' }}{% elif m['role'] == 'assistant' %}"
               "{{ ' ' + m['content'] + ' ' + eos_token }}{% else %}"
               "{{ '<<SYS>>' + m['content'] + '<</SYS>>' }}{% endif %}{% endfor %}")


def _conversation(*, generate: bool):
    from torchtune.data import Message

    msgs = [Message(role="system", content="Be brief.", masked=True),
            Message(role="user", content="Hi <s> there ", masked=True), Message(role="assistant", content="Hello!"),
            Message(role="user", content="More", masked=True)]
    return msgs + [Message(role="assistant", content="" if generate else "Ok.")]


# a template that writes each named special token the tokenizer has (transformers passes those it has only)
SPECIALS_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                     "{% for k in ['unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token'] %}"
                     "{% if k == 'unk_token' and unk_token is defined %}unk_token={{ unk_token }} {% endif %}"
                     "{% if k == 'sep_token' and sep_token is defined %}sep_token={{ sep_token }} {% endif %}"
                     "{% if k == 'pad_token' and pad_token is defined %}pad_token={{ pad_token }} {% endif %}"
                     "{% if k == 'cls_token' and cls_token is defined %}cls_token={{ cls_token }} {% endif %}"
                     "{% if k == 'mask_token' and mask_token is defined %}mask_token={{ mask_token }} {% endif %}"
                     "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


@pytest.mark.parametrize("layout", ["llama2", "llama3", "smollm2", "qwen2"])
def test_checkpoint_tokenizer_is_a_torchtune_model_tokenizer_with_the_folders_chat_template(family_dirs, tmp_path,
                                                                                          layout):
    """``tune run generate`` / a torchtune chat dataset call the tokenizer on messages (it raised ``TypeError:
    'HFJsonTokenizer' object is not callable``): with the folder's chat template the ids are
    ``AutoTokenizer.apply_chat_template``'s (a trailing empty assistant message: the generation prompt), the mask
    is each message's, and ``stop_tokens`` holds EOS."""
    from transformers import AutoTokenizer

    from torchtune_longshort.models import checkpoint_tokenizer

    folder = tmp_path / layout
    shutil.copytree(family_dirs[layout], folder)
    (folder / "chat_template.jinja").write_text(LLAMA2_CHAT if layout == "llama2" else CHATML)
    tok, ref = checkpoint_tokenizer(str(folder)), AutoTokenizer.from_pretrained(str(folder))
    for generate in (True, False):
        msgs = _conversation(generate=generate)
        dicts = [{"role": m.role, "content": m.text_content} for m in (msgs[:-1] if generate else msgs)]
        want = ref.apply_chat_template(dicts, add_generation_prompt=generate, tokenize=False)
        want = ref(want, add_special_tokens=False).input_ids
        out = tok({"messages": msgs}, inference=generate)
        assert out["tokens"] == want and "messages" not in out
        assert len(out["mask"]) == len(want)
        trained = ref.decode([t for t, m in zip(out["tokens"], out["mask"]) if not m])
        assert "Hello!" in trained and ("Ok." in trained) != generate
        assert not any(w in trained for w in ("brief", "Hi", "More"))
    assert tok.eos_id in tok.stop_tokens
    # apply_chat_template hands the template every named special token the tokenizer has (unk_token, pad_token,
    # ...), not only BOS/EOS: a template that writes one rendered without it
    (folder / "chat_template.jinja").write_text(SPECIALS_TEMPLATE)
    tok, ref = checkpoint_tokenizer(str(folder)), AutoTokenizer.from_pretrained(str(folder))
    msgs = _conversation(generate=False)
    text = ref.apply_chat_template([{"role": m.role, "content": m.text_content} for m in msgs], tokenize=False)
    assert tok({"messages": msgs})["tokens"] == ref(text, add_special_tokens=False).input_ids, text
    named = {k: v for k, v in ref.special_tokens_map.items() if k not in ("bos_token", "eos_token")}
    assert all(f"{k}={v}" in text for k, v in named.items()) and (layout != "smollm2" or named), text


# a template that ends the conversation's last message otherwise (loop.last): no message but the last ends in the
# whole text where the conversation up to it ends
LOOP_LAST = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] }}{% if loop.last %}"
             "{{ '<|im_end|>\n' }}{% else %}{{ '<|im_start|>\n' }}{% endif %}{% endfor %}")


RAISES = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
          "{% endif %}{{ m['content'] }}{% endfor %}")


def test_a_loop_last_template_never_trains_on_the_prompt(family_dirs, tmp_path, caplog):
    """A template that renders a message otherwise when it ends the conversation (``loop.last``): the whole text
    took the last message's mask, so a chat dataset with ``train_on_input: False`` trained on the system and user
    messages without a word. Tokens whose message the text does not show are masked now (prompt wins), said once;
    the ids stay ``apply_chat_template``'s."""
    from transformers import AutoTokenizer

    from torchtune_longshort.models import checkpoint_tokenizer

    folder = tmp_path / "smollm2"
    shutil.copytree(family_dirs["smollm2"], folder)
    (folder / "chat_template.jinja").write_text(LOOP_LAST)
    tok, ref = checkpoint_tokenizer(str(folder)), AutoTokenizer.from_pretrained(str(folder))
    msgs = _conversation(generate=False)
    out = tok({"messages": msgs})
    text = ref.apply_chat_template([{"role": m.role, "content": m.text_content} for m in msgs], tokenize=False)
    assert out["tokens"] == ref(text, add_special_tokens=False).input_ids
    trained = ref.decode([t for t, m in zip(out["tokens"], out["mask"]) if not m])
    assert not any(w in trained for w in ("brief", "Hi", "More")), trained
    assert "chat_template.jinja" in caplog.text and "loop.last" in caplog.text
    tok({"messages": msgs})
    assert caplog.text.count("loop.last") == 1


@pytest.mark.parametrize("case", ["raises", "syntax", "empty_file", "list_without_default", "not_text"])
def test_a_chat_template_transformers_refuses_is_refused_naming_its_file(family_dirs, tmp_path, case):
    """A template that raises (``raise_exception``, a syntax error) ended in jinja's traceback; one transformers
    refuses in ``tokenizer_config.json`` (a list with no ``default``, a value that is not text) or an empty
    ``chat_template.jinja`` read as no template: the messages were formatted as plain text without a word. Each is
    refused in one line naming the file; transformers' ``apply_chat_template`` (the reference) refuses each too,
    but the empty file, which it renders as no text at all."""
    from transformers import AutoTokenizer

    from torchtune_longshort.models import checkpoint_tokenizer

    folder = tmp_path / "smollm2"
    shutil.copytree(family_dirs["smollm2"], folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    file = "chat_template.jinja"
    if case in ("raises", "syntax", "empty_file"):
        text = {"raises": RAISES, "syntax": "{{ messages[0]['content'] }", "empty_file": "\n"}[case]
        (folder / file).write_text(text)
    else:
        file = "tokenizer_config.json"
        config["chat_template"] = [{"name": "tool_use", "template": CHATML}] if case == "list_without_default" else 5
        (folder / file).write_text(json.dumps(config))
    dicts = [{"role": m.role, "content": m.text_content} for m in _conversation(generate=False)]
    ref = AutoTokenizer.from_pretrained(str(folder))
    if case == "empty_file":
        assert not ref.apply_chat_template(dicts, tokenize=False).strip()
    else:
        with pytest.raises(Exception):
            ref.apply_chat_template(dicts, tokenize=False)
    with pytest.raises(ValueError, match=re.escape(str(folder / file))) as e:
        checkpoint_tokenizer(str(folder))({"messages": _conversation(generate=False)})
    assert "\n" not in str(e.value)
    # transformers' mapping form takes its default, as transformers does
    config["chat_template"] = {"default": CHATML, "tool_use": "x"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    got = checkpoint_tokenizer(str(folder))({"messages": _conversation(generate=False)})["tokens"]
    ref = AutoTokenizer.from_pretrained(str(folder))
    assert got == ref(ref.apply_chat_template(dicts, tokenize=False), add_special_tokens=False).input_ids


def test_a_chat_cut_at_max_seq_len_masks_the_eos_put_at_the_cut(family_dirs, tmp_path):
    """``tokenizer.max_seq_len`` cuts a templated chat inside an answer: the EOS put at the cut (SmolLM2's
    ``<|im_end|>``, its end of turn) kept the answer's mask, so the model learned to end a turn mid-answer.
    torchtune's own ``truncate`` as its Llama-3 / Qwen2 / Qwen2.5 tokenizers call it is the reference."""
    from torchtune.data import Message
    from torchtune.data._utils import truncate

    from torchtune_longshort.models import checkpoint_tokenizer

    folder = tmp_path / "smollm2"
    shutil.copytree(family_dirs["smollm2"], folder)
    (folder / "chat_template.jinja").write_text(CHATML)
    msgs = [Message(role="user", content="Tell me a story.", masked=True),
            Message(role="assistant", content="Once upon a time " * 20, masked=False)]
    full = checkpoint_tokenizer(str(folder))({"messages": msgs})
    for n in (len(full["tokens"]) - 10, len(full["tokens"]) // 2 + 3):
        tok = checkpoint_tokenizer(str(folder), max_seq_len=n)
        cut = tok({"messages": msgs})
        assert not full["mask"][n - 1]  # the cut falls inside the answer
        assert cut["tokens"] == truncate(full["tokens"], n, tok.eos_id)
        assert cut["mask"] == truncate(full["mask"], n, True)
        assert tok({"messages": msgs}, inference=True)["mask"] == full["mask"][:n]  # no EOS added: nothing masked


def test_checkpoint_tokenizer_without_a_chat_template_tokenizes_messages_as_torchtunes_tokenizer(sp_tokenizer_dir,
                                                                                                 caplog):
    """No chat template (or a torchtune ``prompt_template``): torchtune's own SentencePiece model tokenizer is the
    reference, ids and mask, for generation and training, truncated or not. Without a ``prompt_template`` the
    role-less format is said once, naming the folder and the fix (it was silent; transformers refuses there)."""
    from torchtune.models.llama2 import llama2_tokenizer

    from torchtune_longshort.models import checkpoint_tokenizer

    path = str(sp_tokenizer_dir / "tokenizer.model")
    for template in (None, "torchtune.data.ChatMLTemplate"):
        for max_seq_len in (None, 12):
            ours = checkpoint_tokenizer(str(sp_tokenizer_dir), max_seq_len=max_seq_len, prompt_template=template)
            ref = llama2_tokenizer(path, max_seq_len=max_seq_len, prompt_template=template)
            for generate in (True, False):
                msgs = _conversation(generate=generate)
                assert ours({"messages": msgs}, inference=generate) == ref({"messages": msgs}, inference=generate)
            assert ours.stop_tokens == ref.stop_tokens
            said = [r.getMessage() for r in caplog.records if "has no chat template" in r.getMessage()]
            assert len(said) == (template is None) and (not said or str(sp_tokenizer_dir) in said[0]), said
            caplog.clear()


@pytest.mark.parametrize("rank", ["0", "1"])
def test_the_no_template_line_is_said_by_rank_0_alone_under_a_launcher(sp_tokenizer_dir, caplog, monkeypatch, rank):
    """Under ``tune run --nproc_per_node 2`` every process tokenizes its share of the chat records: the "has no chat
    template" line (said once per tokenizer) came once per process, twice on the console. The reference: one
    process's lines, which rank 0 says and rank 1 does not."""
    from torchtune_longshort.models import checkpoint_tokenizer

    def said():
        caplog.clear()
        tok = checkpoint_tokenizer(str(sp_tokenizer_dir))
        for generate in (True, False, True):
            tok({"messages": _conversation(generate=generate)}, inference=generate)
        return [r.getMessage() for r in caplog.records if "has no chat template" in r.getMessage()]

    alone = said()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    assert len(alone) == 1 and said() == (alone if rank == "0" else []), caplog.text


def test_chat_template_mask_encodes_a_long_chat_once_not_once_per_message(family_dirs, tmp_path, monkeypatch):
    """The per-message mask encoded the rendered conversation up to each message: a chat dataset row of n turns
    encoded ~n/2 times its text (320 turns of ~1k tokens: 55 s for one row, one encode 0.3 s). The text is encoded
    a bounded number of times, and the mask is still each message's (the rendered prefixes' own encodings)."""
    from torchtune.data import Message

    from torchtune_longshort.models import checkpoint_tokenizer

    folder = tmp_path / "qwen2"
    shutil.copytree(family_dirs["qwen2"], folder)
    (folder / "chat_template.jinja").write_text(CHATML)
    tok = checkpoint_tokenizer(str(folder))
    msgs = [Message(role="user" if i % 2 == 0 else "assistant", content=f"turn {i}: the quick brown fox " * 5,
                    masked=i % 2 == 0) for i in range(40)]
    encoded = []
    plain = type(tok).encode_plain
    monkeypatch.setattr(type(tok), "encode_plain", lambda self, text, **kw: encoded.append(len(text))
                        or plain(self, text, **kw))
    out = tok({"messages": msgs})
    monkeypatch.undo()
    text_len = encoded[0]
    assert sum(encoded) <= 3 * text_len, (sum(encoded), text_len)
    dicts = [{"role": m.role, "content": m.text_content} for m in msgs]
    from torchtune_longshort.models.chat_messages import render_chat_template

    for i in (0, 1, 17, 39):  # message i's tokens end where the conversation rendered up to it encodes to
        end = len(tok.encode_plain(render_chat_template(CHATML, dicts[:i + 1], False), parse_special_tokens=True))
        assert out["mask"][end - 1] == msgs[i].masked and (i == 39 or out["mask"][end] == msgs[i + 1].masked)


def test_chat_template_is_read_once_not_once_per_row(family_dirs, tmp_path, monkeypatch):
    """A chat dataset calls the tokenizer on every row: the folder's chat template (a file read, or
    tokenizer_config.json parsed: ~50 KB for Llama-3) was read again on each call."""
    from torchtune_longshort.models import chat_messages, checkpoint_tokenizer

    folder = tmp_path / "qwen2"
    shutil.copytree(family_dirs["qwen2"], folder)
    (folder / "chat_template.jinja").write_text(CHATML)
    tok = checkpoint_tokenizer(str(folder))
    reads = []
    real = chat_messages.chat_template_of
    monkeypatch.setattr(chat_messages, "chat_template_of", lambda f: reads.append(f) or real(f))
    import torchtune_longshort.models.source_tokenizers as st

    monkeypatch.setattr(st, "chat_template_of", chat_messages.chat_template_of, raising=False)
    first = tok({"messages": _conversation(generate=False)})
    for _ in range(3):
        assert tok({"messages": _conversation(generate=False)}) == first
    assert len(reads) <= 1, reads
