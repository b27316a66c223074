"""Special-token strings in text and whitespace-led text, every tokenizer format against an independent reference.

* The ``tokenizer.json`` written beside a bare SentencePiece model (``write_hf_tokenizer_files``, the tiny configs'
  tokenizer) gives ``AutoTokenizer`` SentencePiece's own ids and text: its Metaspace pre-tokenizer dropped the first
  space of a text that starts with one (``" starts with space"``: 1, 390, ... instead of 1, 259, 283, ...).
* Evaluation (every loader; ``parse_special_tokens=True``) gives ``AutoTokenizer``'s ids, in every format, on texts
  holding ``<s>`` / ``</s>`` / ``<unk>`` / ``<|eot_id|>`` at the start, middle and end, side by side: SentencePiece and
  tiktoken spelled them out as characters (``<s>``: 494, 428, 471 instead of BOS 1), so ``longshort`` and lm-eval's
  ``hf`` scored other ids on chat-templated prompts. Hub-style Llama-2 folders (transformers' ``LlamaTokenizer``,
  ``legacy`` true and false) and ``lstrip`` / ``rstrip`` added tokens included.
* Training (``checkpoint_tokenizer``'s default) keeps such strings as text, in every format.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

PLAIN = [" starts with space", "  leading spaces\n\n\n\ttabs\t\t and   runs    of     spaces   ", "ends with space ",
         "\nstarts with newline", " ", "   ", "", "a", "héllo wörld — naïve café ☕ 日本語のテキスト 🤖🏳️‍🌈",
         "digits 1234567890 3.14159 1e-10 0x1F 2026-12-02", "x" * 50 + " " * 20 + "y"]
SPECIAL = ["<s>Hello", " <s>Hello", "Hello<s>world", "Hello <s> world", "a</s>", "a </s>  ", "<s></s>", "x<unk>y",
           "<s> b", "<s>  b", "\t<s>\n</s>\t", "<s>[INST] hi [/INST] ok </s><s>[INST] again [/INST]",
           "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", "<|eot_id|><|eot_id|> x<|eot_id|>",
           "a<|begin_of_text|>b", "  <|eot_id|>  ", "special <s> </s> <|begin_of_text|> <unk> text", "(?P<s>\\d{2})",
           "<|end|>  x  <|end|>y <|user|>z"]


def _assert_like_autotokenizer(folder: Path, order=None):
    from transformers import AutoTokenizer

    from torchtune_longshort.models import load_tokenizer

    ours = load_tokenizer(folder, order) if order else load_tokenizer(folder)
    ref = AutoTokenizer.from_pretrained(str(folder))
    for text in PLAIN + SPECIAL:
        ids = ref(text).input_ids
        assert ours.encode(text, add_bos=True, add_eos=False) == ids, text
        assert ours.encode_plain(text) == ref(text, add_special_tokens=False).input_ids, text
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), text
    return ours


def test_written_tokenizer_json_gives_sentencepiece_ids_on_whitespace_led_text(sp_tokenizer_dir):
    import sentencepiece as spm
    from transformers import AutoTokenizer

    from torchtune_longshort.models import load_tokenizer

    sp = spm.SentencePieceProcessor(model_file=str(sp_tokenizer_dir / "tokenizer.model"))
    ref = AutoTokenizer.from_pretrained(str(sp_tokenizer_dir))
    as_json = load_tokenizer(sp_tokenizer_dir / "tokenizer.json")
    for text in PLAIN:
        assert ref(text).input_ids == [sp.bos_id()] + sp.encode(text), text
        assert as_json.encode_plain(text) == sp.encode(text), text
        assert ref.decode(sp.encode(text)) == sp.decode(sp.encode(text)), text
    assert ref(" starts with space").input_ids[:2] == [sp.bos_id(), *sp.encode(" ")]  # "▁▁": the space is kept


@pytest.mark.parametrize("layout", ["llama2", "gemma", "llama3", "smollm2", "qwen2"])
def test_evaluation_encodes_special_strings_as_autotokenizer(family_dirs, layout):
    ours = _assert_like_autotokenizer(family_dirs[layout], ("tiktoken",) if layout == "llama3" else None)
    assert ours.format == {"llama3": "tiktoken", "llama2": "sentencepiece", "gemma": "sentencepiece"}.get(
        layout, "hf_json")


def _hub_style(sp_tokenizer_dir: Path, folder: Path, config: dict, added=()) -> Path:
    folder.mkdir()
    for name in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(sp_tokenizer_dir / name, folder / name)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**cfg, **config}))
    spec = json.loads((folder / "tokenizer.json").read_text())
    spec["added_tokens"] += [dict(id=512 + i, content=c, single_word=False, lstrip=ls, rstrip=rs, normalized=False,
                                  special=True) for i, (c, ls, rs) in enumerate(added)]
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    return folder


@pytest.mark.parametrize("legacy", [True, False, None])
def test_hub_llama2_style_folders_follow_autotokenizers_prefix_space(sp_tokenizer_dir, tmp_path, legacy):
    """transformers' LlamaTokenizer builds its own Metaspace pipeline: ``legacy: true`` puts a ``▁`` before every
    piece after a special token that does not start with a space, ``legacy: false`` (the default) only before the
    text's first piece, and neither before a text that starts with a space."""
    config = {"tokenizer_class": "LlamaTokenizer", **({} if legacy is None else {"legacy": legacy})}
    _assert_like_autotokenizer(_hub_style(sp_tokenizer_dir, tmp_path / "hub", config))


