"""A device in an ``--config`` YAML's ``model_args`` (``pretrained=...,device=cuda:3`` or a mapping) on a machine
without it: the refusal names the YAML's model_args, where lm-eval reads it (not ``--device``, a flag the user did
not type), and a mapping's device goes on as the wrapper's one ``--device`` (as JSON, lm-eval's hf got it twice)."""

from __future__ import annotations

import pytest
import yaml

from torchtune_longshort.eval.cli_run import lm_eval_argv

SHAPES = {"string": "dtype=float32,max_length=64,device={}", "mapping": {"dtype": "float32", "max_length": 64,
                                                                        "device": None}}


def _lm_eval_reads(argv):
    from lm_eval._cli.harness import HarnessCLI
    from lm_eval.config.evaluate_config import EvaluatorConfig

    return EvaluatorConfig.from_cli(HarnessCLI()._parser.parse_args(argv))


def _yaml(tmp_path, shape, device):
    args = SHAPES[shape]
    args = args.format(device) if isinstance(args, str) else {**args, "device": device}
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump({"model": "hf", "tasks": ["longshort_ppl"], "model_args": args}))
    return path


@pytest.mark.parametrize("shape", SHAPES)
def test_a_device_this_machine_lacks_is_named_in_the_yamls_model_args(tmp_path, monkeypatch, shape):
    path = _yaml(tmp_path, shape, "cuda:3")
    assert _lm_eval_reads(["run", "--config", str(path)]).model_args["device"] == "cuda:3"  # lm-eval's own reading
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ValueError, match=rf"^--config {path}: model_args device='cuda:3': CUDA is not available "
                                         "on this machine; pass device: cpu in its model_args, or run where"):
        lm_eval_argv(["run", "--config", str(path)])


@pytest.mark.parametrize("shape", SHAPES)
def test_a_yamls_model_args_reach_lm_eval_as_written_and_its_device_once(tmp_path, shape):
    path = _yaml(tmp_path, shape, "cpu")
    cfg = _lm_eval_reads(lm_eval_argv(["run", "--config", str(path)]))
    want = _lm_eval_reads(["run", "--config", str(path)]).model_args  # the YAML alone, as lm-eval reads it
    assert {**cfg.model_args, "device": cfg.device} == want  # the device as lm-eval's own --device, not twice
    assert "device" not in cfg.model_args
