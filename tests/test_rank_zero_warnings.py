"""Model and data warnings said once per process: under ``tune run --nproc_per_node 2`` (and ``torchrun ...
longshort-eval``) every process builds the model, loads the tokenizer and reads the sources, and each printed the
same line (two processes: each line twice on the console). They are said on rank 0 alone (launcher.launched_rank),
as the recipe's own lines and chat_messages' are. The reference for each: the line one process says."""

import json
import logging

import pytest
from torchtune.models.llama2 import llama2  # imported once, at collection

# RANK as a launcher sets it for each of two processes; the reference is no launcher at all
ONE_PROCESS, RANK_0, RANK_1 = {}, {"WORLD_SIZE": "2", "RANK": "0"}, {"WORLD_SIZE": "2", "RANK": "1"}


def _unscaled(tmp_path, monkeypatch):
    from torchtune_longshort.models import rope_scaling

    monkeypatch.setattr(rope_scaling, "_SAID_UNSCALED", set())  # said once a process: each call a fresh process
    rope_scaling.check_scaling_target("linear", 512, 512, False, "model.max_seq_len")


def _tiny_llama():
    return llama2(vocab_size=64, num_layers=1, num_heads=2, num_kv_heads=1, embed_dim=16, max_seq_len=64)


def _replaced(tmp_path, monkeypatch):
    from torchtune_longshort.models.rope_scaling import apply_rope_scaling

    model = _tiny_llama()
    apply_rope_scaling(model, "linear", 256)
    apply_rope_scaling(model, "yarn", 128)  # fewer positions than it covered
    apply_rope_scaling(model, "linear", 512)  # another method: its parameters dropped


def _kept_settings(tmp_path, monkeypatch):
    from torchtune_longshort.models.rope_scaling import apply_rope_scaling, kept_learned_settings

    model = _tiny_llama()
    apply_rope_scaling(model, "clex", 128)
    kept_learned_settings(model, "clex", {"act": "tanh"})


def _sliding_window(tmp_path, monkeypatch):
    from torchtune_longshort.models.families import family_of

    config = {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "hidden_size": 16,
              "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1, "intermediate_size": 32,
              "vocab_size": 32, "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
              "sliding_window": 16}
    family_of(config).decoder(config, 64)


def _transformers_pipeline(tmp_path, monkeypatch):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from torchtune_longshort.models import transformers_pipeline

    monkeypatch.setattr(transformers_pipeline, "_SAID", set())
    tok = Tokenizer(models.WordLevel({"<unk>": 0, "<|endoftext|>": 1, "a": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # not Qwen2Tokenizer's split regex
    tok.save(str(tmp_path / "tokenizer.json"))
    config = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 3}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    transformers_pipeline.as_transformers_builds_it(tok, tmp_path / "tokenizer.json", config)


def _corpus(tmp_path):
    (tmp_path / "c").mkdir(exist_ok=True)
    (tmp_path / "c" / "a.jsonl").write_text('not json\n' + json.dumps({"text": "abcd " * 200}) + "\n")
    (tmp_path / "c" / "notes.dat").write_text("a file local_text does not read")
    return str(tmp_path / "c")


def _local_text(tmp_path, monkeypatch):
    from torchtune_longshort.data.corpus import local_text

    return local_text(_corpus(tmp_path), skip_bad_records=True)


def _validation_set(tmp_path, monkeypatch):
    from torchtune_longshort.data.fixed_length import fixed_length_sequences

    documents = _local_text(tmp_path, monkeypatch)
    fixed_length_sequences(documents, lambda text: [ord(c) for c in text], 16, 2, where="validation.dataset")


def _validation_shares_files(tmp_path, monkeypatch):
    from pathlib import Path

    from omegaconf import OmegaConf

    from torchtune_longshort.training.recipe_config import load_recipe_config

    # the config check (longshort-validate and every process of tune run) says it: validation reads training files
    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "configs/tiny/longshort_stdlib.yaml")
    load_recipe_config(OmegaConf.merge(cfg, {"dataset": {"split": None}, "output_dir": str(tmp_path / "out")}))


# each case: how it is said, and a piece of each of its lines
SAYINGS = {"rope unscaled": (_unscaled, ["leaves the RoPE unscaled"]),
           "rope replaced": (_replaced, ["fewer than it covered", "not composed with it"]),
           "rope kept settings": (_kept_settings, ["keeps the settings its learned clex parameters"]),
           "sliding window": (_sliding_window, ["sliding_window=16 is not applied"]),
           "transformers pipeline": (_transformers_pipeline, ["AutoTokenizer reads a 'qwen2' folder"]),
           "local_text": (_local_text, ["not read, its suffix", "skipped 1 unreadable record (dataset.skip_bad"]),
           "validation set": (_validation_set, ["validation.dataset: skipped 1 unreadable record,"]),
           "validation shares training files": (_validation_shares_files, ["validation.dataset reads 2 of its 4"])}


@pytest.mark.parametrize("case", SAYINGS)
def test_a_model_or_data_warning_is_said_on_rank_0_alone(case, tmp_path, monkeypatch, caplog):
    def said(env):
        for name in ("WORLD_SIZE", "RANK"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="torchtune_longshort"):
            SAYINGS[case][0](tmp_path, monkeypatch)
        return [r.getMessage() for r in caplog.records if r.name.startswith("torchtune_longshort")]

    alone = said(ONE_PROCESS)
    assert all(any(piece in line for line in alone) for piece in SAYINGS[case][1]), alone
    assert said(RANK_0) == alone and said(RANK_1) == [], case
