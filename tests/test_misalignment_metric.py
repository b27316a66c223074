"""The Eq. 4 metric: explicit suffix runs, a closed form for a context-free model, the CLI end to end."""

import json
import math

import pytest
import torch

from torchtune_longshort.metrics import misalignment_metric, suffix_misalignment, summarize


class LastTokenModel(torch.nn.Module):
    """Next-token logits depend only on the last token: every suffix gives the same distribution."""

    def __init__(self, vocab=13):
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Embedding(vocab, vocab)

    def forward(self, tokens):
        return self.table(tokens)


def test_context_free_model_has_closed_form_misalignment():
    model = LastTokenModel()
    seqs = [torch.randint(0, 13, (40,)) for _ in range(10)]
    res = misalignment_metric(model, seqs, length=32, progress=False)
    for seq, (l1, l2), s in zip(seqs, res.pairs, res.values["sce"]):
        assert 16 <= l1 <= 32 and 16 <= l2 <= 32
        p = torch.softmax(model.table.weight[seq[-1]].double(), -1)
        assert s == pytest.approx(-2 * (p * p.log()).sum().item(), rel=1e-5)  # SCE(p, p) = 2 H(p)
    assert max(abs(v) for v in res.values["jeffreys"]) < 1e-6
    assert max(abs(v) for v in res.values["js"]) < 1e-6
    # a divergence named twice (`--divergences js js`) appended each sample twice: n 20 of 10 sequences, the interval
    # narrowed as if it were real
    twice = misalignment_metric(model, seqs, length=32, divergences=["js", "sce", "js"], progress=False)
    assert list(twice.values) == ["js", "sce"] and twice.summary["js"]["n"] == twice.num_samples == 10
    assert twice.values["sce"] == res.values["sce"]


def test_suffix_lengths_are_drawn_from_both_ends_of_eq4s_inclusive_range():
    """Eq. 4 draws l1, l2 from [L/2, L] with both ends: a draw that left out L (or L/2) still passed the range check
    above. At L = 4 every one of 2, 3, 4 must come up in 60 seeded draws."""
    seqs = [torch.randint(0, 13, (6,)) for _ in range(30)]
    res = misalignment_metric(LastTokenModel(), seqs, length=4, progress=False)
    assert {l1 for l1, _ in res.pairs} == {l2 for _, l2 in res.pairs} == {2, 3, 4}


def test_suffix_misalignment_equals_explicit_runs(tiny_llama2_dir):
    from torchtune_longshort.models import load_hf_checkpoint

    model = load_hf_checkpoint(tiny_llama2_dir, plain_rope=True)
    torch.manual_seed(0)
    tokens = torch.randint(0, 512, (64,))
    got = suffix_misalignment(model, tokens, 40, 64)
    with torch.no_grad():
        p = torch.softmax(model(tokens[-40:][None])[0, -1].double(), -1)
        q = torch.softmax(model(tokens[None])[0, -1].double(), -1)
    want_sce = -((q * p.log()).sum() + (p * q.log()).sum()).item()
    want_j = ((p - q) * (p.log() - q.log())).sum().item()
    assert got["sce"] == pytest.approx(want_sce, rel=1e-5)
    assert got["jeffreys"] == pytest.approx(want_j, rel=1e-4, abs=1e-7)
    assert got["jeffreys"] > 0  # a real transformer is not length invariant


def test_a_decoder_set_up_for_the_loss_or_chunked_gives_the_metric_of_its_logits(tiny_llama2_dir):
    """Mid-training a decoder returns hidden states (``LongShortLoss.set_model_output``): the metric read them as
    logits and returned another number without a word (8.72 -> 7.27 SCE on a tiny llama2). The reference: the
    plain decoder's full logits through a callable (the metric's generic path)."""
    from torchtune_longshort.hidden_states import returns_hidden_states
    from torchtune_longshort.loss import LongShortLoss, restore_model_output
    from torchtune_longshort.models import load_hf_checkpoint

    model = load_hf_checkpoint(tiny_llama2_dir, plain_rope=True)
    torch.manual_seed(0)
    seqs = [torch.randint(0, 512, (64,)) for _ in range(3)]
    want = misalignment_metric(lambda t: model(t), seqs, length=64, progress=False).values
    LongShortLoss().set_model_output(model)
    got = misalignment_metric(model, seqs, length=64, progress=False).values
    assert returns_hidden_states(model)  # left as the training loop set it
    restore_model_output(model)
    model.set_num_output_chunks(4)
    chunked = misalignment_metric(model, seqs, length=64, progress=False).values
    for d in want:
        assert got[d] == pytest.approx(want[d], rel=1e-5, abs=1e-7), d
        assert chunked[d] == pytest.approx(want[d], rel=1e-5, abs=1e-7), d


