"""Nothing lost (recipe side, the output folder): overwrite_output_dir deletes only what the recipe made, keeps an
earlier run when the new setup refuses and replaces an earlier run's logs wherever they lie; an output or log folder
inside an input is refused before anything is written. In-process (the recipe class). Split from
test_reliability_recipe.py."""

from __future__ import annotations

import json

import pytest
from recipe_config import make_cfg


@pytest.fixture(scope="module")
def recipe_cls():
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe


@pytest.mark.parametrize("field", ["dataset.path", "dataset.data_files", "validation.dataset.path", "tokenizer.path"])
def test_overwrite_refuses_when_an_input_lies_inside_output_dir(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                sp_tokenizer_dir, field):
    """Every input the config names is protected, not only the start checkpoint: refused before anything, with the
    field and the path named, and nothing deleted."""
    out = tmp_path / "out"
    out.mkdir()
    (out / ".longshort_output").write_text("")  # a folder an earlier run made: overwrite may delete it...
    corpus = out / "corpus.jsonl"  # ...but it holds the user's data
    corpus.write_text("".join('{"text": "x = 1\\n"}\n' for _ in range(200)))
    tok = sp_tokenizer_dir
    over = {"overwrite_output_dir": True}
    if field == "dataset.path":
        over["dataset"] = {"_component_": "torchtune_longshort.data.corpus.local_text", "path": str(corpus)}
    elif field == "dataset.data_files":
        over["dataset"] = {"_component_": "torchtune.datasets.text_completion_dataset", "source": "json",
                           "data_files": str(corpus), "split": "train"}
    elif field == "validation.dataset.path":
        over["validation"] = {"dataset": {"_component_": "torchtune_longshort.data.corpus.local_text",
                                          "path": str(corpus)}, "seq_len": 64, "num_sequences": 1}
    else:
        tok = out / "tok"
        tok.mkdir()
        (tok / "tokenizer.model").write_bytes((sp_tokenizer_dir / "tokenizer.model").read_bytes())
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(FileExistsError, match=rf"refuses to delete output_dir=.*it holds {field}=.*(corpus|tok)"):
        recipe_cls(make_cfg(tiny_llama2_dir, tok, out, **over))
    assert sorted(p.name for p in out.rglob("*")) == before


@pytest.mark.parametrize("where", ["not_ours", "cwd", "git", "holds_start_checkpoint"])
def test_overwrite_deletes_only_what_the_recipe_made(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir,
                                                     monkeypatch, where):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    ckpt = tiny_llama2_dir
    if where == "cwd":
        (out / ".longshort_output").write_text("")
        monkeypatch.chdir(out)
    elif where == "git":
        (out / ".longshort_output").write_text("")
        (out / ".git").mkdir()
    elif where == "holds_start_checkpoint":
        (out / ".longshort_output").write_text("")
        ckpt = out / "base"
        ckpt.mkdir()
        for f in tiny_llama2_dir.iterdir():
            (ckpt / f.name).write_bytes(f.read_bytes())
    cfg = make_cfg(ckpt, sp_tokenizer_dir, out, overwrite_output_dir=True)
    with pytest.raises(FileExistsError, match="refuses to delete"):
        recipe_cls(cfg).setup()
    assert (out / "precious.txt").read_text() == "keep me"
    assert not (out / ".lock").exists()


