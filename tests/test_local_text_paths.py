"""``corpus.local_text`` with ``path`` a list of paths and globs, as ``resolve_files`` and the evaluation's
``ppl_data_files`` take them: it was refused by the config check ("expected a string (local_text's path)")."""

from __future__ import annotations

import json

import pytest
from recipe_config import make_cfg

from torchtune_longshort.data.corpus import local_text


def _files(tmp_path):
    (tmp_path / "more").mkdir()
    a, b, c = tmp_path / "a.jsonl", tmp_path / "more" / "b.jsonl", tmp_path / "more" / "c.txt"
    a.write_text("".join(json.dumps({"text": f"a{i} " * 30}) + "\n" for i in range(2)))
    b.write_text(json.dumps({"text": "b " * 30}) + "\n")
    c.write_text("c " * 30)
    return a, b, c


def test_a_list_of_paths_and_globs_is_read_in_order(tmp_path):
    a, b, c = _files(tmp_path)
    got = list(local_text([str(tmp_path / "more" / "*.txt"), str(a), str(b)])())
    # the reference: each entry read alone, in the list's order
    assert got == [*local_text(str(c))(), *local_text(str(a))(), *local_text(str(b))()]
    assert len(got) == 4


def test_the_config_check_takes_a_list_and_names_the_entry_that_names_nothing(tmp_path, tiny_llama2_dir,
                                                                              sp_tokenizer_dir, monkeypatch, caplog):
    from torchtune_longshort.training.recipe_config import load_recipe_config

    a, b, _ = _files(tmp_path)

    def cfg(path, where="dataset", train=None, **args):
        node = {"_component_": "torchtune_longshort.data.corpus.local_text", "path": path, **args}
        if where == "dataset":
            return make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", dataset=node)
        over = {"dataset": {"_component_": node["_component_"], "path": train}} if train is not None else {}
        return make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", **over,
                        validation={"dataset": node, "seq_len": 16, "num_sequences": 1})

    load_recipe_config(cfg([str(a), str(b)]))
    load_recipe_config(cfg([str(a), str(tmp_path / "more")], "validation"))
    load_recipe_config(cfg(str(tmp_path / "more"), suffixes=[".jsonl", ""]))  # '' in a suffix list: no suffix
    with pytest.raises(ValueError, match=r"^dataset.path\[1\]='' is not accepted"):  # the first empty item named
        load_recipe_config(cfg([str(a), "", ""]))
    # validation reading a file training reads is said in one line, however each names it (relative, absolute); a
    # folder is the files of its suffixes (and record files). The reference: the files both list, by hand
    monkeypatch.chdir(tmp_path)
    for val, args, said in (([str(b)], {}, ["validation.dataset reads 1 of its 1 files"]),
                            (str(tmp_path / "more"), {"suffixes": [".md"]}, [])):  # b.jsonl alone: not trained on
        caplog.clear()
        with caplog.at_level("WARNING", logger="torchtune_longshort.training.recipe_config.validation_overlap"):
            load_recipe_config(cfg(val, "validation", train=["a.jsonl", "more/b.jsonl" if said else "more/c.txt"],
                                   **args))
        got = [r.getMessage() for r in caplog.records]
        assert len(got) == len(said) and all(g.startswith(s) for g, s in zip(got, said)), got
    with pytest.raises(FileNotFoundError, match=r"^dataset.path\[1\]='.*nope.jsonl' does not exist"):
        load_recipe_config(cfg([str(a), str(tmp_path / "nope.jsonl")]))
    bad = tmp_path / "bad.jsonl"  # each entry's first bytes are checked, as a single path's are
    bad.write_bytes(b'{"text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"^dataset.path: .*bad.jsonl:1: bytes that are not utf-8"):
        load_recipe_config(cfg([str(a), str(bad)]))
    (tmp_path / "saved").mkdir()  # a folder of datasets' save_to_disk: refused by the check, before the run
    for name in ("state.json", "dataset_info.json"):
        (tmp_path / "saved" / name).write_text("{}")
    with pytest.raises(ValueError, match=r"^dataset.path='.*saved' is a folder written by datasets' save_to_disk"):
        load_recipe_config(cfg(str(tmp_path / "saved")))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("access", ["read_through", "from_index"])
def test_a_file_deleted_while_the_run_reads_is_a_source_fault_naming_it(tmp_path, access):
    """A corpus file deleted (moved, unmounted) after the run started: the stream's read raised a bare
    ``FileNotFoundError``, which ended a run in ``[Errno 2] No such file or directory: '...'``, no key named and the
    steps since the last periodic save lost. Now it is a :class:`DataSourceError` (the recipe saves the last good
    step and says to resume once the source can be read again), naming the section and the file."""
    from torchtune_longshort.data.source_names import SourceNames, source_names
    from torchtune_longshort.data.text_files import DataSourceError

    a, b, c = _files(tmp_path)
    with source_names(SourceNames(where="validation.dataset")):
        docs = local_text(str(tmp_path))
    b.unlink()
    read = {"read_through": docs, "from_index": lambda: docs.from_index(1)}[access]
    with pytest.raises(DataSourceError, match=rf"^validation.dataset local_text\(.*\): {b} can no longer be read "
                                              r"\(No such file or directory"):
        list(read())
