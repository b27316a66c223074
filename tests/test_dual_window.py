"""Dual-window batching: window contents, e ranges, packing, resume, rank slicing, bad input."""

import pytest
import torch

from torchtune_longshort.data import DualWindowBatcher, PackedTokenStream
from torchtune_longshort.windows import parse_e_bound, resolve_e_range


def make_docs(n=20, seed=0, vocab=50):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 40, (n,), generator=g).tolist()  # many shorter than one window
    return [torch.randint(3, vocab, (k,), generator=g).tolist() for k in lengths]


def stream_of(docs, **kw):
    return PackedTokenStream(lambda: iter(docs), **kw)


def test_windows_are_the_first_and_last_L_tokens_of_each_sample():
    docs = make_docs()
    flat = [t for d in docs for t in d]
    L = 16
    batcher = DualWindowBatcher(stream_of(docs), L=L, e_range=(1, "L/2"), batch_size=2, seed=3)
    offset = 0
    for _ in range(4):
        batch = batcher.next_batch()
        e = batch["e"]
        assert 1 <= e <= L // 2
        for i in range(2):
            sample = flat[offset : offset + L + e]
            offset += L + e
            assert batch["tokens_a"][i].tolist() == sample[:L]
            assert batch["tokens_b"][i].tolist() == sample[e : e + L]
            assert batch["labels_a"][i].tolist() == sample[1:L] + [-100]
            assert batch["labels_b"][i].tolist() == sample[e + 1 : e + L] + [-100]


def test_packing_keeps_every_token_in_order_across_epochs():
    docs = make_docs(n=5)
    flat = [t for d in docs for t in d]
    batcher = DualWindowBatcher(stream_of(docs), L=8, e_range=(1, 1), batch_size=1)
    got = []
    while len(got) < 3 * len(flat):
        got += batcher.next_batch()["tokens"][0].tolist()
    assert got[: 3 * len(flat)] == (flat * 3)
    assert batcher.stream.epoch >= 2
    assert batcher.stream.tokens_consumed == len(got)  # the position logs and saves: tokens handed out, not buffered


@pytest.mark.parametrize("rng,L,expected", [
    ((1, "L/2"), 64, (1, 32)), ((1, "L/4"), 64, (1, 16)), (("L/4", "L/2"), 64, (16, 32)),
    ((1, "L"), 64, (1, 64)), ((1, "0.05L"), 4096, (1, 204)), (("3*L/4", "L"), 64, (48, 64)), (("2", 5 + 3), 64, (2, 8)),
])
def test_paper_e_ranges_are_expressible(rng, L, expected):
    assert resolve_e_range(rng, L) == expected


def test_e_draws_cover_the_range_and_are_seeded():
    mk = lambda seed: DualWindowBatcher(stream_of(make_docs()), L=16, e_range=(2, 5), seed=seed)
    a, b, c = mk(0), mk(0), mk(1)
    ea = [a.sample_e() for _ in range(200)]
    assert ea == [b.sample_e() for _ in range(200)]
    assert ea != [c.sample_e() for _ in range(200)]
    assert set(ea) == {2, 3, 4, 5}


def test_resume_gives_the_same_batches():
    docs = make_docs(n=30)
    ref = DualWindowBatcher(stream_of(docs), L=16, batch_size=3, seed=7)
    ref_batches = [ref.next_batch() for _ in range(9)]

    first = DualWindowBatcher(stream_of(docs), L=16, batch_size=3, seed=7)
    for _ in range(4):
        first.next_batch()
    state = first.state_dict()
    resumed = DualWindowBatcher(stream_of(docs), L=16, batch_size=3, seed=999)  # seed is overridden by the state
    resumed.load_state_dict(state)
    for want in ref_batches[4:]:
        got = resumed.next_batch()
        assert got["e"] == want["e"] and got["step"] == want["step"]
        assert torch.equal(got["tokens"], want["tokens"])


def test_ranks_take_disjoint_slices_of_the_same_global_batch():
    docs = make_docs(n=30)
    whole = DualWindowBatcher(stream_of(docs), L=16, batch_size=4, seed=1)
    parts = [DualWindowBatcher(stream_of(docs), L=16, batch_size=2, seed=1, rank=r, world_size=2) for r in range(2)]
    for _ in range(3):
        w = whole.next_batch()
        p = [x.next_batch() for x in parts]
        assert p[0]["e"] == p[1]["e"] == w["e"]
        assert torch.equal(torch.cat([p[0]["tokens"], p[1]["tokens"]]), w["tokens"])


