"""DivergenceFunctions.load kept a divergence of one's own under its path before probing it and deleted it when the
probe refused it: a lookup in between (another thread's) was handed the unprobed function, which the probe then
refused, and two refusals of the same path could delete it twice (KeyError). It is probed first and kept after."""

from __future__ import annotations

import textwrap
import threading

import pytest

from user_modules import forget_user_module, write_user_module

from torchtune_longshort.loss import divergences

PKG = "probe_order_divs"
PATH = f"{PKG}.mod.slow_wrong_shape"

SOURCE = '''
import threading

probing = threading.Event()  # set by the first call (the probe), which then waits for `release`
release = threading.Event()


def slow_wrong_shape(logits_p, logits_q):
    if not probing.is_set():
        probing.set()
        release.wait(5)
    return logits_p - logits_q  # [..., vocab]: not one value a position, so the probe refuses it
'''


@pytest.fixture
def slow_module(tmp_path, monkeypatch):
    write_user_module(tmp_path, {f"{PKG}/__init__.py": "", f"{PKG}/mod.py": textwrap.dedent(SOURCE)}, monkeypatch)
    forget_user_module(PKG)
    yield
    forget_user_module(PKG)


def test_a_lookup_during_the_probe_is_not_handed_the_unprobed_function(slow_module):
    import importlib

    refused = []

    def first():
        try:
            divergences.divergence_fn(PATH)
        except ValueError as e:
            refused.append(str(e))

    thread = threading.Thread(target=first)
    thread.start()
    mod = importlib.import_module(f"{PKG}.mod")
    try:
        assert mod.probing.wait(5), "the first lookup never called the function"
        kept_while_probing = dict.__contains__(divergences.PER_POSITION, PATH)
        taken_meanwhile = divergences.is_divergence(PATH)  # what a second thread's lookup is told meanwhile
    finally:
        mod.release.set()
        thread.join(10)
    assert not kept_while_probing and not taken_meanwhile
    assert len(refused) == 1 and "gave a torch.float32 tensor of shape [2, 3, 5]" in refused[0]
    assert PATH not in divergences.PER_POSITION
