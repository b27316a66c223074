"""The BABILong generator's ``--tokenizer`` that is neither a local file or folder nor a cached hub tokenizer,
offline: transformers' words cut at 200 characters ended the line mid-address ("... offline mode at 'https://):
name a tokenizer ..."), naming ``tokenizer``, not the flag. Now one whole line naming ``--tokenizer``, the cache it
looked in and the setting that keeps the hub offline, exit 2, nothing written."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("transformers")

NAME = "longshort-no-such-org/no-such-tokenizer"


def test_an_uncached_hub_tokenizer_offline_is_one_whole_line_naming_the_flag(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants, try_to_load_from_cache

    from torchtune_longshort.eval.tasks.babilong.generator import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert constants.is_offline_mode()  # the reference: huggingface_hub's own word that it is offline ...
    assert not isinstance(try_to_load_from_cache(NAME, "tokenizer_config.json"), str)  # ... and holds none of it
    out = tmp_path / "bab"
    monkeypatch.setattr(sys, "argv", ["generator", "--out", str(out), "--tokenizer", NAME, "--lengths", "1k",
                                      "--n", "1"])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    line = err.split(": error: ", 1)[1]
    assert line.startswith(f"--tokenizer {NAME!r}: neither a tokenizer file or folder"), line
    assert f"({constants.HF_HUB_CACHE})" in line and "(HF_HUB_OFFLINE=1)" in line, line
    assert "'https://)" not in line and line.rstrip().endswith("(run once with offline mode off to download it)"), line
    assert not out.exists()