def test_text_documents_are_tokenized_with_bos_and_eos(sp_tokenizer_dir):
    from torchtune.models.llama2 import llama2_tokenizer

    tok = llama2_tokenizer(str(sp_tokenizer_dir / "tokenizer.model"))
    texts = ["def f(x):\n    return x\n", "class A:\n    pass\n"]
    s = PackedTokenStream(lambda: iter(texts), tokenize=lambda t: tok.encode(t, add_bos=True, add_eos=True),
                          vocab_size=tok.vocab_size)
    n = sum(len(tok.encode(t)) for t in texts)
    got = s.take(n)
    assert got[0] == tok.bos_id and got.count(tok.eos_id) == 2
    assert tok.decode(got) .startswith("def f(x):")


def test_bad_inputs():
    docs = make_docs()
    with pytest.raises(ValueError, match="even"):
        DualWindowBatcher(stream_of(docs), L=15)
    with pytest.raises(ValueError, match="even"):
        DualWindowBatcher(stream_of(docs), L=2)
    with pytest.raises(ValueError, match="lo > hi"):
        DualWindowBatcher(stream_of(docs), L=16, e_range=("L/2", "L/4"))
    with pytest.raises(ValueError, match=r"\[1, L=16\]"):
        DualWindowBatcher(stream_of(docs), L=16, e_range=(0, 4))
    with pytest.raises(ValueError, match=r"\[1, L=16\]"):
        DualWindowBatcher(stream_of(docs), L=16, e_range=(1, "2L"))
    with pytest.raises(ValueError, match="not understood"):
        parse_e_bound("half", 16)
    with pytest.raises(ValueError, match=r"e_range bound 'L/0' divides by 0"):  # a ZeroDivisionError
        DualWindowBatcher(stream_of(docs), L=16, e_range=(1, "L/0"))
    with pytest.raises(ValueError, match="outside the model vocabulary"):
        DualWindowBatcher(stream_of(docs, vocab_size=10), L=16).next_batch()
    with pytest.raises(ValueError, match="no documents"):
        DualWindowBatcher(stream_of([]), L=16).next_batch()
    with pytest.raises(ValueError, match="text field"):
        DualWindowBatcher(stream_of([{"content": "x"}]), L=16).next_batch()
    state = DualWindowBatcher(stream_of(docs), L=16).state_dict()
    with pytest.raises(ValueError, match="cannot resume"):
        DualWindowBatcher(stream_of(docs), L=32).load_state_dict(state)
    # a plausible slip each, once a TypeError / AttributeError from inside: one line naming the argument
    with pytest.raises(ValueError, match=r"^e_range=4 must be a pair \[lo, hi\] \(one e for every batch: \[4, 4\]\)"):
        DualWindowBatcher(stream_of(docs), L=16, e_range=4)
    with pytest.raises(TypeError, match=r"^stream must be a PackedTokenStream .* not a list"):
        DualWindowBatcher(docs, L=16)
    from torchtune_longshort.windows import unstack_window_outputs

    with pytest.raises(ValueError, match=r"^the output has 4 rows, not 2 x bsz=3"):
        unstack_window_outputs(torch.zeros(4, 8, 5), 3)
    a, b = unstack_window_outputs([torch.arange(4)[:, None], torch.arange(4)[:, None]], 2)
    assert [c.flatten().tolist() for c in a] == [[0, 1]] * 2 and [c.flatten().tolist() for c in b] == [[2, 3]] * 2


def test_window_bos_writes_bos_over_the_first_token_of_both_windows_only():
    docs = make_docs()
    flat = [t for d in docs for t in d]
    L, bos = 16, 1
    batcher = DualWindowBatcher(stream_of(docs), L=L, e_range=("L", "L"), batch_size=2, bos_id=bos)
    batch = batcher.next_batch()
    assert batch["e"] == L  # disjoint windows: [0, L) and [L, 2L) of each sample
    for i in range(2):
        sample = flat[i * 2 * L : (i + 1) * 2 * L]
        assert batch["tokens_a"][i].tolist() == [bos] + sample[1:L]
        assert batch["tokens_b"][i].tolist() == [bos] + sample[L + 1 : 2 * L]
        assert batch["labels_a"][i].tolist() == sample[1:L] + [-100]  # labels unchanged: BOS is never a target
        assert batch["labels_b"][i].tolist() == sample[L + 1 : 2 * L] + [-100]
        assert batch["tokens"][i].tolist() == sample  # the sample itself is untouched


# ------------------------------------------------------------------ shuffle (torchtune's shuffle: True)
def _map_style(n=23):
    """A torchtune-like map-style dataset whose sample i is the document ``[i + 1] * (i % 3 + 1)``, as the recipe
    reads it (``torchtune_documents``)."""
    from torchtune_longshort.data.torchtune_datasets import torchtune_documents

    samples = [{"tokens": [i + 1] * (i % 3 + 1)} for i in range(n)]
    return samples, torchtune_documents(samples, name="twenty-three samples")


