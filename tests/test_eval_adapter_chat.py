"""The ``longshort`` lm-eval model's chat templates against transformers' own: the tokenizer's template rendered or
refused before the model loads, a named template picked as hf picks it, and a tokenizer folder of its own code read
without running it. Split from test_eval_adapter.py."""

from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")

from test_eval_adapter import _lm  # noqa: E402

CHAT = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}")
TOOL = "{% for m in messages %}TOOL:{{ m['content'] }}{% endfor %}"


def test_apply_chat_template_renders_the_tokenizers_own_template_or_is_refused_before_the_model_loads(
        tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """``--apply_chat_template`` with ``--model longshort`` was a NotImplementedError traceback after the model
    loaded. The tokenizer folder's template renders as transformers (lm-eval's ``hf``) renders it; a folder without
    one is refused in one line by the wrapper's argument check, before any weight is read, unless no task of the run
    applies it."""
    import shutil

    from transformers import AutoTokenizer

    from torchtune_longshort.eval.cli_run import check_arguments

    with_chat = tmp_path / "tok"
    shutil.copytree(sp_tokenizer_dir, with_chat)
    (with_chat / "chat_template.jinja").write_text(CHAT)
    lm = _lm(tiny_llama2_dir, with_chat)
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    expected = AutoTokenizer.from_pretrained(str(with_chat)).apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True)
    assert lm.chat_template(True) == CHAT and lm.chat_template(False) is None
    assert lm.apply_chat_template(chat) == expected == "<system>be brief</system><user>2+2?</user><assistant>"
    argv = ["run", "--model", "longshort", "--model_args", f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}",
            "--tasks", "longshort_passkey", "--device", "cpu", "--apply_chat_template"]
    with pytest.raises(ValueError, match="has no chat template"):
        check_arguments(argv)
    check_arguments(argv[:-1] + ["--apply_chat_template", "False"])  # off: nothing to refuse
    check_arguments([a if not a.startswith("pretrained=") else f"pretrained={tiny_llama2_dir},tokenizer={with_chat}"
                     for a in argv])
    # a run whose every task ignores the option (longshort_ppl sizes its own context) needs no template: it was
    # refused, by the check and by the model when lm-eval asked it for the results file; hf answers None there
    check_arguments([a if a != "longshort_passkey" else "longshort_ppl" for a in argv])
    with pytest.raises(ValueError, match="has no chat template"):
        check_arguments([a if a != "longshort_passkey" else "longshort_ppl,longshort_passkey" for a in argv])
    # lm-eval's hf: transformers' "Cannot use chat template functions" came after the model loaded, naming no fix
    hf = [a if a != "longshort" else "hf" for a in argv]
    with pytest.raises(ValueError, match=rf"the tokenizer at {sp_tokenizer_dir} has no chat template"):
        check_arguments(hf)
    check_arguments([a if not a.startswith("pretrained=") else f"pretrained={tiny_llama2_dir},tokenizer={with_chat}"
                     for a in hf])
    check_arguments([a if a != "longshort_passkey" else "longshort_ppl" for a in hf])
    plain = _lm(tiny_llama2_dir, sp_tokenizer_dir)
    assert plain.chat_template(True) is None
    with pytest.raises(ValueError, match="has no chat template"):
        plain.apply_chat_template(chat)


@pytest.mark.parametrize("folder", ["named", "single"])
def test_apply_chat_template_name_picks_the_template_hf_picks(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, caplog,
                                                              folder):
    """``--apply_chat_template <name>`` with ``--model longshort`` was silently unused (the whole dict of named
    templates went to the results file). Now the template picked is lm-eval ``hf``'s (``TemplateLM.chat_template``
    on transformers' tokenizer of the same folder): the named one of a tokenizer with named templates, which the
    prompts render through, an unknown name refused (before the model loads too); a single template with one
    warning, as hf warns."""
    import logging
    import shutil
    from types import SimpleNamespace

    from lm_eval.api.model import TemplateLM
    from transformers import AutoTokenizer

    from torchtune_longshort.eval.cli_run import check_arguments

    tok = tmp_path / "tok"
    shutil.copytree(sp_tokenizer_dir, tok)
    (tok / "chat_template.jinja").write_text(CHAT)
    tool = TOOL
    if folder == "named":
        (tok / "additional_chat_templates").mkdir()
        (tok / "additional_chat_templates" / "tool_use.jinja").write_text(tool)
    hf = SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(str(tok)))  # what lm-eval's hf picks from
    lm = _lm(tiny_llama2_dir, tok)
    chat = [{"role": "user", "content": "2+2?"}]
    name = "tool_use" if folder == "named" else "foo"
    with caplog.at_level(logging.WARNING):
        assert lm.chat_template(name) == TemplateLM.chat_template(hf, name) == (tool if folder == "named" else CHAT)
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("torchtune_longshort")]
    theirs = [r.getMessage() for r in caplog.records if r.name.startswith("lm_eval")]
    assert len(ours) == len(theirs) == (0 if folder == "named" else 1), caplog.records
    assert lm.apply_chat_template(chat) == ("TOOL:2+2?" if folder == "named" else "<user>2+2?</user><assistant>")
    assert TemplateLM.chat_template(hf, True) == CHAT  # the default, when no name is given
    # asked again without a name (the model of an earlier run, in lm-eval's simple_evaluate): the default, recorded
    # and rendered (the earlier name stayed: its template was recorded and rendered where hf records the default)
    assert lm.chat_template(True) == CHAT and lm.apply_chat_template(chat) == "<user>2+2?</user><assistant>"
    argv = ["run", "--model", "longshort", "--model_args", f"pretrained={tiny_llama2_dir},tokenizer={tok}",
            "--tasks", "longshort_passkey", "--device", "cpu", "--apply_chat_template", "nope"]
    if folder == "single":
        check_arguments(argv)  # hf warns and uses the template
        return
    with pytest.raises(ValueError, match="not available"):
        TemplateLM.chat_template(hf, "nope")
    with pytest.raises(ValueError, match=r"--apply_chat_template nope: .* no chat template named 'nope': give one of "
                                         r"\['default', 'tool_use'\]"):
        lm.chat_template("nope")
    lm.chat_template("tool_use")
    with pytest.raises(ValueError, match="no chat template named 'nope'"):
        lm.chat_template("nope")
    assert lm.apply_chat_template(chat) == "TOOL:2+2?"  # the refused name changed nothing
    assert _lm(tiny_llama2_dir, tok).chat_template(True) == CHAT  # no name: the default, as hf
    for model in ("longshort", "hf"):  # refused before any weight is read (hf raised once the model had loaded)
        with pytest.raises(ValueError, match="no chat template named 'nope'"):
            check_arguments([a if a != "longshort" else model for a in argv])
    check_arguments(argv[:-1] + ["tool_use"])


