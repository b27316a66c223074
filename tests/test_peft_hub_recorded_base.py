"""An adapter trained on a hub model records its name (``base_model_name_or_path``: ``HuggingFaceTB/SmolLM2-135M``,
what its user passed to ``from_pretrained``). Refused on a LoRA run's step, it was said to be trained on "a path
relative to the folder they were trained in", advised ``pretrained=<that folder>``, and, copied out of its step
(``plain/``), advised "evaluate the merged step alone (pretrained=<the step given>)": another run's step, not the
adapters' model. A relative record no folder here matches that has a hub name's shape now reads "a local path
relative to where they were trained, or a hub model", advised as written; the merged step alone is offered only
for a step's own ``<step>/adapter``. PEFT's own record, and huggingface_hub's own repository-id rule, the
references."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("peft")

from torchtune_longshort.eval.other_model_args import check_peft_args  # noqa: E402

HUB = "HuggingFaceTB/SmolLM2-135M"


def _adapter(folder, base: str) -> None:
    from peft import LoraConfig

    LoraConfig(r=2, target_modules=["q_proj"], base_model_name_or_path=base).save_pretrained(str(folder))


def _step(folder, base: str) -> None:
    (folder / "adapter").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    _adapter(folder / "adapter", base)


def test_a_hub_recorded_base_is_advised_as_written_and_a_copy_is_not_told_its_step(tmp_path, monkeypatch):
    from huggingface_hub.utils import validate_repo_id

    monkeypatch.chdir(tmp_path)
    _step(tmp_path / "run" / "step_4", "/abs/base")
    _step(tmp_path / "run" / "step_2", HUB)
    _adapter(tmp_path / "plain", HUB)
    recorded = json.loads((tmp_path / "plain" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert recorded == HUB and not (tmp_path / HUB).exists()
    validate_repo_id(recorded)  # the reference: a name the hub may hold (raises on any other)

    said = (f"these adapters were trained on {HUB} (a local path relative to where they were trained, or a hub "
            "model), so both would be applied; ")
    with pytest.raises(ValueError) as e:  # a copied adapter: its recorded base is the one way on
        check_peft_args("run/step_4", "plain")
    assert str(e.value).endswith(said + f"put the adapters on their base (pretrained={HUB},peft=plain)")
    with pytest.raises(ValueError) as e:  # a step's own adapter: that step, the merged one, or the recorded base
        check_peft_args("run/step_4", "run/step_2/adapter")
    assert str(e.value).endswith(said + "evaluate the merged step alone (pretrained=run/step_2, no peft=), or put the "
                                 f"adapters on their base (pretrained={HUB},peft=run/step_2/adapter)")


def test_a_relative_record_that_is_no_hub_name_keeps_its_folder_wording(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _step(tmp_path / "run" / "step_4", "/abs/base")
    _adapter(tmp_path / "plain", "outputs/base/step_2")  # two slashes: no hub repository's name
    with pytest.raises(ValueError) as e:
        check_peft_args("run/step_4", "plain")
    assert str(e.value).endswith("trained on outputs/base/step_2 (a path relative to the folder they were trained "
                                 "in), so both would be applied; put the adapters on their base (pretrained=<that "
                                 "folder>,peft=plain)")
