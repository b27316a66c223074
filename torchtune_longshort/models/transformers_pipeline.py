"""A ``tokenizer.json`` read as transformers reads its folder: for a model family whose ``AutoTokenizer`` builds
its own class whatever the folder's files say (``ModelFamily.hf_tokenizer_class``), the pipeline that class builds
(:func:`as_transformers_builds_it`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict

from torchtune_longshort.launcher import launched_rank
from torchtune_longshort.models.families import family_of
from torchtune_longshort.models.family_builders import UnsupportedModelError

logger = logging.getLogger(__name__)

# tokenizer.json files whose switch to transformers' pipeline was said (once per process: eval loads a tokenizer
# several times)
_SAID: set = set()


def _pipeline(tok) -> tuple:
    spec = json.loads(tok.to_str())
    return spec.get("normalizer"), spec.get("pre_tokenizer"), spec.get("decoder")


def as_transformers_builds_it(tok, path: Path, config: Dict[str, Any]):
    """``tok`` (the file's pipeline), or the one ``AutoTokenizer`` builds for the folder when its model family says
    transformers builds its own class whatever the folder's files say (``ModelFamily.hf_tokenizer_class``:
    transformers 5 gives every ``qwen2`` folder ``Qwen2Tokenizer``'s split regex and NFC) and that pipeline differs
    from the file's: the ids training, the ``longshort`` model and lm-eval's ``hf`` use are then the same.
    ``config``: the folder's ``config.json`` (``{}`` when it has none)."""
    try:
        cls = family_of(config, str(Path(path).parent / "config.json")).hf_tokenizer_class if config else None
    except UnsupportedModelError:
        cls = None
    if cls is None:
        return tok
    from transformers import AutoTokenizer

    built = AutoTokenizer.from_pretrained(str(path.parent))
    backend = getattr(built, "backend_tokenizer", None)
    if type(built).__name__ != cls or backend is None or _pipeline(backend) == _pipeline(tok):
        return tok
    if str(path) in _SAID:
        return backend
    _SAID.add(str(path))
    if launched_rank() == 0:  # every process of a launch loads the tokenizer: said once
        logger.warning("%s: transformers' AutoTokenizer reads a %r folder as %s, whose pre-tokenizer / normalizer "
                       "differ from this tokenizer.json's own; tokenizing as transformers does (the ids lm-eval's "
                       "hf and every transformers user get)", path, config.get("model_type"), cls)
    return backend
