"""The PEFT adapter folder a LoRA run writes (``models.peft_adapter``), against PEFT and transformers themselves: for
every model family's real Hugging Face layout, ``PeftModel.from_pretrained(base, step/adapter)`` must give the
logits of the merged checkpoint ``step/`` (the adapter converted by the family: Llama's q/k rows permuted, Qwen2's
not, Phi-3's q/k/v and gate/up fused), the merged folder must still load as the merged model with the adapter folder
inside it, and reading the adapter back must give the torchtune tensors bit for bit (a resumed run trains on them).
"""

from __future__ import annotations

import json

import pytest
import torch

from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
from torchtune_longshort.models.hf_model import hf_decoder
from torchtune_longshort.models.peft_adapter import ADAPTER_DIR, LAYOUT_FILE, read_peft_adapter, write_peft_adapter
from torchtune_longshort.training.staging import unsaved_files

RANK, ALPHA = 4, 8.0


def _lora_state(folder: CheckpointFolder, seed: int, trainable_norms: bool, trainable_embeddings: bool = False):
    """A LoRA model of ``folder``'s family on every attention projection, the MLP and (untied) the output, its
    adapters random (B != 0) and, when asked, its norms (and embeddings) changed as LongQLoRA trains them."""
    tied = bool(folder.config.get("tie_word_embeddings"))
    model = hf_decoder(str(folder.path), lora_attn_modules=["q_proj", "k_proj", "v_proj", "output_proj"],
                       apply_lora_to_mlp=True, apply_lora_to_output=not tied, lora_rank=RANK, lora_alpha=ALPHA)
    sd = folder.tune_state_dict()
    model.load_state_dict(sd, strict=False)
    g = torch.Generator().manual_seed(seed)
    trainable = []
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.data = torch.randn(p.shape, generator=g) * 0.2
            trainable.append(name)
        elif ((trainable_norms is True and "norm" in name) or (trainable_norms == "final" and name == "norm.scale")
              or (trainable_embeddings and "tok_embeddings" in name)):
            p.data = p.data + 0.1 * torch.randn(p.shape, generator=g)
            trainable.append(name)
    return model, {k: v.detach().clone() for k, v in model.state_dict().items()}, trainable


# One layout per kind of conversion: Llama's permuted q/k rows (Mistral, Gemma and SmolLM2 convert alike), Qwen2's
# unpermuted rows, Phi-3's fused q/k/v and gate/up; trained norms as PEFT modules_to_save.
# smollm2: tied embeddings trained (train_embeddings_and_norms): PEFT's lm_head kept the base embeddings (30% off);
# then, lm_head saved beside them: tie_weights() (lm-eval's hf model calls it) raised KeyError
# ("llama2", "final"): the final norm alone trained (a caller's trainable=): PEFT's load took the bare name "norm"
# for every *_layernorm too and failed on weights the file does not hold
@pytest.mark.parametrize("layout, norms, embeddings", [("llama2", True, False), ("qwen2", False, False),
                                                       ("phi3", True, False), ("smollm2", True, True),
                                                       ("llama2", "final", False)])