def test_a_chat_template_of_a_tokenizer_of_its_own_code_is_not_asked_about_nor_run(tmp_path, monkeypatch):
    """``--apply_chat_template`` with a tokenizer folder whose tokenizer is its own code (``auto_map``): the
    pre-checks (``longshort-eval``'s, for longshort and hf) and the longshort model asked transformers, which put
    ``Do you wish to run the custom code? [y/N]`` on the console and waited 15 s, twice (a "y" ran the folder's
    code); e1f377c fixed it for the chat template's tokens only. The folder is now read without running its code:
    its templates from the files (it was then refused as having no chat template), rendered as transformers renders
    them for the same folder with its tokenizer as transformers' own class."""

    from family_checkpoints import as_transformers_class, own_code_tokenizer
    from transformers import AutoTokenizer

    from torchtune_longshort.eval.model.chat import lacks_template, render, select_template, template_tokenizer

    own_code_tokenizer(tmp_path, chat_template=[{"name": "default", "template": "{{ bos_token }}" + CHAT},
                                                {"name": "tool_use", "template": TOOL}])
    asked = []
    monkeypatch.setattr("builtins.input", lambda *a: asked.append(a) or "n")
    chat = template_tokenizer(tmp_path)
    assert lacks_template(tmp_path) is False and not asked, asked
    hf = AutoTokenizer.from_pretrained(str(as_transformers_class(tmp_path, tmp_path / "reference")))
    assert chat.chat_template == hf.chat_template
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"},
               {"role": "assistant", "content": "4"}]
    for name in (None, "tool_use"):
        template, _ = select_template(chat.chat_template, name, tmp_path)
        for prompt in (True, False):  # the generation prompt, or continuing the last message
            expected = hf.apply_chat_template(history, tokenize=False, add_generation_prompt=prompt,
                                              continue_final_message=not prompt, chat_template=template)
            assert render(chat, history, prompt, template) == expected
    assert render(chat, history, False, chat.chat_template["default"]) == (
        "<s><system>be brief</system><user>2+2?</user><assistant>4")


@pytest.mark.parametrize("layout", ["config_list", "template_files"])
def test_named_templates_without_a_default_of_an_own_code_folder_are_picked_as_hf_picks(tmp_path, layout):
    """A tokenizer folder of its own code (``auto_map``) whose named templates have no ``default`` (a
    ``tokenizer_config.json`` list of them, or ``additional_chat_templates/<name>.jinja`` only): ``longshort-eval
    --apply_chat_template tool_use`` was refused, as lacking ``default`` ("transformers refuses it too") or as having
    no chat template, where transformers holds them and lm-eval's ``hf`` picks ``tool_use``. The reference: lm-eval's
    ``TemplateLM.chat_template`` on transformers' tokenizer of the same files, its class transformers' own."""
    import json
    import shutil
    from types import SimpleNamespace

    from family_checkpoints import own_code_tokenizer
    from lm_eval.api.model import TemplateLM
    from transformers import AutoTokenizer

    from torchtune_longshort.eval.model.chat import lacks_template, select_template, template_tokenizer

    own = tmp_path / "own"
    own.mkdir()
    if layout == "config_list":
        own_code_tokenizer(own, chat_template=[{"name": "tool_use", "template": TOOL}])
    else:
        own_code_tokenizer(own)
        (own / "additional_chat_templates").mkdir()
        (own / "additional_chat_templates" / "tool_use.jinja").write_text(TOOL)
    reference = tmp_path / "reference"
    shutil.copytree(own, reference)
    config = json.loads((own / "tokenizer_config.json").read_text())
    del config["auto_map"]
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (reference / "tokenizer_config.json").write_text(json.dumps(config))
    hf = SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(str(reference)))
    chat = template_tokenizer(own)
    assert chat is not None and not lacks_template(own)
    assert select_template(chat.chat_template, "tool_use", own)[0] == TemplateLM.chat_template(hf, "tool_use") == TOOL
    with pytest.raises(ValueError):  # no name, no default: lm-eval's hf refuses too
        TemplateLM.chat_template(hf, True)
    with pytest.raises(ValueError, match=r"no chat template named 'default': give one of \['tool_use'\]"):
        select_template(chat.chat_template, None, own)
