"""longshort-misalignment says what it measures, and how much, before the model loads: at its default 100 samples
it was silent for the model load and the corpus read (17 s on a loaded 2-core machine with SmolLM2-135M) until
the bar's first draw."""

import pytest

import torchtune_longshort.metrics.cli as cli


class LoadBegan(Exception):
    """Raised where the model load begins: what was printed by then is what the test reads."""


def test_first_line_names_the_count_before_the_model_loads(tiny_llama2_dir, sp_tokenizer_dir, tmp_path,
                                                           monkeypatch, capsys):
    (tmp_path / "d.txt").write_text("def f(x):\n    return x + 1\n" * 200)
    seen = {}

    def recording_load(*a, **k):
        seen["out"], seen["err"] = capsys.readouterr()
        raise LoadBegan

    monkeypatch.setattr(cli, "load_hf_checkpoint", recording_load)
    num_samples, length = 3, 32  # the reference: the numbers given on the command line
    with pytest.raises(LoadBegan):
        cli.main(["--checkpoint-dir", str(tiny_llama2_dir), "--tokenizer", str(sp_tokenizer_dir),
                  "--data", str(tmp_path / "d.txt"), "--length", str(length), "--num-samples", str(num_samples)])
    first = seen["err"].splitlines()[0]
    assert first.startswith("longshort-misalignment: ") and f"{num_samples} samples of {length} tokens" in first
    assert str(tmp_path / "d.txt") in first, first
    assert seen["out"] == ""  # stdout holds the results alone (the summary lines, at the end)