def test_peft_from_pretrained_gives_the_merged_logits(family_dirs, tmp_path, layout, norms, embeddings):
    from peft import PeftModel
    from torchtune.modules.peft import get_merged_lora_ckpt
    from transformers import AutoModelForCausalLM

    folder = CheckpointFolder.open(family_dirs[layout])
    model, sd, trainable = _lora_state(folder, seed=1, trainable_norms=norms, trainable_embeddings=embeddings)
    step = tmp_path / "step_1"
    write_peft_adapter(step / ADAPTER_DIR, sd, folder.config, alpha=ALPHA, trainable=trainable,
                       base_model=str(folder.path))
    write_hf_checkpoint(step, get_merged_lora_ckpt(dict(sd), rank=RANK, alpha=ALPHA), folder.config,
                        tokenizer=str(folder.path))
    # sorted, not in the order of PEFT's set (the hash seed's: each run wrote another adapter_config.json)
    targets = json.loads((step / ADAPTER_DIR / "adapter_config.json").read_text())["target_modules"]
    assert len(targets) >= 4 and targets == sorted(targets), targets

    tokens = torch.randint(3, folder.config["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model.eval()(tokens).float()
        base = AutoModelForCausalLM.from_pretrained(str(folder.path), dtype=torch.float32).eval()
        plain = base(tokens).logits
        peft = PeftModel.from_pretrained(base, str(step / ADAPTER_DIR)).eval()
        peft.tie_weights()  # as lm-eval's hf model does after loading peft= (a tied lm_head listed: KeyError)
        via_peft = peft(tokens).logits
        merged = AutoModelForCausalLM.from_pretrained(str(step), dtype=torch.float32).eval()(tokens).logits
    scale = merged.abs().max()
    rel = {name: ((x - merged).abs().max() / scale).item() for name, x in
           (("peft", via_peft), ("trained", ours), ("base", plain))}
    assert rel["peft"] < 5e-5, rel  # PEFT's adapter == our merge (float32 noise: 1.7e-5 on smollm2)
    assert rel["trained"] < 1e-4, rel  # the merged folder == the trained model
    assert rel["base"] > 1e-3, rel  # the adapter changes the model (an empty adapter would pass the rest)

    back = read_peft_adapter(step / ADAPTER_DIR, folder.config)
    assert sorted(back) == sorted(trainable)
    for k, v in back.items():
        assert v.dtype == sd[k].dtype and torch.equal(v, sd[k]), k


def test_missing_adapter_files_are_named(tmp_path, family_dirs):
    """The refusal names the folder and the file, and the way to train anew the run's folder takes: on a resume
    (``restart``, the recipe's ``StepCheckpoints.restart``) a user's notes.txt in output_dir, which a resume accepts,
    is named to move out first; before, the line advised overwrite_output_dir=True alone, which that file refused."""
    from torchtune_longshort.training.output_aside import MARKER
    from torchtune_longshort.training.overwrite_rules import check_deletable, overwrite_advice

    folder = CheckpointFolder.open(family_dirs["llama2"])
    _, sd, trainable = _lora_state(folder, seed=0, trainable_norms=False)
    out = write_peft_adapter(tmp_path / ADAPTER_DIR, sd, folder.config, alpha=ALPHA, trainable=trainable)
    (out / "adapter_model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=f"LoRA adapter folder '{out}' lacks adapter_model.safetensors: .* "
                                                "Restore the folder, or start the run again with "
                                                "overwrite_output_dir=True$"):
        read_peft_adapter(out, folder.config)
    run = tmp_path / "run"  # a recipe-made output folder, and a user's file in it
    run.mkdir()
    (run / MARKER).write_text("")
    (run / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="'notes.txt', which this recipe did not write"):
        check_deletable(run, ())  # the overwrite alone is refused
    with pytest.raises(FileNotFoundError, match="Restore the folder, or train anew: output_dir also holds "
                                                "'notes.txt', which this recipe did not write: move that out of it, "
                                                "then start the run again with overwrite_output_dir=True$"):
        read_peft_adapter(out, folder.config, restart=lambda: overwrite_advice(run, ()))
    (run / "notes.txt").rename(tmp_path / "notes.txt")
    check_deletable(run, ())  # the advice followed: the overwrite is taken
    (out / LAYOUT_FILE).unlink()  # the layout that maps the adapters back: named with the weights
    with pytest.raises(FileNotFoundError, match=f"lacks adapter_model.safetensors, {LAYOUT_FILE}: "):
        read_peft_adapter(out, folder.config)


def test_qlora_adapter_says_its_base_was_nf4(tmp_path, sp_tokenizer_dir):
    """A QLoRA run's adapters were trained on the NF4-quantized base: its merged folder is the trained model, PEFT on
    the full-precision start folder is not (16% off here), and the layout file says why (``base_quantization``)."""
    import json

    from omegaconf import OmegaConf
    from peft import PeftModel
    from torchtune.modules.peft import get_merged_lora_ckpt
    from transformers import AutoModelForCausalLM

    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint
    from torchtune_longshort.training.model_setup import build_model
    from torchtune_longshort.training.recipe_checkpoints import _float32_copies

    base_dir = write_random_llama2_checkpoint(tmp_path / "base", vocab_size=512, embed_dim=128, num_layers=1,
                                              num_heads=4, num_kv_heads=4, intermediate_dim=256, max_seq_len=32)
    node = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": str(base_dir),
            "lora_attn_modules": ["q_proj", "v_proj"], "apply_lora_to_mlp": True, "lora_rank": RANK,
            "lora_alpha": ALPHA, "quantize_base": True}
    model, info = build_model(OmegaConf.create(node), torch.device("cpu"), torch.float32, on_meta=False)
    assert info.quantized_base == "nf4"
    folder = CheckpointFolder.open(base_dir)
    model.load_state_dict(folder.tune_state_dict(), strict=False)
    for name, p in model.named_parameters():
        if "lora_b" in name:
            p.data = torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.05
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    step = tmp_path / "step_1"
    write_peft_adapter(step / ADAPTER_DIR, sd, folder.config, alpha=ALPHA, base_model=str(base_dir),
                       quantized_base=info.quantized_base)
    write_hf_checkpoint(step, get_merged_lora_ckpt(_float32_copies(sd), rank=RANK, alpha=ALPHA), folder.config,
                        tokenizer=str(sp_tokenizer_dir))
    assert json.loads((step / ADAPTER_DIR / "longshort_adapter.json").read_text())["base_quantization"] == "nf4"
    assert unsaved_files(step) == []  # a save's files, all named where a killed save's folder is told from a user's

    tokens = torch.randint(3, 512, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        trained = model.eval()(tokens)
        merged = AutoModelForCausalLM.from_pretrained(str(step), dtype=torch.float32).eval()(tokens).logits
        base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32).eval()
        via_peft = PeftModel.from_pretrained(base, str(step / ADAPTER_DIR)).eval()(tokens).logits
    scale = merged.abs().max()
    assert ((trained - merged).abs().max() / scale).item() < 1e-5  # the merged folder is the trained QLoRA model
    assert ((via_peft - merged).abs().max() / scale).item() > 1e-2  # PEFT on the unquantized base is another model


def _merged_lora_step(family_dirs, tmp_path):
    """The tiny Llama-2 start checkpoint and a LoRA run's ``step_1`` of it: the merged weights and ``adapter/``."""
    from torchtune.modules.peft import get_merged_lora_ckpt

    folder = CheckpointFolder.open(family_dirs["llama2"])
    _, sd, trainable = _lora_state(folder, seed=2, trainable_norms=False)
    step = tmp_path / "step_1"
    write_peft_adapter(step / ADAPTER_DIR, sd, folder.config, alpha=ALPHA, trainable=trainable,
                       base_model=str(folder.path))
    write_hf_checkpoint(step, get_merged_lora_ckpt(dict(sd), rank=RANK, alpha=ALPHA), folder.config,
                        tokenizer=str(folder.path))
    return folder, step


def _check_hf_peft(pretrained, adapter):
    """``longshort-eval run --model hf --model_args pretrained=<pretrained>,peft=<adapter>``'s argument check."""
    from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv

    check_arguments(lm_eval_argv(["run", "--model", "hf", "--model_args", f"pretrained={pretrained},peft={adapter}",
                                  "--tasks", "longshort_ppl"]))


def test_hf_with_a_runs_adapter_refuses_what_evaluates_another_model(family_dirs, tmp_path, caplog):
    """``--model hf --model_args pretrained=...,peft=step_<k>/adapter`` evaluated another model than the run's, with
    no word: on the step folder itself the adapters went on twice (the merged weights hold them: PEFT on it is not
    the merged model, the reference below), on the start checkpoint of a run that changed the RoPE the start's RoPE
    was used (the test below), and a QLoRA adapter on the full-precision base is another model. Refused (warned, for
    QLoRA) before lm-eval starts; an adapter folder given as the model names what to give instead."""
    import logging

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv
    from torchtune_longshort.models.hf_checkpoint import read_hf_config

    folder, step = _merged_lora_step(family_dirs, tmp_path)

    def check(pretrained, adapter=step / ADAPTER_DIR):
        _check_hf_peft(pretrained, adapter)

    check(folder.path)  # the start checkpoint + the adapter: the trained model (the test above)
    tokens = torch.randint(3, folder.config["vocab_size"], (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(str(step), dtype=torch.float32).eval()
        want = merged(tokens).logits
        twice = PeftModel.from_pretrained(merged, str(step / ADAPTER_DIR)).eval()(tokens).logits
    assert ((twice - want).abs().max() / want.abs().max()).item() > 1e-3  # the adapters on twice: another model
    with pytest.raises(ValueError, match="that step folder holds these adapters merged already, so they would be "
                                         "applied twice; drop peft="):
        check(step)

    layout = step / ADAPTER_DIR / "longshort_adapter.json"  # a QLoRA run's: said, not refused
    layout.write_text(json.dumps({**json.loads(layout.read_text()), "base_quantization": "nf4"}))
    with caplog.at_level(logging.WARNING, logger="torchtune_longshort.eval.other_model_args"):
        check(folder.path)
    assert "trained on the nf4-quantized base, these adapters on pretrained=" in caplog.text

    # the adapter folder given as the model: named, with what to give (hf: transformers' "Unrecognized model")
    with pytest.raises(FileNotFoundError, match=rf"pretrained={step / ADAPTER_DIR}: it is a PEFT adapter folder, no "
                                                rf"model: evaluate its step folder '{step}'"):
        check_arguments(lm_eval_argv(["run", "--model", "hf", "--model_args", f"pretrained={step / ADAPTER_DIR}"]))
    # where no adapter is taken (the recipe, longshort-misalignment, the longshort model): the step folder alone (it
    # offered lm-eval's "--model hf --model_args pretrained=<its base>,peft=...", which none of them has)
    with pytest.raises(FileNotFoundError, match=rf"has no config.json: .* It is a PEFT adapter folder, no model: give "
                                                rf"its step folder '{step}' \(the adapters merged\) instead$"):
        read_hf_config(step / ADAPTER_DIR, "pretrained")


def test_hf_with_the_adapter_of_a_run_that_changed_the_rope_on_its_start_is_refused(family_dirs, tmp_path):
    """The adapters of a run that changed the RoPE on its plain start checkpoint: the start's RoPE was used, another
    model (split from the test above). Refused naming the way on --model hf can take, or --model longshort where
    transformers cannot run the run's RoPE."""
    import shutil

    from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv
    from torchtune_longshort.models import load_hf_checkpoint, save_hf_checkpoint

    folder, step = _merged_lora_step(family_dirs, tmp_path)
    # a run that changed the RoPE (YaRN x2): its adapter on the plain start checkpoint
    yarn_step = tmp_path / "step_2"
    save_hf_checkpoint(load_hf_checkpoint(folder.path, rope={"method": "yarn", "factor": 2.0}, max_seq_len=512),
                       yarn_step, folder.config, tokenizer=str(folder.path))
    shutil.copytree(step / ADAPTER_DIR, yarn_step / ADAPTER_DIR)
    with pytest.raises(ValueError, match=r"the run trained these adapters with RoPE method=yarn, .*factor=2.0.* "
                                         r"and pretrained= loads with plain \(base 10000\), another model; evaluate "
                                         rf"the step folder itself \(pretrained={yarn_step}") as e:
        _check_hf_peft(folder.path, yarn_step / ADAPTER_DIR)
    # the way on that --model hf can take (a folder of the base's weights with the step's config.json), the base
    # said once (it was 'method=yarn, base=10000.0, ... (base 10000)')
    assert str(e.value).endswith("or give pretrained= a folder holding the base's weights and the step's config.json, "
                                 f"which longshort-eval peft-base {yarn_step} --out {tmp_path}_step_2_base writes")
    assert "base=" not in str(e.value) and str(e.value).count("(base 10000)") == 2
    # peft= on that step folder itself: the way on named is that folder too, not the start checkpoint (it named
    # "pretrained=<the run's start checkpoint>", which the refusal above refuses)
    with pytest.raises(ValueError, match="applied twice") as e:
        _check_hf_peft(yarn_step, yarn_step / ADAPTER_DIR)
    assert f"longshort-eval peft-base {yarn_step} --out {tmp_path}_step_2_base writes" in str(e.value)
    assert "<the run's start checkpoint>" not in str(e.value)
    # a RoPE transformers cannot run (Phi-3.5 + YaRN, CLEX, EABF): --model hf refuses the step folder too, so the
    # refusal names --model longshort on it (it named pretrained=<step> under hf, which is refused in turn)
    eabf_step = tmp_path / "step_3"
    save_hf_checkpoint(load_hf_checkpoint(folder.path, rope={"method": "eabf", "new_base": 5e5}), eabf_step,
                       folder.config, tokenizer=str(folder.path))
    shutil.copytree(step / ADAPTER_DIR, eabf_step / ADAPTER_DIR)
    with pytest.raises(ValueError, match=r"the run trained these adapters with RoPE method=eabf, .*another model; "
                                         r"evaluate the merged step folder with --model longshort --model_args "
                                         rf"pretrained={eabf_step} \(transformers cannot run its eabf RoPE"):
        _check_hf_peft(folder.path, eabf_step / ADAPTER_DIR)
    with pytest.raises(ValueError, match="is not representable in transformers"):  # what the old fix ran into
        check_arguments(lm_eval_argv(["run", "--model", "hf", "--model_args", f"pretrained={eabf_step}"]))
    check_arguments(lm_eval_argv(["run", "--model", "longshort", "--model_args", f"pretrained={eabf_step}",
                                  "--tasks", "longshort_ppl"]))  # the named fix: accepted


def test_an_adapter_of_a_run_that_changed_the_rope_says_how_its_base_loads(family_dirs, tmp_path):
    """A LoRA adapter carries no RoPE: a run that scaled it (YaRN x2) left PEFT on the start folder another model,
    and nothing in ``adapter/`` or the run's output said so. The layout file now holds ``base_config`` (the step's
    RoPE) and the recipe's last lines name the step's config.json; loading the base with it, as the line says, gives
    the merged step's logits (PEFT and transformers are the reference), the start folder alone does not."""
    from peft import PeftModel
    from torchtune.modules.peft import get_merged_lora_ckpt
    from transformers import AutoConfig, AutoModelForCausalLM

    from torchtune_longshort.models import load_hf_checkpoint
    from torchtune_longshort.eval.peft_base import main as peft_base
    from torchtune_longshort.models.peft_adapter import base_config_note

    folder = CheckpointFolder.open(family_dirs["llama2"])
    spec = load_hf_checkpoint(folder.path, rope={"method": "yarn", "factor": 2.0}, max_seq_len=512).rope_scaling
    _, sd, trainable = _lora_state(folder, seed=3, trainable_norms=False)
    step = tmp_path / "step_1"  # as the recipe's stage_step writes it: the start's config.json and the run's RoPE
    write_peft_adapter(step / ADAPTER_DIR, sd, folder.config, alpha=ALPHA, trainable=trainable,
                       base_model=str(folder.path), rope_spec=spec)
    write_hf_checkpoint(step, get_merged_lora_ckpt(dict(sd), rank=RANK, alpha=ALPHA), folder.config,
                        rope_spec=spec, tokenizer=str(folder.path))
    said = json.loads((step / ADAPTER_DIR / "longshort_adapter.json").read_text())["base_config"]
    assert said["config"] == "../config.json" and said["rope_scaling"]["rope_type"] == "yarn"
    assert said["rope_scaling"]["factor"] == 2.0 and said["max_position_embeddings"] == 512
    note = base_config_note(step)
    assert note.startswith("\n[longshort] adapter:") and f"AutoConfig.from_pretrained('{step}')" in note
    told = tmp_path.parent / f"{tmp_path.name}_step_1_base"  # beside the run, for stock lm-eval's --model hf
    assert f"longshort-eval peft-base {step} --out {told} writes" in note
    assert f"pretrained={told},peft={step / ADAPTER_DIR}" in note
    assert peft_base([str(step), "--out", str(tmp_path / "written")], "longshort-eval peft-base") == 0

    tokens = torch.randint(3, folder.config["vocab_size"], (1, 300), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(str(step), dtype=torch.float32).eval()(tokens).logits
        got = {}
        for how, path, kwargs in (("as said", folder.path, {"config": AutoConfig.from_pretrained(str(step))}),
                                  ("written", tmp_path / "written", {}), ("alone", folder.path, {})):
            base = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, **kwargs)
            got[how] = PeftModel.from_pretrained(base, str(step / ADAPTER_DIR)).eval()(tokens).logits
    rel = {how: ((v - want).abs().max() / want.abs().max()).item() for how, v in got.items()}
    assert rel["as said"] < 5e-5 and rel["written"] < 5e-5 and rel["alone"] > 1e-3, rel

    # a run that kept the start's RoPE: nothing to say (the start folder is the base as it is)
    write_peft_adapter(tmp_path / "plain" / ADAPTER_DIR, sd, folder.config, alpha=ALPHA, trainable=trainable,
                       base_model=str(folder.path))
    assert json.loads((tmp_path / "plain" / ADAPTER_DIR / "longshort_adapter.json").read_text())["base_config"] is None
    assert base_config_note(tmp_path / "plain") == "" and base_config_note(None) == ""

    # QLoRA: the adapters were trained on the NF4 base, so PEFT on the start in full precision is another model
    # (README) whatever config it loads with: the line names the merged step alone
    qlora = tmp_path / "qlora"
    write_peft_adapter(qlora / ADAPTER_DIR, sd, folder.config, alpha=ALPHA, trainable=trainable,
                       base_model=str(folder.path), rope_spec=spec, quantized_base="nf4")
    note = base_config_note(qlora)
    assert "(nf4)" in note and note.endswith(f"evaluate or serve the merged {qlora} itself")
    assert "PeftModel" not in note and f"and with the RoPE of {qlora / 'config.json'} (" in note  # the RoPE too
    write_peft_adapter(tmp_path / "qlora_kept" / ADAPTER_DIR, sd, folder.config, alpha=ALPHA, trainable=trainable,
                       base_model=str(folder.path), quantized_base="nf4")  # the start's RoPE kept: still said
    assert base_config_note(tmp_path / "qlora_kept").endswith(
        f"(nf4): evaluate or serve the merged {tmp_path / 'qlora_kept'} itself")

    # CLEX: transformers refuses the step's config.json (its rope_type says why), so no base loads with it
    clex = {"method": "clex", "base": 1e4, "max_seq_len": 512, "original_max_seq_len": 256, "t_max": 2,
            "head_dim": folder.config["hidden_size"] // folder.config["num_attention_heads"]}
    write_peft_adapter(tmp_path / "clex" / ADAPTER_DIR, sd, folder.config, alpha=ALPHA, trainable=trainable,
                       base_model=str(folder.path), rope_spec=clex)
    assert base_config_note(tmp_path / "clex").endswith("with longshort-eval --model longshort")


@pytest.mark.parametrize("layout", ["llama3", "phi3_5"])
def test_a_run_that_kept_the_starts_scaled_rope_at_another_length_says_nothing_of_its_base(family_dirs, tmp_path,
                                                                                            layout):
    """Llama 3.x (llama3 scaling) and Phi-3.5 (LongRoPE) start scaled; a LoRA run that keeps that RoPE at its own
    max_seq_len writes another max_position_embeddings and spells the spec with more keys, yet PEFT on the start
    folder as it is gives the merged step's logits (transformers is the reference): no base_config, no line, and
    ``--model hf`` with that base and ``peft=`` is not refused as another model (it was)."""
    from peft import PeftModel
    from torchtune.modules.peft import get_merged_lora_ckpt
    from transformers import AutoModelForCausalLM

    from torchtune_longshort.eval.other_model_args import check_peft_args
    from torchtune_longshort.models import load_hf_checkpoint
    from torchtune_longshort.models.peft_adapter import base_config_note

    folder = CheckpointFolder.open(family_dirs[layout])
    spec = load_hf_checkpoint(folder.path, max_seq_len=128).rope_scaling
    _, sd, trainable = _lora_state(folder, seed=5, trainable_norms=False)
    step = tmp_path / "step_1"
    write_peft_adapter(step / ADAPTER_DIR, sd, folder.config, alpha=ALPHA, trainable=trainable,
                       base_model=str(folder.path), rope_spec=spec)
    write_hf_checkpoint(step, get_merged_lora_ckpt(dict(sd), rank=RANK, alpha=ALPHA), folder.config,
                        rope_spec=spec, tokenizer=str(folder.path))
    assert json.loads((step / "config.json").read_text())["max_position_embeddings"] == 128  # another length
    assert json.loads((step / ADAPTER_DIR / "longshort_adapter.json").read_text())["base_config"] is None
    assert base_config_note(step) == ""
    check_peft_args(str(folder.path), str(step / ADAPTER_DIR))  # --model hf peft= on that base: no refusal either
    tokens = torch.randint(3, folder.config["vocab_size"], (1, 100), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(str(step), dtype=torch.float32).eval()(tokens).logits
        base = AutoModelForCausalLM.from_pretrained(str(folder.path), dtype=torch.float32)
        got = PeftModel.from_pretrained(base, str(step / ADAPTER_DIR)).eval()(tokens).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
