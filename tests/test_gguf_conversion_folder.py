"""What a GGUF conversion does with its folder (pypi_model and the --gguf command): it replaces only what an earlier
conversion wrote, leaves no folder it made when it fails, replaces the folder a symbolic link names, keeps an
existing folder's mode; a Hugging Face checkpoint given as GGUF needs no conversion, and a family the recipe does not
build converts with a note. Split from test_gguf_lock.py (the lock and killed fetches)."""

import json

import pytest
from test_gguf_lock import _fake_conversion, _tiny_gguf

from torchtune_longshort.models.gguf import DONE_MARK


def test_a_conversion_replaces_only_what_an_earlier_conversion_wrote(tmp_path, monkeypatch, sp_tokenizer_dir):
    """`--gguf F --out DIR` again into DIR: the earlier conversion's files are replaced; a file a user added there is
    refused by name and kept. The conversion's own temporary folder is never a folder of the user's (it was
    `DIR.partial`, deleted first). transformers' GGUF loading is replaced by a real tiny Llama and a real tokenizer,
    written with transformers' own save_pretrained: what is under test is the folder handling."""
    import pytest

    from torchtune_longshort.models.gguf import convert_gguf, main

    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    gguf = _tiny_gguf(tmp_path / "m.gguf")  # a file the gguf package reads (the conversion checks that first)
    out, partial = tmp_path / "conv", tmp_path / "conv.partial"
    partial.mkdir()
    (partial / "thesis.txt").write_text("keep")  # a user's folder of the old temporary folder's name
    convert_gguf(gguf, out)
    written = sorted(p.name for p in out.iterdir())
    assert "config.json" in written and DONE_MARK in written
    assert json.loads((out / DONE_MARK).read_text())["files"] == sorted(set(written) - {DONE_MARK})
    assert (partial / "thesis.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv", "conv.partial", "m.gguf"]  # no temporary left
    (out / "NOTES.md").write_text("mine")
    with pytest.raises(SystemExit):
        main(["--gguf", str(gguf), "--out", str(out)])
    assert (out / "NOTES.md").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == sorted(
        written + ["NOTES.md"])
    (out / "NOTES.md").unlink()
    (out / "config.json").write_text("{}")  # an earlier conversion's file: replaced
    # a mark edited to name files outside the folder: nothing out there is deleted (both were, through the mark);
    # a name that is no string (7) counts as none, not a TypeError
    mark = json.loads((out / DONE_MARK).read_text())
    away = tmp_path / "away.txt"
    away.write_text("keep")
    (out / DONE_MARK).write_text(json.dumps({**mark, "files": mark["files"] + ["../conv.partial/thesis.txt",
                                                                                str(away), 7]}))
    assert main(["--gguf", str(gguf), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == written and json.loads((out / "config.json").read_text())
    assert (partial / "thesis.txt").read_text() == "keep" and away.read_text() == "keep"
    away.unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv", "conv.partial", "m.gguf"]


def test_a_conversion_that_fails_leaves_no_folder_it_made(tmp_path, monkeypatch, sp_tokenizer_dir):
    """A conversion to a new ``--out new/deep/conv`` that fails (a full disk) removed its temporary folder but left
    the parents it made for it (``new/deep``, empty)."""
    import pytest

    from torchtune_longshort.models.gguf import main

    model = _fake_conversion(monkeypatch, sp_tokenizer_dir)
    gguf = _tiny_gguf(tmp_path / "m.gguf")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model, "save_pretrained", disk_full)
    with pytest.raises(SystemExit, match="2"):
        main(["--gguf", str(gguf), "--out", str(tmp_path / "new" / "deep" / "conv")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]


def test_a_conversion_through_a_symbolic_link_replaces_the_folder_it_names(tmp_path, monkeypatch, sp_tokenizer_dir):
    """`--out LINK`, a link to an earlier conversion's folder: its files were deleted through the link, then the
    link could not be removed ("[Errno 20] Not a directory", exit 2), and no conversion was left. The folder the link
    names is replaced; the link stays."""
    from torchtune_longshort.models.gguf import main

    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    gguf = _tiny_gguf(tmp_path / "m.gguf")
    conv, link = tmp_path / "conv", tmp_path / "link"
    assert main(["--gguf", str(gguf), "--out", str(conv)]) == 0
    written = sorted(p.name for p in conv.iterdir())
    link.symlink_to(conv)
    assert main(["--gguf", str(gguf), "--out", str(link)]) == 0
    assert link.is_symlink() and sorted(p.name for p in conv.iterdir()) == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv", "link", "m.gguf"]


def test_a_conversion_into_an_existing_folder_keeps_its_mode(tmp_path, monkeypatch, sp_tokenizer_dir):
    """Before: a user's empty `--out` of mode 0750 (and an earlier conversion's folder alike) was removed and the
    conversion's own folder, of the umask's 0755, took its place: the user's choice of who reads it was lost."""
    import os
    import stat

    from torchtune_longshort.models.gguf import convert_gguf

    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    gguf = _tiny_gguf(tmp_path / "m.gguf")
    out = tmp_path / "conv"
    out.mkdir()
    os.chmod(out, 0o750)
    convert_gguf(gguf, out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o750 and (out / DONE_MARK).is_file()
    os.chmod(out, 0o2770)
    convert_gguf(gguf, out)  # over the earlier conversion
    assert stat.S_IMODE(out.stat().st_mode) == 0o2770


def test_a_hugging_face_checkpoint_given_as_gguf_is_said_to_need_no_conversion(tmp_path, capsys):
    # `--gguf ckpt/` said only "is not a file", and `--gguf ckpt/model.safetensors` "is not a readable GGUF file
    # (ValueError: GGUF magic invalid): it is truncated or corrupt; fetch it again": a folder every command reads as
    # it is, and a file no fetch would make a GGUF
    import torch
    from safetensors.torch import save_file

    from torchtune_longshort.models.gguf import main

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"lm_head.weight": torch.zeros(2, 2)}, str(ckpt / "model.safetensors"))
    ggufs = tmp_path / "ggufs"
    ggufs.mkdir()
    (ggufs / "m.Q4_1.gguf").write_bytes(b"GGUF")
    hint = f"'{ckpt}' is a Hugging Face checkpoint folder (config.json), which needs no conversion: pass it as "
    for given, needle in [(ckpt, f"--gguf '{ckpt}' is not a file: {hint}"),
                          (ckpt / "model.safetensors", f"is not a GGUF file (it does not start with the bytes GGUF): "
                                                       f"{hint}"),
                          (ggufs, "is not a file: name a GGUF file in it (m.Q4_1.gguf)")]:
        with pytest.raises(SystemExit) as exit_info:
            main(["--gguf", str(given), "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and needle in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "ggufs"]


def test_a_gguf_of_a_family_the_recipe_does_not_build_converts_with_a_note(tmp_path, monkeypatch, sp_tokenizer_dir,
                                                                           capsys):
    # a Gemma-2 GGUF (transformers reads gemma2, qwen3, ... GGUFs) converted without a word, and the folder was then
    # refused by tune run and --model longshort alone, after the dequantization
    import transformers

    from torchtune_longshort.models.gguf import main

    cfg = transformers.Gemma2Config(vocab_size=320, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                    num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    loaded = dict(missing_keys=[], unexpected_keys=[], mismatched_keys=[], error_msgs=[])
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: (transformers.Gemma2ForCausalLM(cfg), loaded))
    tok = transformers.AutoTokenizer.from_pretrained(str(sp_tokenizer_dir))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tok)
    gguf = _tiny_gguf(tmp_path / "g.gguf")
    assert main(["--gguf", str(gguf), "--out", str(tmp_path / "conv")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "note:" in line]  # transformers' bars aside
    assert len(notes) == 1 and notes[0].startswith(
        f"note: --gguf '{gguf}': model_type='gemma2' (tie_word_embeddings=True) is not a supported model family "
        "(torchtune 0.6.1 soft-caps"), notes
    assert notes[0].endswith("-- the converted folder serves longshort-eval --model hf, not the recipe or --model "
                             "longshort")
    assert (tmp_path / "conv" / "config.json").is_file()
    # a family the recipe builds: no note
    _fake_conversion(monkeypatch, sp_tokenizer_dir)
    assert main(["--gguf", str(gguf), "--out", str(tmp_path / "conv2")]) == 0
    assert "note:" not in capsys.readouterr().err