def test_lstrip_and_rstrip_added_tokens_take_the_whitespace_beside_them(sp_tokenizer_dir, tmp_path):
    folder = _hub_style(sp_tokenizer_dir, tmp_path / "strip", {},
                        added=[("<|end|>", False, True), ("<|user|>", True, False)])
    ours = _assert_like_autotokenizer(folder)
    assert ours.encode_plain("<|end|>  x") == [512] + ours.encode_plain("x")


@pytest.mark.parametrize("layout", ["llama2", "llama3", "qwen2"])
def test_training_keeps_special_strings_as_text(family_dirs, layout):
    """``checkpoint_tokenizer`` (the recipe's component) encodes a special-token string as its characters, as the
    format's own encoder does: no BOS/EOS in the middle of a document (the stdlib corpus holds ``(?P<s>...)``)."""
    from transformers import AutoTokenizer

    from torchtune_longshort.models import checkpoint_tokenizer

    d = family_dirs[layout]
    tok = checkpoint_tokenizer(str(d))
    assert not tok.parse_special_tokens
    if layout == "llama3":
        tok = checkpoint_tokenizer(str(d / "original" / "tokenizer.model"))
        assert tok.format == "tiktoken"
    ref = AutoTokenizer.from_pretrained(str(d))
    for text in SPECIAL:
        ids = tok.encode(text, add_bos=False, add_eos=False)
        assert not set(ids) & tok.special_ids(), text
        if layout == "llama2":
            import sentencepiece as spm

            assert ids == spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model")).encode(text), text
        else:
            assert ids == ref(text, add_special_tokens=False, split_special_tokens=True).input_ids, text
    assert checkpoint_tokenizer(str(d), parse_special_tokens=True).encode_plain("<s>x</s>") == \
        ref("<s>x</s>", add_special_tokens=False).input_ids


FLAG_TEXTS = ["x <mark> y", "x<mark>y", "x  <mark>  y", " <mark>", "<mark> ", "a\t<mark>\nb", "_<mark>_",
              "<mark><mark>",
              "word<mark> word", "(<mark>)", "<mark>s <mark>", "a<mark>  \n", "x <only> y", "a<only>b", "<only>",
              "x <eot>  y", "<eot>x<mark><only>\t ", "x <MARK> y"]
FLAGS = ("lstrip", "rstrip", "single_word", "normalized", "special")


