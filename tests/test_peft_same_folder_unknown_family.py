"""``same_checkpoint`` with one folder given twice (once by a link) whose family this project's table does not know
(``--model hf`` may still load it): compared by the folder alone, as its docstring says, the same one. Without the
folder comparison it read the folder, found no family and said "not the same" of a folder and itself. The
reference: ``os.path.samefile``."""

from __future__ import annotations

import json
import os

from torchtune_longshort.eval.peft_fit import same_checkpoint


def test_one_folder_of_an_unknown_family_is_the_same_checkpoint_as_itself(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "no_such_family", "architectures": ["NoSuch"]}))
    os.symlink(folder, tmp_path / "link")
    assert os.path.samefile(folder, tmp_path / "link")
    assert same_checkpoint(folder, tmp_path / "link")
    assert same_checkpoint(folder, folder)
