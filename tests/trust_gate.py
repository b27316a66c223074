"""A module of one's own whose import writes a file (the ``marker`` fixture's, in tests/conftest.py): the
independent witness of the trust_remote_code tests (tests/test_trust_*.py) that a checkpoint naming its code by a
dotted path did not import it; and the checkpoint folders that name it."""

from __future__ import annotations

import json
import shutil
import sys

PKG = "gate_pkg"
MODULE = f"{PKG}.mine"
ROPE_PATH, FAMILY_PATH = f"{MODULE}.MyLinear", f"{MODULE}.MYLLAMA"
SOURCE = """
import dataclasses, os
from pathlib import Path
Path(os.environ["GATE_MARKER"]).write_text("imported")  # the top-level side effect a checkpoint must not trigger
from torchtune_longshort.models.families import MODEL_FAMILIES
from torchtune_longshort.rope.linear import LinearRoPE
class MyLinear(LinearRoPE):
    pass
MYLLAMA = dataclasses.replace(MODEL_FAMILIES["llama"])
class Holder:
    MYLLAMA = MYLLAMA
"""


def _imported(marker) -> bool:
    return marker.exists() or MODULE in sys.modules


def _folder_naming(src, dst, **entries):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **entries}))
    return dst


def _linear_scaled(src, dst, method):
    """``src`` linearly scaled x2, as save_hf_checkpoint writes it, its spec naming ``method``."""
    return _folder_naming(src, dst, rope_scaling={"rope_type": "linear", "factor": 2.0},
                          rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
                          longshort_rope={"method": method, "factor": 2.0, "base": 10000.0, "max_seq_len": 512,
                                          "head_dim": 16, "original_max_seq_len": 256})
