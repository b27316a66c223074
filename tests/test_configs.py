"""Every config in configs/ (ours: not synthetic/ or study/) passes torchtune's own validation, the study configs
are refused by it with the reason, and the other base models' configs differ from the Llama-2 one only where the
model differs."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted(
    p for p in (REPO / "configs").rglob("*.yaml") if p.relative_to(REPO / "configs").parts[0] not in ("synthetic", "study")
)


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(REPO / "configs")) for p in CONFIGS])
def test_tune_validate_accepts(path):
    # The same check as `tune validate <file>` (torchtune.config.validate), in-process to keep the suite fast.
    from torchtune import config

    config.validate(OmegaConf.load(path))


def _flat(path):
    return {k: v for k, v in _items(OmegaConf.to_container(OmegaConf.load(path), resolve=False))}


def _items(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _items(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


@pytest.mark.parametrize("other", ["llama3_8b/eabf_16k_redpajama_book.yaml", "mistral_7b/eabf_16k_redpajama_book.yaml"])
def test_other_base_models_differ_only_in_model(other):
    a = _flat(REPO / "configs/llama2_7b/eabf_8k_redpajama_book.yaml")
    b = _flat(REPO / "configs" / other)
    diff = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    allowed = ("model.", "tokenizer.", "checkpointer.checkpoint_files", "checkpointer.model_type", "seq_len",
               "validation.seq_len", "output_dir")
    assert all(k.startswith(allowed) for k in diff), sorted(diff)


def test_paper_configs_have_paper_settings():
    for p in (REPO / "configs/llama2_7b").glob("*.yaml"):
        c = OmegaConf.load(p)
        assert c.batch_size == 64 and c.max_steps == 200 and list(c.e_range) == [1, "L/2"], p
        assert c.loss.alpha == 0.1


STUDY_CONFIGS = sorted((REPO / "configs/study").glob("*.yaml"))


@pytest.mark.parametrize("path", STUDY_CONFIGS, ids=[p.name for p in STUDY_CONFIGS])
def test_tune_validate_refuses_study_configs_with_the_reason(path):
    # Study configs are not torchtune recipe configs; torchtune's check must say so, not "well-formed".
    from torchtune import config
    from torchtune.config._errors import ConfigError

    with pytest.raises(ConfigError) as err:
        config.validate(OmegaConf.load(path))
    assert "not a torchtune config" in str(err.value).lower()
    assert "python -m torchtune_longshort.study --config" in str(err.value)
    assert len(err.value.errors) == 1  # the marker only: the rest of the file is fine


def test_tune_validate_command_exits_nonzero_on_a_study_config():
    import os
    import subprocess
    import sys

    tune = str(Path(sys.executable).with_name("tune"))
    p = subprocess.run([tune, "validate", "configs/study/cpu_small.yaml"], cwd=REPO, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}, timeout=300)
    assert p.returncode != 0 and "well-formed!" not in p.stdout
    assert "torchtune-longshort study config" in p.stderr


def test_longshort_cp_refuses_a_destination_in_a_missing_folder_in_one_line(tmp_path, capsys):
    # `longshort-cp NAME nodir/x.yaml` printed a FileNotFoundError traceback from shutil; now one line naming the
    # folder, exit 2, and nothing created.
    from torchtune_longshort.configs_cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "nodir" / "x.yaml")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.count("\n") == 1 and "nodir" in err and "mkdir -p" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
    # a destination folder that is a file was told to be made (`mkdir -p x.yaml`, which fails)
    (tmp_path / "x.yaml").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "x.yaml" / "sub.yaml")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "x.yaml is a file, not a folder" in err and "mkdir" not in err, err
    assert (tmp_path / "x.yaml").read_text() == "mine"