def _bpe_folder(folder: Path, added, config_tokens) -> Path:
    """A byte-level BPE ``tokenizer.json`` trained on stdlib text by ``tokenizers`` (lower-casing normalizer), with
    ``added`` tokens ``(content, flags)``; ``config_tokens``: ``tokenizer_config.json``'s ``added_tokens_decoder``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok.train_from_iterator(iter_stdlib_documents(limit=5, include_tests=False), trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    for content, flags in added:
        tok.add_tokens([AddedToken(content, **flags)])
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "bos_token": None,
        "added_tokens_decoder": {str(tok.get_vocab_size() + i if c != "<mark>" else tok.token_to_id(c)):
                                 {"content": c, **f} for i, (c, f) in enumerate(config_tokens)}}))
    return folder


@pytest.mark.parametrize("mark,config_mark", [
    (dict(lstrip=True, single_word=True, normalized=False), None),
    (dict(rstrip=True, normalized=True, special=True), None),
    (dict(single_word=True, normalized=False), dict(lstrip=True, rstrip=True, normalized=False, special=True)),
    (dict(lstrip=True, rstrip=True, normalized=True), dict(normalized=True, special=False)),
])
def test_tokenizer_json_added_token_flags_encode_as_autotokenizer(tmp_path, mark, config_mark):
    """``lstrip`` / ``rstrip`` / ``single_word`` / ``normalized`` added tokens of a ``tokenizer.json`` and of its
    ``tokenizer_config.json``'s ``added_tokens_decoder``, which transformers adds again on loading: its flags replace
    the file's (the reader kept the file's: ``x <mark> y`` gave 5 ids for 3) and a token only it names is appended
    (the reader spelled ``<only>`` out)."""
    from transformers import AutoTokenizer

    from torchtune_longshort.models import checkpoint_tokenizer

    config = ([("<mark>", config_mark)] if config_mark else []) + [
        ("<only>", dict(rstrip=True, single_word=True, normalized=False)), ("<eot>", dict(lstrip=True, special=True))]
    folder = _bpe_folder(tmp_path / "bpe", [("<mark>", mark)], config)
    ref = AutoTokenizer.from_pretrained(str(folder))
    for parse in (True, False):
        ours = checkpoint_tokenizer(str(folder), parse_special_tokens=parse)
        assert ours.format == "hf_json"
        for text in FLAG_TEXTS:
            want = ref(text, add_special_tokens=False, split_special_tokens=not parse).input_ids
            assert ours.encode(text, add_bos=False, add_eos=False) == want, (parse, text)


def test_a_folder_without_eos_or_with_a_misspelled_bos_is_refused_naming_its_file_and_the_fix(tmp_path):
    """No EOS anywhere (no ``eos_token``, no ``eos_token_id``) said what was missing and no way on; a ``bos_token``
    not in ``tokenizer.json`` named ``tokenizer_config.json`` when ``special_tokens_map.json`` held it."""
    from torchtune_longshort.models import checkpoint_tokenizer
    from torchtune_longshort.models.tokenizer_files import TokenizerError

    folder = _bpe_folder(tmp_path / "bpe", [], [])
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["eos_token"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(TokenizerError, match=r"no eos_token .* add .*\"eos_token\".*\"eos_token_id\": N"):
        checkpoint_tokenizer(str(folder))
    del config["bos_token"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<|startoftext|>",
                                                                "eos_token": "<|endoftext|>"}))
    # transformers reads special_tokens_map.json only where tokenizer_config.json has no added_tokens_decoder
    with pytest.raises(TokenizerError, match=r"no eos_token .*; special_tokens_map.json's eos_token is not read where "
                                             r"tokenizer_config.json has added_tokens_decoder"):
        checkpoint_tokenizer(str(folder))
    del config["added_tokens_decoder"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(TokenizerError, match=r"special_tokens_map.json: bos_token '<\|startoftext\|>' is not in .*"
                                             r"tokenizer.json; set it to a token of that file \(or null"):
        checkpoint_tokenizer(str(folder))


@pytest.mark.parametrize("pipeline", ["sentencepiece", "never", "always"])
def test_sentencepiece_folders_cut_normalized_and_config_flagged_added_tokens_as_autotokenizer(
    sp_tokenizer_dir, tmp_path, pipeline
):
    """A SentencePiece folder's added tokens (read from its ``tokenizer.json`` and ``tokenizer_config.json``): a
    ``normalized`` token is matched, as ``tokenizers`` does, after the others, in the normalized text (the
    ``sentencepiece`` pipeline prepends ``▁`` to each piece: ``x<mark>y`` holds no ``▁<mark>``, ``x <mark> y`` does;
    190 of 544 flag-set encodings differed), where ``lstrip`` / ``rstrip`` see no space (``never``: spaces are ``▁``;
    76 of 544 differed); and the config's flags replace the file's (9 of 12 differed, every pipeline)."""
    from transformers import AutoTokenizer

    from torchtune_longshort.models import checkpoint_tokenizer
    from torchtune_longshort.models.added_tokens import sentencepiece_prefix_scheme

    config = {"tokenizer_class": "LlamaTokenizer", "legacy": True} if pipeline == "always" else {}
    folder = _hub_style(sp_tokenizer_dir, tmp_path / pipeline, config)
    spec = json.loads((folder / "tokenizer.json").read_text())
    if pipeline == "never":  # Gemma's: spaces to "▁", none prepended
        spec["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    flags = {"<mark>": dict(lstrip=True, rstrip=True, normalized=True), "<eot>": dict(single_word=True),
             "<only>": dict(lstrip=True, rstrip=True, normalized=False)}
    spec["added_tokens"] += [dict(id=512 + i, content=c, **{**{k: False for k in FLAGS}, **flags[c]})
                             for i, c in enumerate(["<mark>", "<eot>", "<only>"])]
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["added_tokens_decoder"] = {str(t["id"]): {k: t[k] for k in ("content", *FLAGS)} for t in spec["added_tokens"]}
    cfg["added_tokens_decoder"]["514"].update(lstrip=False, rstrip=False)  # the config's flags win
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert sentencepiece_prefix_scheme(folder) == pipeline
    ref = AutoTokenizer.from_pretrained(str(folder))
    ours = checkpoint_tokenizer(str(folder), parse_special_tokens=True)
    assert ours.format == "sentencepiece"
    for text in FLAG_TEXTS + ["x  <only>  y", "<eot>x <eot> y"]:
        assert ours.encode(text, add_bos=False, add_eos=False) == ref(text, add_special_tokens=False).input_ids, text


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


def test_a_tokenizer_of_its_own_code_is_not_asked_about_nor_run(tmp_path, monkeypatch):
    """A folder whose tokenizer_config.json names its own class (``auto_map``): transformers' AutoTokenizer, asked
    for the chat template's tokens, put ``Do you wish to run the custom code? [y/N]`` to the console and waited 15 s
    (a "y" ran the folder's code). The files' own named tokens are read instead, without a question."""
    from family_checkpoints import own_code_tokenizer

    from torchtune_longshort.models.chat_messages import chat_template_tokens

    own_code_tokenizer(tmp_path)
    asked = []
    monkeypatch.setattr("builtins.input", lambda *a: asked.append(a) or "n")
    named = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    assert chat_template_tokens(tmp_path, "<s>", "</s>") == named
    assert not asked, asked


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


def test_a_sentencepiece_model_without_bos_is_described_as_adding_none(tmp_path):
    """A SentencePiece model trained with no BOS (``bos_id=-1``) prepends nothing (sentencepiece's own encode is the
    reference); the tokenizer's log line said "adds BOS by default: True" (``add_bos_token``'s default)."""
    import sentencepiece as spm

    from torchtune_longshort.models.tokenizer_formats import load_tokenizer

    lines = [f"line {i}: the quick brown fox jumps over the lazy dog {i * 7}" for i in range(200)]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(tmp_path / "sp"), vocab_size=300,
                                   model_type="bpe", byte_fallback=True, unk_id=0, bos_id=-1, eos_id=1, pad_id=-1,
                                   minloglevel=2)
    (tmp_path / "sp.model").rename(tmp_path / "tokenizer.model")
    tok = load_tokenizer(tmp_path / "tokenizer.model")
    ref = spm.SentencePieceProcessor(model_file=str(tmp_path / "tokenizer.model"))
    assert tok.bos_id is None and tok.encode("the lazy dog", add_bos=True, add_eos=False) == ref.encode("the lazy dog")
    assert "adds BOS by default: False" in tok.describe()


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
