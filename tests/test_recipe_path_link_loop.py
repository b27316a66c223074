"""A recipe path through a loop of symbolic links (ln -s b a; ln -s a b; output_dir=a/run): Path.resolve raised
(RuntimeError 'Symlink loop') out of resolved_config, and tune run / longshort-validate ended in a traceback, exit 1;
it is now a ValueError naming the key, which both print as one line, exit 2. os.stat's ELOOP the reference."""

import errno
import os

import pytest

from torchtune_longshort.training.recipe_config.paths import resolved_config


@pytest.mark.parametrize("key", ["output_dir", "checkpoint_dir"])
def test_a_path_through_a_loop_of_links_is_refused_naming_its_key(tmp_path, key):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    value = str(tmp_path / "a" / "run")
    with pytest.raises(OSError) as e:  # the reference: the path cannot be followed
        os.stat(value)
    assert e.value.errno == errno.ELOOP
    with pytest.raises(ValueError) as refused:
        resolved_config({key: value, "seed": 0})
    said = str(refused.value)
    assert said.startswith(f"{key}={value!r} cannot be resolved") and "symbolic link in a loop" in said
    assert "\n" not in said


def test_a_link_to_nothing_is_still_resolved_to_its_target(tmp_path):
    (tmp_path / "dl").symlink_to(tmp_path / "gone" / "x")
    assert resolved_config({"output_dir": str(tmp_path / "dl")})["output_dir"] == str(tmp_path / "gone" / "x")
