"""A tokenizer folder's named tokens (BOS / EOS / pad, a chat template's special_tokens_map) have one reader,
models.tokenizer_files.token_settings, which reads tokenizer_config.json and special_tokens_map.json as transformers
does. hf_json_tokenizer read them itself, tokenizer_config.json over special_tokens_map.json: where the two files
disagree it took tokenizer_config.json's BOS / EOS, where transformers' AutoTokenizer takes special_tokens_map.json's
(and ignores it where tokenizer_config.json has added_tokens_decoder). The reference: AutoTokenizer on the folder."""

import json

import pytest

VOCAB = {"<unk>": 0, "<s>": 1, "</s>": 2, "<bos2>": 3, "<eos2>": 4, "a": 5}
DECODER = {"added_tokens_decoder": {"1": {"content": "<s>", "special": True},
                                    "2": {"content": "</s>", "special": True}}}
CONFIG, MAP = {"bos_token": "<s>", "eos_token": "</s>"}, {"bos_token": "<bos2>", "eos_token": "<eos2>"}
FOLDERS = {  # tokenizer_config.json's named tokens (None: no such file), special_tokens_map.json's (None: no file)
    "the two disagree": (CONFIG, MAP),
    "the map's as AddedToken dicts": (CONFIG, {k: {"content": v, "special": True} for k, v in MAP.items()}),
    "no tokenizer_config.json": (None, MAP),
    "no special_tokens_map.json": (CONFIG, None),
    "the config's BOS null, the map's set": ({"bos_token": None, "eos_token": "</s>"}, MAP),
    "the map's BOS null": (CONFIG, {"bos_token": None}),
    "the config has added_tokens_decoder": ({**CONFIG, **DECODER}, MAP),
}


def _folder(path, config, special_map):
    from tokenizers import Tokenizer, models, pre_tokenizers

    path.mkdir()
    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    if config is not None:
        config = {"tokenizer_class": "PreTrainedTokenizerFast", **config}
        (path / "tokenizer_config.json").write_text(json.dumps(config))
    if special_map is not None:
        (path / "special_tokens_map.json").write_text(json.dumps(special_map))
    return path


@pytest.mark.parametrize("case", FOLDERS)
def test_bos_and_eos_are_read_as_autotokenizer_reads_them(case, tmp_path):
    from transformers import AutoTokenizer

    from torchtune_longshort.models.hf_json_tokenizer import HFJsonTokenizer
    from torchtune_longshort.models.tokenizer_files import named_tokens

    folder = _folder(tmp_path / "tok", *FOLDERS[case])
    theirs = AutoTokenizer.from_pretrained(str(folder))
    ours = HFJsonTokenizer(folder / "tokenizer.json")
    assert (ours.bos_id, ours.eos_id) == (theirs.bos_token_id, theirs.eos_token_id), case
    named = named_tokens(folder)
    assert (named.get("bos_token"), named.get("eos_token")) == (theirs.bos_token, theirs.eos_token), case
