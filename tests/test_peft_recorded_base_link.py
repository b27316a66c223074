"""A hand mutant of eval/peft_fit that survived (mutants41): a ``pretrained=`` given as a link whose target's path
ends with the adapter's relative recorded base (``step_2``) not taken for it, as only the path as typed was compared.
The reference: os.path.realpath of the link, the folder transformers loads."""

from __future__ import annotations

import os
from pathlib import Path

from torchtune_longshort.eval.peft_fit import is_recorded_base


def test_a_link_to_the_recorded_folder_is_that_folder(tmp_path):
    real = tmp_path / "runs" / "step_2"
    real.mkdir(parents=True)
    link = tmp_path / "current"
    link.symlink_to(real, target_is_directory=True)
    assert Path(os.path.realpath(link)).name == "step_2" and link.name != "step_2"
    assert is_recorded_base(link, "step_2")
    assert is_recorded_base(link, "runs/step_2")
    assert not is_recorded_base(link, "step_3")
