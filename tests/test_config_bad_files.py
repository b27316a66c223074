"""The config check refuses what the files a config names cannot give (longshort-validate and the recipe's
constructor alike), before anything is written: a tokenizer that does not fit the model or that its component cannot
read, a text file that does not decode, a path that comes from an unset checkpoint_dir, a start folder with its own
RoPE scaling. Split from test_config_bad_values.py (the bad values one by one)."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from recipe_config import make_cfg
from test_config_bad_values import ROPE_NODE


@pytest.fixture(scope="module")
def recipe_cls():
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe


def test_validate_refuses_the_tokenizer_setup_refuses(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, capsys):
    """A tokenizer with more ids than the model's embedding table, a tokenizer.json given to torchtune's SentencePiece
    component, and a tokenizer the run would train past the model's vocabulary: longshort-validate said OK and
    ``tune run`` refused each after its setup lines (the last after training the tokenizer). Now the config check
    (longshort-validate's and the recipe constructor's) refuses each in one line naming the key, nothing written."""
    from omegaconf import OmegaConf

    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint
    from torchtune_longshort.training.recipe_config.validate import main as validate_main

    v300 = write_random_llama2_checkpoint(tmp_path / "v300", vocab_size=300, embed_dim=64, num_layers=1,
                                          num_heads=4, num_kv_heads=2, intermediate_dim=172, max_seq_len=256)
    capsys.readouterr()  # the writer's progress bar
    stdlib_tok = {"_component_": "torchtune_longshort.training.bootstrap.stdlib_sentencepiece_tokenizer",
                  "path": str(tmp_path / "tok"), "vocab_size": 1024}
    cases = [
        (v300, {}, r"^tokenizer vocabulary \(512 ids, tokenizer.path=.*tokenizer.model\) does not fit the model's "
         r"embedding table \(300 rows: vocab_size 300 in the config.json of checkpointer.checkpoint_dir=.*v300'\).*"
         r"set tokenizer.path to the model's own tokenizer"),
        (tiny_llama2_dir, {"tokenizer.path": str(sp_tokenizer_dir / "tokenizer.json")},
         r"^tokenizer.path='.*tokenizer.json': torchtune.models.llama2.llama2_tokenizer cannot read it .*is read by "
         r"tokenizer._component_: torchtune_longshort.models.checkpoint_tokenizer$"),
        # a SentencePiece file given to torchtune's tiktoken reader: tiktoken's "Error parsing line b'\x0e' in ..."
        # went out as it was, no key named
        (tiny_llama2_dir, {"tokenizer": {"_component_": "torchtune.models.llama3.llama3_tokenizer",
                                         "path": str(sp_tokenizer_dir / "tokenizer.model")}},
         r"^tokenizer.path='.*tokenizer.model': torchtune.models.llama3.llama3_tokenizer cannot read it \(ValueError: "
         r"Error parsing line .*\); name a tokenizer file of the format that component reads; this file is a "
         r"sentencepiece tokenizer, read by tokenizer._component_: torchtune_longshort.models.checkpoint_tokenizer "
         r"\(any format\)$"),
        (tiny_llama2_dir, {"tokenizer": stdlib_tok},
         r"^tokenizer vocabulary \(1024 ids: tokenizer.vocab_size=1024, trained at tokenizer.path=.*tok\) does not "
         r"fit .*\(512 rows: .*set tokenizer.vocab_size to at most 512"),
    ]
    for ckpt, over, match in cases:
        path = tmp_path / "run.yaml"
        OmegaConf.save(make_cfg(ckpt, sp_tokenizer_dir, tmp_path / "out", **over), path)
        with pytest.raises(SystemExit) as exit_info:
            validate_main([str(path)])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1, err
        assert __import__("re").search(match, err.split("longshort-validate: error: ", 1)[1].strip()), err
        assert not (tmp_path / "out").exists() and not (tmp_path / "tok").exists()
    OmegaConf.save(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out"), path)
    assert validate_main([str(path)]) == 0


def test_a_local_text_file_that_does_not_decode_in_its_first_bytes_is_refused_by_the_config_check(
        recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """corpus.local_text over a file with a byte that is not UTF-8 near its start: longshort-validate said OK and
    ``tune run`` refused it after its setup lines. The config check decodes each file's first HEAD_BYTES (a file named
    by mistake fails there) and refuses in the reader's words, naming dataset.path; a bad byte past the head is left
    to the run's one pass, and skip_bad_records=True (the run skips the record) is not refused."""
    from torchtune_longshort.data.file_kinds import HEAD_BYTES
    from torchtune_longshort.training.recipe_config import load_recipe_config

    bad, late, rows = tmp_path / "bad.txt", tmp_path / "late.txt", tmp_path / "bad.jsonl"
    bad.write_bytes(b"x = 1\n" * 100 + b"\xff\n")
    late.write_bytes(b"x = 1\n" * (HEAD_BYTES // 6 + 10) + b"\xff\n")
    rows.write_bytes(b'{"text": "a"}\n' * 3 + b'{"text": "caf\xe9"}\n')
    early = tmp_path / "early.jsonl"  # a record without its text field before the byte: the run meets it first
    early.write_bytes(b'{"body": "a"}\n' + b'{"text": "caf\xe9"}\n')

    def cfg(path, **extra):
        return make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", dataset={
            "_component_": "torchtune_longshort.data.corpus.local_text", "path": str(path), **extra})

    packed = tmp_path / "books.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"text": "a"}\n', mtime=0))
    # bytes that do not decode name dataset.encoding (a Latin-1 file was told only to mend or skip), a compressed file
    # the source that reads it compressed alone (it was told to "mend the record", then to skip it: that drops it)
    encoding = r"name the files' encoding \(dataset.encoding: latin-1, cp1252, ...\)"
    skip = r", or skip such records with dataset.skip_bad_records=True"
    for path, said in ((bad, rf"bad.txt: bytes that are not utf-8 \(invalid start byte at byte 600\): mend the "
                             rf"record, {encoding}{skip}"),
                       (rows, rf"bad.jsonl:4: bytes that are not utf-8 \(invalid continuation byte at byte 13\): "
                              rf"mend the record, {encoding}{skip}"),
                       (early, r"early.jsonl:1: no text field 'text' in the record; its fields are \['body'\]. Set "
                               rf"dataset.text_field to one of them: mend the record{skip}"),
                       (packed, r"books.jsonl.gz: a gzip-compressed file, not text: decompress it first .*: read it "
                                r"with dataset._component_=torchtune_longshort.data.corpus.hf_text \(dataset.source: "
                                r"json or text, dataset.data_files: the file; datasets decompresses it\)")):
        with pytest.raises(ValueError, match=rf"^dataset.path: .*{said}$"):
            recipe_cls(cfg(path))
    assert not (tmp_path / "out").exists()
    from torchtune_longshort.data.corpus import hf_text, local_text

    assert list(hf_text("json", data_files=str(packed))()) == ["a"]  # the way named for the compressed file reads it
    with pytest.raises(ValueError, match="yields no non-empty documents"):  # skipping drops its one record
        list(local_text(str(packed), skip_bad_records=True)())
    load_recipe_config(cfg(late))
    load_recipe_config(cfg(bad, skip_bad_records=True))


