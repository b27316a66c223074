"""resume=True where the newest step_<k> lost its tokenizer files (tokenizer.model and tokenizer.json deleted): the
refusal named what was missing but no fix; it now names the files and the folder that holds them (another step of
the run, else the run's tokenizer source), and doing what it says lets the resume through."""

from __future__ import annotations

import re
import shutil

import pytest
import torch


def _follow(message: str) -> None:
    """Copy what the refusal says to copy, where it says (the test's reading of the line, not the code's)."""
    m = re.search(r"copy ([\w., ]+) from '([^']+)' \([^)]*\) into '([^']+)'(?: \(and into ([\w, ]+), which)?", message)
    assert m, message
    files, source, dest, more = m.group(1).split(", "), m.group(2), m.group(3), m.group(4)
    for folder in [dest] + [f"{dest.rsplit('/', 1)[0]}/{s}" for s in (more.split(", ") if more else [])]:
        for f in files:
            shutil.copyfile(f"{source}/{f}", f"{folder}/{f}")


def test_a_step_that_lost_its_tokenizer_is_refused_with_where_to_copy_it_from(tmp_path, sp_tokenizer_dir):
    from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
    from torchtune_longshort.models.hf_model import decoder_config, hf_decoder
    from torchtune_longshort.training.checkpointing import recipe_state_path
    from torchtune_longshort.training.output_dir import check_output_dir

    out = tmp_path / "run"
    node = dict(family="llama", vocab_size=512, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=32,
                max_seq_len=128)
    for k in (2, 4):
        write_hf_checkpoint(out / f"step_{k}", hf_decoder(**node).state_dict(), decoder_config(node),
                            tokenizer=sp_tokenizer_dir)
    (out / ".longshort_output").write_text("")
    recipe_state_path(out / "step_4").parent.mkdir()
    torch.save({"config": {"tokenizer": {"path": str(sp_tokenizer_dir)}}}, recipe_state_path(out / "step_4"))
    check_output_dir(out, resume=True, overwrite=False)  # whole: resumable
    for k in (2, 4):
        snapshot = out.parent / f"step_{k}.orig"
        shutil.copytree(out / f"step_{k}", snapshot)
    for f in ("tokenizer.model", "tokenizer.json"):
        (out / "step_4" / f).unlink()
    with pytest.raises(FileNotFoundError) as e:
        check_output_dir(out, resume=True, overwrite=False)
    said = str(e.value)
    assert f"to resume, copy tokenizer.model, tokenizer.json from '{out / 'step_2'}' (step_2 of this run)" in said, said
    _follow(said)
    check_output_dir(out, resume=True, overwrite=False)
    for f in ("tokenizer.model", "tokenizer.json"):  # the same bytes the step was written with
        assert (out / "step_4" / f).read_bytes() == (out.parent / "step_4.orig" / f).read_bytes()
    for k in (2, 4):  # neither step holds them: the run's tokenizer.path does
        for f in ("tokenizer.model", "tokenizer.json"):
            (out / f"step_{k}" / f).unlink()
    with pytest.raises(FileNotFoundError) as e:
        check_output_dir(out, resume=True, overwrite=False)
    said = str(e.value)
    assert f"from '{sp_tokenizer_dir}' (the run's tokenizer source)" in said and "(and into step_2, which" in said
    _follow(said)
    check_output_dir(out, resume=True, overwrite=False)
    orig = out.parent / "step_2.orig" / "tokenizer.model"
    assert (out / "step_2" / "tokenizer.model").read_bytes() == orig.read_bytes()



def test_a_sentencepiece_file_under_its_own_name_is_named_and_steps_in_step_order(tmp_path, sp_tokenizer_dir):
    """tokenizer.path a SentencePiece file under another name (spm.model, which copy_tokenizer writes into each step
    as tokenizer.model): the refusal said "no other step of this run holds its tokenizer files (nor does the run's
    tokenizer source '.../spm.model')", which does; it now names the file and the name it takes, and the steps that
    lack it too in step order (step_2 before step_10, as the numbers sort, not the names). Done as said, the resume
    passes."""
    from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
    from torchtune_longshort.models.hf_model import decoder_config, hf_decoder
    from torchtune_longshort.training.checkpointing import recipe_state_path
    from torchtune_longshort.training.output_dir import check_output_dir

    src, out = tmp_path / "src", tmp_path / "run"
    src.mkdir()
    shutil.copyfile(sp_tokenizer_dir / "tokenizer.model", src / "spm.model")
    node = dict(family="llama", vocab_size=512, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=32,
                max_seq_len=128)
    for k in (2, 10, 12):
        write_hf_checkpoint(out / f"step_{k}", hf_decoder(**node).state_dict(), decoder_config(node),
                            tokenizer=src / "spm.model")
    (out / ".longshort_output").write_text("")
    recipe_state_path(out / "step_12").parent.mkdir()
    torch.save({"config": {"tokenizer": {"path": str(src / "spm.model")}}}, recipe_state_path(out / "step_12"))
    check_output_dir(out, resume=True, overwrite=False)
    for k in (2, 10, 12):
        for f in ("tokenizer.model", "tokenizer.json"):
            (out / f"step_{k}" / f).unlink()
    with pytest.raises(FileNotFoundError) as e:
        check_output_dir(out, resume=True, overwrite=False)
    said = str(e.value)
    assert (f"; to resume, copy spm.model (as tokenizer.model) from '{src}' (the run's tokenizer source) into "
            f"'{out / 'step_12'}' (and into step_2, step_10, which lack them too)") in said, said
    for k in (2, 10, 12):
        shutil.copyfile(src / "spm.model", out / f"step_{k}" / "tokenizer.model")
    check_output_dir(out, resume=True, overwrite=False)