def test_overwrite_replaces_a_folder_the_recipe_made(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".longshort_output").write_text("")
    (out / "step_7").mkdir()  # an earlier run's checkpoint: the recipe wrote it (and its list), overwrite replaces it
    (out / "step_7" / "config.json").write_text("{}\n")
    (out / "step_7" / ".longshort_files").write_text('["config.json"]\n')
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1)
    r = recipe_cls(cfg)
    r.setup()
    r.release_output_dir()
    assert not (out / "step_7").exists() and (out / ".longshort_output").is_file()
    # the metric logger's folder lists what the run's logger wrote there; a note put beside the logs is a user's:
    # overwrite refuses, naming it (it checked the folder's name only, and deleted the note with the logs)
    logs = out / "logs"
    written = sorted(p.name for p in logs.iterdir() if p.name != ".longshort_files")
    assert written and json.loads((logs / ".longshort_files").read_text()) == written
    (logs / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"refuses to delete .*it holds 'logs/notes.txt', which this recipe did "
                                              "not write"):
        recipe_cls(cfg).setup()
    assert (logs / "notes.txt").read_text() == "mine" and not (out / ".lock").exists()
    (logs / "notes.txt").unlink()
    r = recipe_cls(cfg)
    r.setup()
    r.release_output_dir()
    now = sorted(p.name for p in logs.iterdir() if p.name != ".longshort_files")
    assert now and json.loads((logs / ".longshort_files").read_text()) == now  # the new run's log alone


def _tree(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_overwrite_keeps_the_earlier_run_when_the_new_setup_refuses(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                    sp_tokenizer_dir):
    """``overwrite_output_dir=True`` deleted the earlier run when the folder was claimed, before the model was built
    and its start weights read: a model that does not build, or weights that cannot be read, then refused the new
    run with the earlier one gone. Now the earlier run goes at the new run's first write, once setup has passed."""
    out = tmp_path / "out"
    r = recipe_cls(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=1))
    r.setup()
    r.release_output_dir()
    before = _tree(out)
    broken = tmp_path / "broken"  # the start checkpoint with a truncated weight file
    broken.mkdir()
    for f in tiny_llama2_dir.iterdir():
        if f.is_file():
            data = f.read_bytes()
            (broken / f.name).write_bytes(data[: len(data) // 2] if f.suffix == ".safetensors" else data)
    scratch = {"_component_": "torchtune_longshort.models.hf_decoder", "family": "llama", "vocab_size": 512,
               "num_layers": 1, "num_heads": 4, "num_kv_heads": 3, "embed_dim": 64, "max_seq_len": 256}
    short = tmp_path / "short.txt"  # fewer tokens than one sample
    short.write_text("x = 1\n")
    for cfg, match in [(make_cfg(broken, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1),
                        "cannot read weight file"),
                       (make_cfg(None, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1, model=scratch),
                        r"num_heads=4 is not divisible by num_kv_heads=3"),  # from scratch: the config check
                       # from scratch, refused once the model is built: the earlier run was deleted when step_0 was
                       # written, before the setup's later checks (this one, the data's)
                       # (a position_sampler past the model's positions was this case: the config check refuses
                       # it now)
                       (make_cfg(None, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1,
                                 model={**scratch, "num_kv_heads": 2}, dataset={
                                     "_component_": "torchtune_longshort.data.corpus.local_text",
                                     "path": str(short)}), "fewer than one sample of seq_len")]:
        with pytest.raises(ValueError, match=match):
            recipe_cls(cfg).setup()
        assert _tree(out) == before
    r = recipe_cls(make_cfg(None, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1,
                            model={**scratch, "num_kv_heads": 2}))  # the same, mended
    r.setup()
    r.release_output_dir()
    assert [p.name for p in out.glob("step_*")] == ["step_0"] and len(list((out / "logs").glob("log_*"))) == 1


def test_a_log_dir_inside_an_input_is_refused_before_anything_is_written(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                         sp_tokenizer_dir):
    # metric_logger.log_dir naming the start checkpoint's folder (or a data folder) wrote log_<time>.txt among the
    # files the run reads (a local_text corpus would read it as training text)
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", max_steps=1,
                   **{"metric_logger.log_dir": str(tiny_llama2_dir / "logs")})
    before = sorted(p.name for p in tiny_llama2_dir.iterdir())
    mtime = tiny_llama2_dir.stat().st_mtime_ns  # the folder is not even written and cleaned (a probe that it takes
    with pytest.raises(ValueError, match=r"^metric_logger.log_dir=.* lies inside checkpoint_dir=.*, which this run "
                                         "reads"):  # new folders made and removed one there, before this refusal)
        recipe_cls(cfg)
    assert sorted(p.name for p in tiny_llama2_dir.iterdir()) == before and not (tmp_path / "out").exists()
    assert tiny_llama2_dir.stat().st_mtime_ns == mtime


def test_an_output_dir_inside_an_input_is_refused_before_anything_is_written(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                            sp_tokenizer_dir):
    # only the log folder was checked: output_dir inside the corpus folder (log_dir elsewhere) wrote the run there,
    # and the next run read its metrics.jsonl as training data ("corp/run1/metrics.jsonl:1: no text field 'text'");
    # output_dir inside the start checkpoint wrote a whole model among its files
    corpus = tmp_path / "corp"
    corpus.mkdir()
    (corpus / "a.txt").write_text("x = 1\n" * 4000)
    data = {"_component_": "torchtune_longshort.data.corpus.local_text", "path": str(corpus)}
    logs = {"metric_logger.log_dir": str(tmp_path / "logs")}
    before = sorted(p.name for p in tiny_llama2_dir.iterdir())
    for out, field in ((corpus / "run1", "dataset.path"), (tiny_llama2_dir / "out", "checkpoint_dir"),
                       (tiny_llama2_dir, "checkpoint_dir")):
        cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=1, dataset=data, **logs)
        with pytest.raises(ValueError, match=rf"^output_dir=.* (lies inside|is) {field}=.*, which this run reads"):
            recipe_cls(cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corp"] and [p.name for p in corpus.iterdir()] == ["a.txt"]
    assert sorted(p.name for p in tiny_llama2_dir.iterdir()) == before


def test_overwrite_replaces_an_earlier_runs_logs_under_another_log_dir(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                      sp_tokenizer_dir):
    """The earlier run logged to ``logs/``, the new one to ``tb/``: ``logs/`` was refused as a folder the recipe did
    not write. A top-level folder with the recipe's ``.longshort_files`` is an earlier run's log folder: replaced
    when it holds only what it lists, a note beside the logs still refused by name."""
    out = tmp_path / "out"
    r = recipe_cls(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=1))
    r.setup()
    r.release_output_dir()
    assert any((out / "logs").glob("log_*"))
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=1, overwrite_output_dir=True,
                   **{"metric_logger.log_dir": str(out / "tb")})
    (out / "logs" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"it holds 'logs/notes.txt', which this recipe did not write"):
        recipe_cls(cfg)
    (out / "logs" / "notes.txt").unlink()
    r = recipe_cls(cfg)
    r.setup()
    r.release_output_dir()
    assert not (out / "logs").exists() and any((out / "tb").glob("log_*"))


