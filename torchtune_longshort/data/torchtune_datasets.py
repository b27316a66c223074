"""torchtune datasets as a documents source for the dual-window stream.

A torchtune dataset builder (``torchtune.datasets.text_completion_dataset``, or any builder that takes the tokenizer
first and returns a map-style dataset of ``{"tokens": [...], ...}`` samples) plugs into the recipe's ``dataset`` as it
is: each sample's ``tokens`` (BOS + text + EOS, as torchtune tokenizes it) is one document, and
:class:`~torchtune_longshort.data.dual_window.PackedTokenStream` packs them end to end in index order, so a resumed
run reads exactly the same windows.
"""

from __future__ import annotations

import inspect
from typing import Any

from torchtune_longshort.data.corpus import Documents, _Source


def takes_tokenizer(component: Any) -> bool:
    """Whether a dataset component (a callable) is a torchtune-style builder: its first parameter is ``tokenizer``."""
    try:
        params = list(inspect.signature(component).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "tokenizer"


def torchtune_documents(dataset: Any, name: str = "") -> Documents:
    """A documents source over a torchtune dataset's samples (their ``tokens``), in index order.

    Refuses packed datasets (``packed=True``: the stream packs documents itself, across window boundaries) and
    datasets without a ``tokens`` field, naming the dataset.
    """
    what = name or type(dataset).__name__
    if type(dataset).__name__ == "PackedDataset" or getattr(dataset, "packed", False):
        raise ValueError(f"dataset {what}: pass packed=False; the dual-window stream packs the documents itself")
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise ValueError(f"dataset {what}: expected a map-style torchtune dataset (len() and [i]), got {type(dataset)}")
    n = len(dataset)
    if n == 0:
        raise ValueError(f"dataset {what} has no samples")
    first = dataset[0]
    if not isinstance(first, dict) or "tokens" not in first:
        raise ValueError(f"dataset {what}: samples need a 'tokens' field, got {type(first).__name__} "
                         f"{sorted(first) if isinstance(first, dict) else ''}")

    def docs():
        for i in range(n):
            yield list(dataset[i]["tokens"])

    return _Source(docs, f"torchtune dataset {what} ({n} samples)")
