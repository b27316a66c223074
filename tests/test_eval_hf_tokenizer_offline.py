"""``longshort-eval run --model hf --model_args pretrained=DIR,tokenizer=NAME`` offline, NAME no file or folder and
not in the Hugging Face cache: transformers raised an ``OSError`` traceback once the model had loaded ("We couldn't
connect to 'https://huggingface.co' ..."); now refused before lm-eval starts, one line naming the key."""

from __future__ import annotations

import pytest

pytest.importorskip("huggingface_hub")

NAME = "longshort-no-such-org/no-such-tokenizer"


def test_hf_tokenizer_that_no_load_finds_is_refused_naming_the_key(tmp_path, monkeypatch):
    from huggingface_hub import constants, try_to_load_from_cache

    from torchtune_longshort.eval.other_model_args import check_other_model_args

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert constants.is_offline_mode()  # the reference: huggingface_hub says it is offline and holds none of it
    assert not any(isinstance(try_to_load_from_cache(NAME, f), str) for f in ("tokenizer_config.json", "config.json"))
    with pytest.raises(FileNotFoundError) as e:
        check_other_model_args({"pretrained": str(tmp_path), "tokenizer": NAME}, "hf")
    assert str(e.value).startswith(f"--model_args tokenizer {NAME!r}: neither a tokenizer file or folder"), e.value
    assert "(HF_HUB_OFFLINE=1)" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(FileNotFoundError, match="'./absent': no tokenizer file or folder in"):
        check_other_model_args({"pretrained": str(tmp_path), "tokenizer": "./absent"}, "hf")
    (tmp_path / "tok").mkdir()  # a folder that is there: transformers' to read, as before
    check_other_model_args({"pretrained": str(tmp_path), "tokenizer": "tok"}, "hf")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # online: the hub is asked, as before
    check_other_model_args({"pretrained": str(tmp_path), "tokenizer": NAME}, "hf")