def _tokenize(text):  # local_text's documents: "doc <i> ..." -> i + 1, repeated
    return [int(text.split()[1]) + 1] * (len(text) % 3 + 1)


def _local(tmp_path, kind, n=23):
    """``local_text`` over n documents ``doc <i>``: one JSON-lines file (with a blank line), a JSON array, or a folder
    of text files (one empty, which is not a document)."""
    import json

    from torchtune_longshort.data.corpus import local_text

    texts = [f"doc {i} " + "x" * i for i in range(n)]
    if kind == "jsonl":
        rows = [json.dumps({"text": t}) for t in texts]
        (tmp_path / "d.jsonl").write_text("\n".join(rows[:5] + [""] + rows[5:]) + "\n")
        return local_text(str(tmp_path / "d.jsonl"))
    if kind == "json":
        (tmp_path / "d.json").write_text(json.dumps([{"text": t} for t in texts]))
        return local_text(str(tmp_path / "d.json"))
    for i, t in enumerate(texts):
        (tmp_path / f"{i:03d}.txt").write_text(t)
    (tmp_path / "004b.txt").write_text("  \n")
    return local_text(str(tmp_path))


def _source(kind, tmp_path, n=23):
    return _map_style(n)[1] if kind == "torchtune" else _local(tmp_path, kind, n)


def _documents_read(stream, n_docs):
    """The index of each document ``stream`` reads next, ``n_docs`` of them (document i's tokens are i + 1; None for a
    skipped record)."""
    got = []
    for _ in range(n_docs):
        doc = stream._next_document()
        got.append(doc[0] - 1 if doc else None)
    return got


SOURCES = ["torchtune", "jsonl", "json", "txt"]


@pytest.mark.parametrize("seed,kind", [(0, "torchtune"), (5, "torchtune"), (0, "jsonl"), (0, "json"), (0, "txt")])
def test_shuffle_reads_each_pass_in_torchtunes_distributed_sampler_order(tmp_path, seed, kind):
    """The reference is torch's own sampler, as torchtune's recipes build it for shuffle: True (one process): the
    permutation of pass k is the sampler's after set_epoch(k). A torchtune dataset and local files alike."""
    from torch.utils.data import DistributedSampler

    samples, source = _map_style()[0], _source(kind, tmp_path)
    sampler = DistributedSampler(samples, num_replicas=1, rank=0, shuffle=True, seed=seed)
    expected = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        expected.append(list(sampler))
    assert expected[0] != expected[1] and sorted(expected[0]) == list(range(len(samples)))
    stream = PackedTokenStream(source, tokenize=_tokenize, shuffle_seed=seed)
    assert _documents_read(stream, 2 * len(samples)) == expected[0] + expected[1]
    in_order = PackedTokenStream(source, tokenize=_tokenize)  # off: in order
    assert _documents_read(in_order, len(samples)) == list(range(len(samples)))


def test_a_skipped_record_keeps_its_place_in_a_shuffled_pass(tmp_path):
    from torchtune_longshort.data.corpus import local_text

    (tmp_path / "d.jsonl").write_text("".join(f'{{"text": "doc {i}"}}\n' if i != 3 else '{"text": "doc 3\n'
                                              for i in range(9)))
    source = local_text(str(tmp_path / "d.jsonl"), skip_bad_records=True)
    order = torch.randperm(9, generator=torch.Generator().manual_seed(7)).tolist()
    got = _documents_read(PackedTokenStream(source, tokenize=_tokenize, shuffle_seed=7), 9)
    assert got == [None if i == 3 else i for i in order]


@pytest.mark.parametrize("kind", ["torchtune", "jsonl"])
def test_a_shuffled_stream_resumed_mid_pass_reads_the_uninterrupted_runs_tokens(tmp_path, kind):
    source = _source(kind, tmp_path, 41)

    def batcher(shuffle_seed=3):
        stream = PackedTokenStream(source, tokenize=_tokenize, shuffle_seed=shuffle_seed)
        return DualWindowBatcher(stream, L=8, batch_size=2, seed=1)

    whole = batcher()
    ref = [whole.next_batch() for _ in range(12)]
    first = batcher()
    for _ in range(2):
        first.next_batch()
    state = first.state_dict()
    assert 0 < state["stream"]["docs_consumed"] < 41 and state["stream"]["epoch"] == 0  # stopped mid-pass
    resumed = batcher()
    resumed.load_state_dict(state)
    for want in ref[2:]:  # the rest of pass 0, then the next passes
        got = resumed.next_batch()
        assert torch.equal(got["tokens_a"], want["tokens_a"]) and torch.equal(got["tokens_b"], want["tokens_b"])
    assert resumed.stream.epoch >= 2
    unshuffled = batcher(shuffle_seed=None)
    assert not torch.equal(unshuffled.next_batch()["tokens_a"], ref[0]["tokens_a"])
    with pytest.raises(ValueError, match="cannot resume: the saved data state read documents with shuffle_seed=3, "
                                         "this stream with None"):
        unshuffled.load_state_dict(state)