def test_overwrite_replaces_a_run_whose_logs_lie_at_the_top_of_its_folder(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                         sp_tokenizer_dir):
    """``metric_logger.log_dir`` = ``output_dir`` (torchtune's older configs): the folder's ``.longshort_files``
    lists the logger's files there, so overwrite replaces the run (it refused, naming the log it took for a user's)
    and still refuses a note a user put beside them, by name."""
    out = tmp_path / "out"
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1,
                   **{"metric_logger.log_dir": str(out)})
    r = recipe_cls(cfg)
    r.setup()
    r.release_output_dir()
    logged = json.loads((out / ".longshort_files").read_text())
    assert logged and all(n.startswith("log_") and (out / n).is_file() for n in logged)  # DiskLogger's log_<time>.txt
    (out / "notes.txt").write_text("mine")
    (out / "drafts").mkdir()  # an empty folder of the user's holds no file, but it is no log either
    with pytest.raises(FileExistsError, match=r"refuses to delete .*it holds 'drafts', 'notes.txt', which this recipe "
                                              "did not write"):
        recipe_cls(cfg).setup()
    assert (out / "notes.txt").read_text() == "mine" and not (out / ".lock").exists()
    (out / "notes.txt").unlink()
    (out / "drafts").rmdir()
    r = recipe_cls(cfg)
    r.setup()
    r.release_output_dir()
    now = sorted(p.name for p in out.iterdir() if p.name.startswith("log_"))
    assert now and json.loads((out / ".longshort_files").read_text()) == now  # the new run's log alone