def test_summary_statistics():
    """The 95% interval is Student's t (scipy's own interval of the mean), not z = 1.96: at n = 8 the normal one is
    17% narrower."""
    from scipy import stats

    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert s["mean"] == 2.5 and s["std"] == pytest.approx(math.sqrt(5 / 3))
    values = [0.3, 0.1, 0.4, 0.15, 0.9, 0.26, 0.53, 0.58]
    s = summarize(values)
    lo, hi = stats.t.interval(0.95, df=7, loc=s["mean"], scale=stats.sem(values))
    assert (s["ci95_low"], s["ci95_high"]) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
    assert 1.96 * s["se"] / (hi - s["mean"]) == pytest.approx(0.829, abs=1e-3)


def test_one_sample_has_no_interval():
    """--num-samples 1 wrote std 0 and the 95% CI [x, x] (a point known exactly); one value has no spread: None,
    and the command's line says why instead of printing a zero-width interval."""
    from torchtune_longshort.metrics.misalignment import summary_line

    s = summarize([2.0])
    assert s["mean"] == 2.0 and s["n"] == 1
    assert s["std"] is s["se"] is s["ci95_low"] is s["ci95_high"] is None
    line = summary_line("sce", s)
    assert "95% CI: none (n=1" in line and "[" not in line
    # 2 +- 12.706, cut at 0: a divergence is never negative (it printed [-10.70620, ...])
    assert summary_line("sce", summarize([1.0, 3.0])).endswith("95% CI [0.00000, 14.70620]  n=2")


def test_bad_inputs():
    model = LastTokenModel()
    with pytest.raises(ValueError, match="max_len=32"):
        misalignment_metric(model, [torch.zeros(10, dtype=torch.long)], length=32, progress=False)
    with pytest.raises(ValueError, match="l1=50"):
        suffix_misalignment(model, torch.zeros(20, dtype=torch.long), 50, 10)
    with pytest.raises(ValueError, match="divergence"):
        misalignment_metric(model, [], length=32, divergences=["kl"], progress=False)


def test_python_callers_bad_arguments_are_refused_naming_them_before_any_forward():
    """Each was a torch error, a wrong reason or a wrong number: num_samples=0 'no sequences were given', a float
    sequence cast to token 0 and measured, divergences="sce" read letter by letter, device="cuda" on a CPU machine
    an AssertionError inside torch, an id past a decoder's embedding table an IndexError."""
    from torchtune.models.llama2 import llama2

    model, seqs = LastTokenModel(), [torch.randint(0, 13, (40,)) for _ in range(3)]
    run = lambda **kw: misalignment_metric(**{"model": model, "sequences": seqs, "length": 32,  # noqa: E731
                                              "progress": False, **kw})
    for bad in (0, -1, 2.0):
        with pytest.raises(ValueError, match=rf"^num_samples={bad!r} must be an int >= 1"):
            run(num_samples=bad)
    with pytest.raises(ValueError, match=r"^sequence 0 has dtype torch.float32: expected integer token ids"):
        run(sequences=[torch.rand(40)])
    with pytest.raises(ValueError, match=r"^divergences=\[\] names none"):
        run(divergences=[])
    for bad in ("a", True):  # a bool is no seed (True read as 1)
        with pytest.raises(ValueError, match=rf"^seed={bad!r} must be an int"):
            run(seed=bad)
    for bad in (2**64, -2**63 - 1):  # torch.Generator.manual_seed's own range, past which it overflowed
        with pytest.raises(ValueError, match=rf"^seed={bad} is out of range: give an integer in \[-2\*\*63, 2\*\*64\)"):
            run(seed=bad)
    from torchtune_longshort.metrics.misalignment import check_seed

    for edge in (-2**63, 2**63, 2**64 - 1):  # the range's own ends, which torch takes
        torch.Generator().manual_seed(edge)
        check_seed(edge, "seed")
    with pytest.raises(ValueError, match=r"^device='tpu': not a device name"):
        run(device="tpu")
    one = run(divergences="sce")
    assert list(one.values) == ["sce"] and one.values["sce"] == run().values["sce"]
    decoder = llama2(vocab_size=13, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=8, max_seq_len=64)
    with pytest.raises(ValueError, match=r"^sequence 1 holds token ids in \[13, 13\], outside the model's "
                                         r"vocabulary \[0, 13\): tokenize with the model's own tokenizer"):
        run(model=decoder, sequences=[seqs[0], torch.full((40,), 13)])


