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
