"""README ('Code a checkpoint names') listed the readers that gate a checkpoint's code and said nothing of the
lower-level calls a script makes: ``CheckpointFolder.open(dir)``, ``family_of(config)``, ``rope_spec_from_hf_config``
import the path a folder names without asking. README now says which calls do not gate and how to gate them; each
claim is checked here against the calls themselves (the module's marker file the witness)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trust_gate import FAMILY_PATH, PKG, ROPE_PATH, _folder_naming, _imported
from user_modules import forget_user_module

README = Path(__file__).resolve().parents[1] / "README.md"



def _calls(folder):
    from torchtune_longshort.models import CheckpointFolder, family_of, rope_spec_from_hf_config

    config = json.loads((folder / "config.json").read_text())
    rope = {**config, "longshort_rope": {"method": ROPE_PATH, "factor": 2.0}}
    return {"CheckpointFolder.open(dir)": lambda: CheckpointFolder.open(folder),
            "family_of(config)": lambda: family_of(config),
            "rope_spec_from_hf_config(config)": lambda: rope_spec_from_hf_config(rope)}


def test_readme_names_the_calls_that_do_not_gate_and_they_import_outside_a_gate(marker, tiny_llama2_dir, tmp_path):
    from torchtune_longshort.rope.checkpoint_code import UntrustedCheckpointCode, checkpoint_code

    section = README.read_text().split("### Code a checkpoint names")[1].split("\n### ")[0]
    ungated = re.search(r"Only these gate\. (.*?)\n\n", section, re.S)
    assert ungated, "README's 'Code a checkpoint names' does not say which calls do not gate"
    folder = _folder_naming(tiny_llama2_dir, tmp_path / "theirs", longshort_family=FAMILY_PATH)
    for name, call in _calls(folder).items():
        assert f"`{name}`" in ungated.group(1)
        with pytest.raises(UntrustedCheckpointCode):  # README's way to gate them
            with checkpoint_code(False):
                call()
        assert not _imported(marker)
        call()  # outside a gate: imported, as README says
        assert _imported(marker), name
        forget_user_module(PKG)
        marker.unlink()