def _shipped_with_a_placeholder_start():
    """The shipped recipe configs whose tokenizer.path is written as an interpolation of checkpoint_dir (a
    placeholder folder until the user passes checkpoint_dir=...)."""
    import yaml

    from torchtune_longshort.configs_cli import config_path, shipped_configs

    for name in shipped_configs():
        node = yaml.safe_load(config_path(name).read_text())
        if "${checkpoint_dir}" in str((node.get("tokenizer") or {}).get("path", "")):
            yield name


@pytest.mark.parametrize("name", list(_shipped_with_a_placeholder_start()))
def test_a_path_that_comes_from_checkpoint_dir_is_refused_naming_checkpoint_dir(name, tmp_path, capsys, monkeypatch):
    """A shipped real-model config run without checkpoint_dir=... was refused as ``tokenizer.path='/path/to/...' does
    not exist``: a key the user never wrote (the config sets it to ``${checkpoint_dir}``). The refusal names the key
    to set; a tokenizer.path given itself is refused without that clause."""
    from torchtune_longshort.training.recipe_config.validate import main as validate_main

    monkeypatch.chdir(tmp_path)
    for over, named in ([], True), ([f"checkpoint_dir={tmp_path / 'none'}"], True), (["tokenizer.path=/none"], False):
        with pytest.raises(SystemExit) as exit_info:
            validate_main([name, *over])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1, err
        # the key the user set leads (a misspelled checkpoint_dir= was refused as tokenizer.path='<the typo>')
        lead = "checkpoint_dir=" if named else "tokenizer.path="
        assert err.startswith(f"longshort-validate: error: {lead}"), err
        assert bool(re.search(r"does not exist \(tokenizer.path is '\$\{checkpoint_dir\}[^']*' in the config and "
                              r"was checked first\): set checkpoint_dir to an existing path, or tokenizer.path "
                              r"itself", err)) is named, err
    # tune run said it without the clause: the recipe checked the config after its paths were resolved
    from torchtune_longshort.configs_cli import config_path
    from torchtune_longshort.recipes.longshort_finetune import recipe_main

    monkeypatch.setattr("sys.argv", ["longshort_finetune.py", "--config", str(config_path(name))])
    with pytest.raises(SystemExit) as exit_info:
        recipe_main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("longshort_finetune: error: checkpoint_dir="), err
    assert re.search(r"tokenizer.path is '\$\{checkpoint_dir\}[^']*' in the config and was checked first\): set "
                     r"checkpoint_dir", err), err


