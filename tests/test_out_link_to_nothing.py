"""An output folder named through a symbolic link with nothing behind it (its target not there, or a loop of links):
``os.makedirs`` fails there ('File exists', or 'Too many levels of symbolic links'), so each command that makes its
output folder after its work ended in a traceback after that work (``synthetic --out dl`` after training, the
study's lock, the BABILong generator on a loop; lm-eval evaluated, then could not save). ``check_creatable``, which
every such command asks before it starts, now refuses it in one line naming the link; os.makedirs the reference."""

import os

import pytest

from torchtune_longshort.config.values import check_creatable


def _links(tmp_path):
    (tmp_path / "to_nothing").symlink_to(tmp_path / "gone" / "deep")
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    (tmp_path / "to_folder").symlink_to(tmp_path)


@pytest.mark.parametrize("name, link", [("to_nothing", "to_nothing"), ("to_nothing/sub/x", "to_nothing"),
                                        ("loop_a", "loop_a"), ("loop_a/sub", "loop_a")])
def test_a_folder_mkdir_cannot_make_through_a_link_is_refused_naming_the_link(tmp_path, name, link):
    _links(tmp_path)
    value = str(tmp_path / name)
    with pytest.raises(OSError):  # the reference: what making the folder does
        os.makedirs(value, exist_ok=True)
    with pytest.raises(OSError) as e:
        check_creatable("--out", value, writable=True)
    said = str(e.value)
    assert said.startswith(f"--out={value!r} cannot be created: {str(tmp_path / link)!r} is a symbolic link")
    assert "\n" not in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop_a", "loop_b", "to_folder", "to_nothing"]


@pytest.mark.parametrize("name", ["new/sub", "to_folder", "to_folder/new"])
def test_a_folder_mkdir_can_make_is_still_taken(tmp_path, name):
    _links(tmp_path)
    check_creatable("--out", str(tmp_path / name), writable=True)
    os.makedirs(tmp_path / name, exist_ok=True)  # the reference: it can be made


def test_synthetic_out_through_a_link_to_nothing_is_refused_before_it_trains(tmp_path, monkeypatch, capsys):
    import torchtune_longshort.synthetic.__main__ as cli

    def trains(*a, **k):
        raise AssertionError("trained before the refusal")

    monkeypatch.setattr(cli, "train_run", trains)
    _links(tmp_path)
    out = str(tmp_path / "to_nothing")
    assert cli.main(["--task", "length", "--pe", "rope", "--steps", "1", "--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a symbolic link to" in err[0], err
    assert not (tmp_path / "gone").exists()


def test_a_chain_of_links_is_named_up_to_the_path_that_is_not_there(tmp_path):
    """``via -> to_nothing -> gone/deep``: the refusal said ``'via' is a symbolic link to 'to_nothing', which does not
    exist``, of a link ``ls`` shows (``mkdir to_nothing``, the way it points to, fails: 'File exists'). The chain's end,
    ``os.path.realpath``, is the reference for what is not there."""
    _links(tmp_path)
    (tmp_path / "via").symlink_to("to_nothing")
    value = str(tmp_path / "via" / "sub")
    with pytest.raises(OSError):
        os.makedirs(value, exist_ok=True)
    with pytest.raises(OSError) as e:
        check_creatable("--out", value)
    end = os.path.realpath(tmp_path / "via")
    assert not os.path.lexists(end)
    said = str(e.value)
    assert said.startswith(f"--out={value!r} cannot be created: {str(tmp_path / 'via')!r} is a symbolic link to "
                           f"'to_nothing' -> {end!r}, which does not exist; "), said
