"""The refusals of a checkpoint's or tokenizer's unreadable file name the file and the fix (before, several named only
what was wrong: 'config.json: not valid JSON (...)', 'not a Hugging Face tokenizer.json (...)', 'DeepSeek form) is
not supported'). Each message is matched whole, on one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from torchtune_longshort.models.hf_checkpoint import load_rope_parameters, read_hf_config
from torchtune_longshort.models.hf_json_tokenizer import HFJsonTokenizer
from torchtune_longshort.models.hf_rope import ROPE_SIDE_FILE
from torchtune_longshort.models.tokenizer_files import read_json
from torchtune_longshort.models.tokenizer_formats import find_tokenizer
from torchtune_longshort.rope.yarn import YaRNRoPE


def _written(tmp_path: Path, name: str, data: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)
    return path


CASES = {
    "config.json": (lambda t: read_hf_config(_written(t, "config.json", '{"model_type": "lla').parent),
                    r".*/config\.json: not valid JSON \(.+\): copy or convert the checkpoint again"),
    "rope side file": (lambda t: load_rope_parameters(_written(t, ROPE_SIDE_FILE, "not safetensors").parents[1]),
                       r"cannot read RoPE side file .*/rope_params\.safetensors: \w+: .+ \(a file cut short or not "
                       r"safetensors: copy the checkpoint again\)"),
    "tokenizer_config.json": (lambda t: read_json(_written(t, "tokenizer_config.json", '{"bos_token": "<s')),
                              r".*/tokenizer_config\.json: not valid JSON \(.+\): copy it from the checkpoint "
                              r"again"),
    "tokenizer.json": (lambda t: HFJsonTokenizer(_written(t, "tokenizer.json", '{"model": {"type": "BP')),
                       r".*/tokenizer\.json: not a Hugging Face tokenizer\.json \(\w+: .+\): copy it from the "
                       r"checkpoint again"),
    "tokenizer of no format": (lambda t: find_tokenizer(_written(t, "notes.txt", "hello\n")),
                               r"tokenizer '.*/notes\.txt' is neither a SentencePiece model, a tiktoken BPE file nor "
                               r"a tokenizer\.json: name a tokenizer file of one of these formats, or the folder "
                               r"holding it"),
    "yarn mscale": (lambda t: YaRNRoPE.from_hf({"rope_type": "yarn", "factor": 2.0, "mscale": 0.707,
                                                 "mscale_all_dim": 0.707}, 10000.0, 2048),
                    r"yarn rope_scaling with mscale/mscale_all_dim \(DeepSeek form\) is not supported here: "
                    r"evaluate such a model with lm-eval's --model hf"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_unreadable_model_file_names_the_fix(tmp_path, case):
    call, pattern = CASES[case]
    with pytest.raises(ValueError) as info:
        call(tmp_path)
    assert re.fullmatch(pattern, str(info.value)), str(info.value)
