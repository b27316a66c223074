"""``longshort-eval peft-base STEP --out DIR``: a LoRA run that changed the RoPE (YaRN) left its user to build by hand
the base folder stock lm-eval's ``--model hf --model_args pretrained=DIR,peft=STEP/adapter`` needs (the start's
weights with the step's ``config.json``; the refusal of the start as it is and the recipe's ``[longshort] adapter:``
line described it). The command writes it; lm-eval's own ``HFLM`` with PEFT on it gives the merged step's logits
(transformers' ``from_pretrained`` of the merged step: the reference), and bad input is refused in one line, exit 2,
with nothing written."""

from __future__ import annotations

import json
import os

import pytest
import torch

pytest.importorskip("lm_eval")
pytest.importorskip("peft")

from lm_eval.models.huggingface import HFLM  # noqa: E402
from peft import PeftModel  # noqa: E402
from test_peft_adapter_other_step import IDS, _check, yarn_run  # noqa: E402
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from torchtune_longshort.eval.peft_base import main  # noqa: E402

PROG = "longshort-eval peft-base"


def _with_tokenizer(*folders):
    """A word-level tokenizer over the tiny model's 32 ids, saved (tokenizer.json + config) into each folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(32)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    for folder in folders:
        PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token="w1").save_pretrained(str(folder))


def _refused(capsys, root, *argv):
    """The refusal's line of ``peft-base argv``: one line, exit 2, and no file or folder under ``root`` made."""
    before = sorted(root.rglob("*"))
    capsys.readouterr()  # the fixture's own output (transformers' progress bars)
    with pytest.raises(SystemExit) as e:
        main(list(map(str, argv)), PROG)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith(f"{PROG}: error: "), err
    assert sorted(root.rglob("*")) == before
    return err


def test_the_written_base_with_peft_gives_the_merged_steps_logits_under_lm_evals_hf(tmp_path, capsys):
    base, _, step3 = yarn_run(tmp_path)
    _with_tokenizer(base, step3)
    out = tmp_path / "run_step_3_base"
    assert main([str(step3), "--out", str(out)], PROG) == 0
    printed = capsys.readouterr().out
    assert f"--model hf --model_args pretrained={out},peft={step3 / 'adapter'}" in printed
    assert json.loads((out / "config.json").read_text()) == json.loads((step3 / "config.json").read_text())
    assert os.path.samefile(out / "model.safetensors", base / "model.safetensors")  # a hard link: no copy
    assert "hard links" in printed and (out / "tokenizer.json").is_file()
    _check(out, step3 / "adapter")  # longshort-eval's own check of pretrained=,peft= accepts it

    lm = HFLM(pretrained=str(out), peft=str(step3 / "adapter"), device="cpu", batch_size=1)
    with torch.no_grad():
        on_out = lm.model(IDS).logits
        merged = LlamaForCausalLM.from_pretrained(str(step3))(IDS).logits
        start = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(str(base)), str(step3 / "adapter"))
        on_start = start(IDS).logits
    assert torch.allclose(on_out, merged, atol=1e-4)
    assert not torch.allclose(on_start, merged, atol=1e-4)  # the start as it is: another model (its RoPE)


def test_bad_input_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys):
    base, step2, step3 = yarn_run(tmp_path)
    full = tmp_path / "full"
    full.mkdir()
    (full / "note.txt").write_text("mine")
    assert f"--out {full}: exists and is not empty" in _refused(capsys, tmp_path, step3, "--out", full)
    assert f"{base}: holds no adapter/adapter_config.json" in _refused(capsys, tmp_path, base, "--out", tmp_path / "a")
    config = json.loads((step2 / "adapter" / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone")
    (step2 / "adapter" / "adapter_config.json").write_text(json.dumps(config))
    line = _refused(capsys, tmp_path, step2 / "adapter", "--out", tmp_path / "b")
    assert f"its recorded base {tmp_path / 'gone'} is no checkpoint folder here" in line and "--base" in line
    (step3 / "adapter" / "longshort_adapter.json").write_text(json.dumps({"rank": 4, "base_quantization": "nf4"}))
    assert "nf4-quantized base" in _refused(capsys, tmp_path, step3, "--out", tmp_path / "c")
    assert (full / "note.txt").read_text() == "mine"


def test_the_weights_are_symbolic_links_across_filesystems_else_copies(tmp_path, capsys, monkeypatch):
    """``os.link`` fails with EXDEV across filesystems (and EPERM where a filesystem has no hard links): the weights
    are then symbolic links to the base's files, and copies where symbolic links fail too."""
    import errno

    from torchtune_longshort.eval import peft_base

    base, _, step3 = yarn_run(tmp_path)

    def no_link(*_):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(peft_base.os, "link", no_link)
    assert main([str(step3), "--out", str(tmp_path / "linked")], PROG) == 0
    assert "as symbolic links" in capsys.readouterr().out
    assert os.path.islink(tmp_path / "linked" / "model.safetensors")
    assert os.path.samefile(tmp_path / "linked" / "model.safetensors", base / "model.safetensors")
    monkeypatch.setattr(peft_base.os, "symlink", no_link)
    assert main([str(step3), "--out", str(tmp_path / "copied")], PROG) == 0
    assert "as copies" in capsys.readouterr().out
    copied = tmp_path / "copied" / "model.safetensors"
    assert not os.path.islink(copied) and not os.path.samefile(copied, base / "model.safetensors")
    assert copied.read_bytes() == (base / "model.safetensors").read_bytes()
    _check(tmp_path / "linked", step3 / "adapter")

    monkeypatch.undo()
    (tmp_path / "empty").mkdir()  # an --out that is a link to an empty folder: written through, the link kept
    (tmp_path / "via").symlink_to(tmp_path / "empty")
    assert main([str(step3), "--out", str(tmp_path / "via")], PROG) == 0
    assert os.path.islink(tmp_path / "via") and (tmp_path / "empty" / "config.json").is_file()
