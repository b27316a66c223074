"""longshort-eval run ... --tasks longshort_ppl at its default source (PG19 from the hub), with no network and no
offline variable set, waited out huggingface_hub's retries (5, ~23 s) once per length before each length was NaN
(~2 minutes for the five defaults); a data set found out of reach is now asked once a process, and the other lengths
get the same reason at once."""

import json

import pytest
from hub_subprocess import run_without_hub


# Each length's ask, as longshort_ppl makes it; connections to the unreachable hub counted at the socket (the
# reference: what a wait comes from), huggingface_hub's backoff sleeps skipped to keep the test short.
SCRIPT = r"""
import json, socket, time
time.sleep = lambda s: None
attempts = []
connect = socket.socket.connect
def counted(self, address, *a, **k):
    attempts.append(address)
    return connect(self, address, *a, **k)
socket.socket.connect = counted
from torchtune_longshort.eval.tasks.common.long_text import iter_texts
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError
out = []
for source in ("pg19", "pg19", "pg19"):
    before = len(attempts)
    try:
        next(iter(iter_texts(source=source)))
        out.append(["read", len(attempts) - before])
    except TaskDataError as e:
        out.append([str(e), len(attempts) - before])
print(json.dumps(out))
"""


def test_an_unreachable_hub_is_asked_once_per_data_set(tmp_path):
    out = run_without_hub(SCRIPT, tmp_path, 120, HF_ENDPOINT="http://127.0.0.1:9")
    (first, n1), (second, n2), (third, n3) = json.loads(out.strip().splitlines()[-1])
    assert n1 >= 1 and "the hub cannot be reached from here" in first, (first, n1)
    assert (n2, n3) == (0, 0), (n2, n3)
    assert second == third == f"{first} (asked once in this process, not again for this data set)"


def test_an_error_that_is_no_hub_failure_is_not_remembered(monkeypatch):
    """A parser's ValueError raised while a connection error was handled (its context) passed through on the first
    ask and was remembered: the next ask of the same data set raised TaskDataError with its words ('... (asked once
    in this process ...)') without reading. Only a failure of the source is remembered now (the test above: a hub
    out of reach, worded by the loader as a DataSourceError)."""
    from torchtune_longshort.eval.tasks.common import unavailable

    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(unavailable, "_UNREACHABLE", {})
    asks = []

    def documents():  # the first ask fails as a parser would, the next one reads
        asks.append(1)
        if len(asks) == 1:
            try:
                raise ConnectionError("connection reset")
            except ConnectionError:
                raise ValueError("record 3 is no JSON")
        yield "a document"

    with pytest.raises(ValueError) as first:
        list(unavailable.guard_hub_iteration(documents(), "'my/set'"))
    assert not unavailable.is_hub_failure(first.value) and str(first.value) == "record 3 is no JSON"
    assert list(unavailable.guard_hub_iteration(documents(), "'my/set'")) == ["a document"]  # the reference: it reads
    assert unavailable._UNREACHABLE == {}


def test_another_task_reading_the_data_set_is_told_its_own_fix(monkeypatch):
    """longshort-eval run --tasks longshort_ppl,longshort_passkey --metadata '{"passkey_haystack":"pg19",...}' with
    the hub out of reach (HF_ENDPOINT=http://127.0.0.1:9) told longshort_passkey '... or from local files
    (ppl_data_files=<path or glob> in --metadata, or ppl_source=stdlib) (asked once in this process ...)', keys of
    longshort_ppl, which asked first; the remembered reason is now given to the asks with the same local-data hint."""
    from torchtune_longshort.eval.tasks.common import unavailable

    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)

    def documents():
        raise ConnectionError("Couldn't reach 'my/set' on the Hub")
        yield  # a generator, as a streamed data set is

    def ask(alternative):
        with pytest.raises(unavailable.TaskDataError) as refused:
            list(unavailable.guard_hub_iteration(documents(), "'my/set'", alternative))
        return str(refused.value)

    ppl, passkey = "for local data pass ppl_source=stdlib", "for local data pass passkey_haystack=filler"
    monkeypatch.setattr(unavailable, "_UNREACHABLE", {})
    reference = ask(passkey)  # the reference: passkey asking first, in a process of its own
    monkeypatch.setattr(unavailable, "_UNREACHABLE", {})
    assert "ppl_source" in ask(ppl)
    assert ask(passkey) == reference
    assert ask(passkey) == f"{reference} (asked once in this process, not again for this data set)"