def test_shuffled_ranks_still_read_disjoint_slices_of_the_one_process_batch():
    _, source = _map_style(41)
    one = DualWindowBatcher(PackedTokenStream(source, shuffle_seed=0), L=8, batch_size=4, seed=2)
    ranks = [DualWindowBatcher(PackedTokenStream(source, shuffle_seed=0), L=8, batch_size=2, seed=2, rank=r,
                               world_size=2) for r in (0, 1)]
    for _ in range(6):
        want = one.next_batch()["tokens_a"]
        got = torch.cat([b.next_batch()["tokens_a"] for b in ranks])
        assert torch.equal(got, want)


def test_shuffle_refuses_a_source_read_as_a_stream_in_one_line():
    with pytest.raises(ValueError, match=r"^shuffle=True: dataset .* is read as a stream.*; set shuffle=False, or "
                                         r"read the data as a map-style dataset") as caught:
        PackedTokenStream(lambda: iter([[1, 2]]), shuffle_seed=0)
    assert "\n" not in str(caught.value)


def test_shuffle_of_a_source_already_in_its_own_seeded_order_names_the_two_orders():
    """corpus.stdlib(shuffle_seed=0) under a shuffled stream was 'read as a stream', with 'read local files or the
    stdlib' as the fix, while the stdlib was the source: the two seeded orders are the reason, one the fix."""
    from torchtune_longshort.data.shuffled import Shuffled

    source = Shuffled(lambda: iter(["a b", "c d", "e f"]), seed=0)
    with pytest.raises(ValueError, match=r"^shuffle=True: dataset .* is already read in one seeded order .*: two "
                                         r"shuffles of the same documents; use one: .*corpus.stdlib\(\)"):
        PackedTokenStream(source, tokenize=lambda t: [1, 2], shuffle_seed=3)
    with pytest.raises(ValueError, match=r"^shuffle_seed='3' must be an int$"):
        PackedTokenStream(source, tokenize=lambda t: [1, 2], shuffle_seed="3")
    with pytest.raises(ValueError, match=r"^seed='x' must be an int$"):  # a RuntimeError in torch's manual_seed
        DualWindowBatcher(PackedTokenStream(lambda: iter([[1, 2]])), L=8, seed="x")
    with pytest.raises(ValueError, match=r"^seed=18446744073709551616 is out of range"):  # torch: "Overflow when
        DualWindowBatcher(PackedTokenStream(lambda: iter([[1, 2]])), L=8, seed=2**64)  # unpacking long long"


def test_the_setup_log_says_what_data_the_run_reads(tmp_path):
    # a run logged the model it built, never what it read: a folder's records, the windows, the samples a step
    import json

    from torchtune_longshort.data.corpus import local_text
    from torchtune_longshort.training.data_setup import data_summary

    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"text": f"doc {i}"}) for i in range(3)) + "\n")
    (tmp_path / "b.txt").write_text("a book")
    docs = local_text(str(tmp_path))
    assert len(list(docs())) == 4  # the records the line counts, read independently
    batcher = DualWindowBatcher(stream_of(make_docs()), L=16, e_range=(1, "L/4"), batch_size=2, world_size=2)
    said = data_summary(docs, batcher, accumulation=2, shuffle=True)
    assert said == (f"Data ready: local_text({str(tmp_path)!r}, 2 files), 4 records, shuffled; windows A = tokens "
                    "[0, 16) and B = [e, 16 + e), e ~ U[1, 4]; 8 samples a step (2 a micro-batch x 2 accumulation "
                    "steps x 2 processes)"), said
    # a source that reads no files (a torchtune dataset) names its samples itself: no second count
    from torchtune_longshort.data.document_source import DocumentSource

    tt = DocumentSource(lambda: iter(()), "torchtune dataset x (3 samples)", count=3, read=lambda indices: iter(()))
    said = data_summary(tt, batcher, accumulation=1, shuffle=False)
    assert said.startswith("Data ready: torchtune dataset x (3 samples); windows"), said
