"""The edges of config/unknown_keys.py the recipe-level tests do not reach: torchtune's names answered only at the
top level (a nested 'validation.epochs' is a typo of that section, not torchtune's key), the study marker likewise,
'did you mean' a top-level key or a section's path, a torchtune node accepted only at its whole listed value, and
'+key' overrides merged as OmegaConf merges them.

References: OmegaConf.merge of the same nodes; TORCHTUNE_AS_HERE's listed values; the module's words."""

import pytest
from omegaconf import OmegaConf

from torchtune_longshort.config.unknown_keys import (STUDY_MARKER_KEY, ConfigKeyError, hint, plus_keys,
                                                      refuse_unknown, torchtune_keys_as_here)


def test_torchtunes_names_are_answered_at_the_top_level_only():
    with pytest.raises(ConfigKeyError) as top:
        refuse_unknown(["epochs"], ["max_steps"])
    assert str(top.value).startswith("config key(s) this recipe does not take at the top level: 'epochs' "
                                     "(torchtune's name: did you mean 'max_steps'?"), str(top.value)
    with pytest.raises(ConfigKeyError) as nested:
        refuse_unknown(["epochs"], ["every_n_steps", "dataset"], where="validation")
    assert str(nested.value) == ("unknown config key(s) in validation: 'validation.epochs'. Accepted in validation: "
                                 "dataset, every_n_steps")


def test_the_study_marker_is_a_study_config_at_the_top_level_only():
    with pytest.raises(ConfigKeyError, match=r"^this is a study config"):
        refuse_unknown([STUDY_MARKER_KEY], ["max_steps"])
    with pytest.raises(ConfigKeyError, match=rf"^unknown config key\(s\) in model: 'model.{STUDY_MARKER_KEY}'\."):
        refuse_unknown([STUDY_MARKER_KEY], ["path"], where="model")


def test_did_you_mean_names_a_top_level_key_or_where_a_section_reads_it():
    assert hint("max_steps", [], "validation", {"max_steps": "max_steps"}) == (
        "'validation.max_steps' (did you mean 'max_steps'? a top-level key)")
    assert hint("every_n_steps", [], "", {"every_n_steps": "validation.every_n_steps"}) == (
        "'every_n_steps' (did you mean 'validation.every_n_steps'? it is read there)")


def test_a_torchtune_node_is_accepted_only_at_its_listed_value():
    assert torchtune_keys_as_here({"fsdp": {"cpu_offload": False}}) == {
        "fsdp": "fsdp: {cpu_offload: False} (no FSDP2 CPU offload)"}
    # a node that asks more than the listed value: not accepted (then refused with its hint), not a KeyError
    assert torchtune_keys_as_here({"fsdp": {"cpu_offload": False, "reshard_after_forward": True}}) == {}
    assert torchtune_keys_as_here({"fsdp": {"cpu_offload": 0}}) == {}


@pytest.mark.parametrize("node", [
    {"loss": {"alpha": 0.1, "window": {"lo": 1, "hi": 2}}, "+loss": {"window": {"hi": 3}}},
    {"max_steps": 2, "+extra": {}},
    {"+validation": {"every_n_steps": 1, "dataset": {"path": "d"}}},
])
def test_plus_keys_merge_as_omegaconf_does_and_name_each_leaf(node):
    merged, paths = plus_keys(node)
    plain = OmegaConf.create({k: v for k, v in node.items() if not k.startswith("+")})
    plus = OmegaConf.create({k[1:]: v for k, v in node.items() if k.startswith("+")})
    assert merged == OmegaConf.to_container(OmegaConf.merge(plain, plus))  # the reference
    leaves = [f"+{k}" for k in OmegaConf.to_container(plus)]
    want = {"+loss": ["+loss.window.hi"], "+extra": ["+extra"],
            "+validation": ["+validation.every_n_steps", "+validation.dataset.path"]}
    assert paths == [p for leaf in leaves for p in want[leaf]]


@pytest.mark.parametrize("name", ["Disk", "Stdout"])
def test_a_key_a_logger_drops_is_refused(name):
    """torchtune's DiskLogger and StdoutLogger take **kwargs and drop them: metric_logger.filname=x was ignored."""
    from torchtune_longshort.config.fields import build_section
    from torchtune_longshort.training.recipe_config.components import MetricLoggerConfig

    node = {"_component_": f"torchtune.training.metric_logging.{name}Logger", "log_dir": "/tmp", "filname": "x"}
    with pytest.raises(ConfigKeyError, match=r"^unknown config key\(s\) in metric_logger: 'metric_logger.filname'"):
        build_section(MetricLoggerConfig, node, "metric_logger")