def test_cli_end_to_end(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, monkeypatch):
    """The JSON holds what a reader needs to repeat the run: before, it had no seed (``--seed 3`` and ``--seed 0``
    wrote the same settings), no RoPE spec, and the checkpoint folder as typed (``"tiny"``, relative to a cwd the
    file does not record)."""
    from torchtune_longshort.metrics.cli import main
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder

    out = tmp_path / "m.json"
    out.write_text(json.dumps({k: {} for k in ("length", "summary", "values", "provenance")}))  # an earlier result
    monkeypatch.chdir(tiny_llama2_dir.parent)
    rc = main(["--checkpoint-dir", tiny_llama2_dir.name, "--tokenizer", str(sp_tokenizer_dir / "tokenizer.model"),
               "--data", "stdlib", "--length", "64", "--num-samples", "6", "--seed", "3", "--output", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["seed"] == 3 and res["checkpoint_dir"] == str(tiny_llama2_dir.resolve())
    assert res["rope_scaling"] == CheckpointFolder.open(tiny_llama2_dir).rope_spec
    assert (res["data"], res["text_field"], res["split"]) == ("stdlib", None, None)  # neither applies to stdlib
    assert res["num_samples"] == 6 and set(res["summary"]) == {"sce", "jeffreys", "js"}
    vals = res["values"]["sce"]
    assert res["summary"]["sce"]["mean"] == pytest.approx(sum(vals) / len(vals))
    assert res["provenance"]["device"]["type"] == "cpu"
    assert len(res["provenance"]["stdlib_corpus"]["sha256"]) == 64  # --data stdlib


def test_cli_data_takes_the_held_out_stdlib_parts():
    """`--data stdlib_tests` / `stdlib_heldout`, the eval pack's names for the text a training corpus holds out, were
    taken for hub data sets ("Couldn't reach 'stdlib_tests' on the Hub"), so a run trained on the stdlib could only
    be measured on its own training files. Reference: the training corpora's files (include_tests False, split
    train), which the held-out parts must not share."""
    from torchtune_longshort.data.stdlib_corpus import stdlib_source_files
    from torchtune_longshort.metrics.cli import data_kind, documents_for

    for name in ("stdlib", "stdlib_tests", "stdlib_heldout"):
        assert data_kind(name) == "stdlib"
    files = {n: set(documents_for(n, "text", "test").files) for n in ("stdlib", "stdlib_tests", "stdlib_heldout")}
    assert files["stdlib"] == set(stdlib_source_files(include_tests=True))
    train = set(stdlib_source_files(include_tests=False))
    held_out = files["stdlib_tests"]
    assert held_out and not held_out & train and held_out | train == files["stdlib"]
    assert files["stdlib_heldout"] and not files["stdlib_heldout"] & set(stdlib_source_files(split="train"))


@pytest.mark.parametrize("data, extra", [("stdlib", ["--text-field", "body"]), ("stdlib", ["--split", "train"]),
                                         ("stdlib", ["--skip-bad-records"]), ("LOCAL", ["--split", "train"])])
def test_cli_refuses_an_option_its_data_does_not_read(tmp_path, capsys, data, extra):
    # `--data stdlib --text-field body` measured the stdlib without a word (an audit); --split of a local file too
    from torchtune_longshort.metrics.cli import main

    (tmp_path / "d.jsonl").write_text('{"text": "x"}\n')
    data = data.replace("LOCAL", str(tmp_path / "d.jsonl"))
    with pytest.raises(SystemExit) as exit_info:
        main(["--checkpoint-dir", str(tmp_path / "not_read"), "--data", data, "--length", "64", *extra])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert f"error: {extra[0]} does not apply to --data={data!r}" in err and f"drop {extra[0]}" in err, err


@pytest.mark.parametrize("what", ["user_file", "folder", "link_to_nothing"])
def test_cli_refuses_an_output_it_would_overwrite_before_loading(tiny_llama2_dir, tmp_path, capsys, what):
    # `longshort-misalignment ... --output user.json` overwrote the user's own file; `--output DIR` failed after the
    # whole measurement with a raw "[Errno 21] Is a directory"; a symbolic link to nothing (exists() is False) was
    # replaced by the result. Now each is refused in one line before anything runs.
    from torchtune_longshort.metrics.cli import main

    out = tmp_path / "user.json"
    {"folder": out.mkdir, "user_file": lambda: out.write_text('{"mine": 1}'),
     "link_to_nothing": lambda: out.symlink_to(tmp_path / "gone.json")}[what]()
    with pytest.raises(SystemExit) as exit_info:
        main(["--checkpoint-dir", str(tiny_llama2_dir), "--data", str(tmp_path / "absent.jsonl"), "--length", "64",
              "--output", str(out)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "--output=" in err and "Traceback" not in err, err
    assert {"folder": out.is_dir, "user_file": lambda: out.read_text() == '{"mine": 1}',
            "link_to_nothing": out.is_symlink}[what]()


def test_cli_data_messages_name_its_own_options(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, capsys):
    """A bad record in ``--data`` and data too short for ``--num-samples``: each refusal names this command's
    options. They said "Set dataset.text_field", "skip such records with dataset.skip_bad_records=True" (a config's
    keys; the command had no way to skip) and "validation: the source ... holds only 8 sequences". With
    ``--skip-bad-records`` the record is skipped: the values equal those of the file without it, and the result
    records the count."""
    from torchtune_longshort.metrics.cli import main

    doc = '{"text": "' + "def f(x):\\n    return x + 1\\n" * 40 + '"}\n'
    (tmp_path / "bad.jsonl").write_text('{"body": "no text"}\n' + doc * 6)  # first: the sequences read pass it
    (tmp_path / "good.jsonl").write_text(doc * 6)
    base = ["--checkpoint-dir", str(tiny_llama2_dir), "--tokenizer", str(sp_tokenizer_dir / "tokenizer.model"),
            "--length", "64", "--num-samples", "4"]

    def refused(*extra):
        with pytest.raises(SystemExit) as exit_info:
            main([*base, *extra])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert "dataset." not in err and "validation" not in err, err
        return err

    err = refused("--data", str(tmp_path / "bad.jsonl"))
    assert "bad.jsonl:1: no text field 'text'" in err and "Set --text-field to one of them" in err
    assert err.rstrip().endswith("skip such records with --skip-bad-records")
    err = refused("--data", str(tmp_path / "good.jsonl"), "--num-samples", "500")
    assert err.startswith("longshort-misalignment: error: --num-samples=500 at --length=64: ") and "--data" in err

    results = {}
    for name, extra in (("skipped", ["--skip-bad-records"]), ("good", [])):
        out = tmp_path / f"{name}.json"
        data = tmp_path / ("bad.jsonl" if name == "skipped" else "good.jsonl")
        assert main([*base, "--data", str(data), *extra, "--output", str(out)]) == 0
        results[name] = json.loads(out.read_text())
    assert results["skipped"]["values"] == results["good"]["values"]
    # the result says what was left out of it: the one record without a text field, and none from the good file
    assert (results["skipped"]["records_skipped"], results["good"]["records_skipped"]) == (1, 0)


def test_one_suffix_length_for_both_contexts_is_taken():
    """min_len == max_len (one context length: l1 == l2) is in the range 1 <= min_len <= max_len; the reference:
    the same distribution on both sides, so Jeffreys and JS are 0 and SCE is twice its entropy (Eq. 3)."""
    model = LastTokenModel()
    seqs = [torch.randint(0, 13, (24,), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    res = misalignment_metric(model, seqs, length=32, min_len=20, max_len=20, progress=False)
    assert res.pairs == [[20, 20]] * 3 and max(res.values["jeffreys"] + res.values["js"]) == 0.0
    for seq, s in zip(seqs, res.values["sce"]):
        p = torch.softmax(model.table.weight[seq[-1]].double(), -1)
        assert s == pytest.approx(-2 * (p * p.log()).sum().item(), rel=1e-5)


@pytest.mark.parametrize("suffix, row", [(".ndjson", '{"text": "a"}\n'), (".tsv", "text\na\n"),
                                         (".jsonl", '{"text": "a"}\n')])
def test_cli_data_a_missing_data_file_is_named_missing_not_tried_on_the_hub(tmp_path, monkeypatch, suffix, row):
    """A missing `--data books.ndjson` (or `books.tsv`) was tried on the hub ("Couldn't reach 'books.ndjson' on the
    Hub") where a missing `books.jsonl` was named missing: the command kept its own list of file suffixes. Reference:
    datasets itself reads a folder holding such a file as local data (its packaged builder for the suffix)."""
    import datasets

    from torchtune_longshort.data import corpus
    from torchtune_longshort.metrics.cli import documents_for

    (tmp_path / "here").mkdir()
    (tmp_path / "here" / f"books{suffix}").write_text(row)
    assert datasets.load_dataset(str(tmp_path / "here"), split="train")[0] == {"text": "a"}  # a local data file
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(corpus, "hf_text", lambda *a, **k: pytest.fail("a missing local file was tried on the hub"))
    with pytest.raises(FileNotFoundError, match=f"--data='books{suffix}': no such file or folder"):
        documents_for(f"books{suffix}", "text", "test")


def test_cli_refuses_a_seed_torch_cannot_take_before_loading(tmp_path, capsys):
    # `--seed 99999999999999999999` loaded the model, then said "Overflow when unpacking long long" (two lines)
    from torchtune_longshort.metrics.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--checkpoint-dir", str(tmp_path / "not_read"), "--length", "64", "--seed", str(2**64)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err == (f"longshort-misalignment: error: --seed={2**64} is out of range: give "
                                                 "an integer in [-2**63, 2**64) (torch.Generator's seeds), e.g. 0\n")