def test_a_start_folder_with_its_own_scaling_has_its_factor_checked(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                    sp_tokenizer_dir, caplog):
    """rope_scaled over a folder that is already scaled (a Llama-3.1 folder's llama3 scaling) starts from the
    length that scaling started from: its factor went unchecked (longshort-validate: OK), and the RoPE class refused
    it once setup had begun, naming a bare key. A target below the positions the folder covered is said."""
    import shutil

    from torchtune.models.llama2 import llama2

    from torchtune_longshort.models.rope_scaling import apply_rope_scaling

    scaled = tmp_path / "scaled"
    shutil.copytree(tiny_llama2_dir, scaled)
    config = json.loads((scaled / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 64}
    (scaled / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 256}))
    node = {**ROPE_NODE, "method": "yarn", "max_seq_len": 32,
            "model": {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "${checkpoint_dir}"}}
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"^model.max_seq_len=32 is shorter than the 64 positions the scaling starts "
                                         r"from: the default factor 32/64 = 0.5 is < 1"):
        recipe_cls(make_cfg(scaled, sp_tokenizer_dir, out, model=node, seq_len=16))
    # with a factor given, the model written said max_position_embeddings 32, half the start's (the refusal's
    # "or factor >= 1" advice led there)
    with pytest.raises(ValueError, match=r"^model.max_seq_len=32 is shorter than the 64 positions the scaling starts "
                                         r"from: the scaled model would cover fewer positions than it starts from; "
                                         r"give model.max_seq_len >= 64"):
        recipe_cls(make_cfg(scaled, sp_tokenizer_dir, out, model={**node, "factor": 2.0}, seq_len=16))
    assert not out.exists()
    model = llama2(vocab_size=64, num_layers=1, num_heads=2, num_kv_heads=1, embed_dim=16, max_seq_len=64)
    apply_rope_scaling(model, "linear", 256)
    with caplog.at_level("WARNING"):
        apply_rope_scaling(model, "yarn", 128)
    assert "the model's own linear scaling (256 positions) is replaced by yarn at 128 positions, fewer" in caplog.text
    assert model.rope_scaling["original_max_seq_len"] == 64
    # to more positions, another method: the first one's parameters are dropped (a Phi-3.5 folder's LongRoPE factor
    # lists went for YaRN without a word)
    caplog.clear()
    with caplog.at_level("WARNING"):
        apply_rope_scaling(model, "linear", 512)
    assert "the model's own yarn scaling is replaced by linear (from 64 positions), not composed with it: its " \
           "parameters (" in caplog.text
