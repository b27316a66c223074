"""The provenance block: each field equals what an independent look-up gives (sys, torch.__version__, git, a
stdlib hash computed here by walking the folder), and the stdlib hash appears only when the corpus was used."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _fresh(code: str) -> dict:
    """Run ``code`` (which prints one JSON line) in a fresh interpreter: the stdlib-used flag is per process."""
    env = dict(os.environ, PYTHONPATH=str(REPO), LONGSHORT_TEST_FRESH="1")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fields_match_independent_lookups():
    import torch
    import transformers

    from torchtune_longshort import __version__
    from torchtune_longshort.provenance import provenance

    p = provenance(device="cpu", stdlib=False)
    assert p["project"]["version"] == __version__
    assert p["packages"]["torch"] == torch.__version__
    assert p["packages"]["transformers"] == transformers.__version__
    assert p["packages"]["lm_eval"] and p["packages"]["torchtune"]
    assert p["python"]["version"] == "%d.%d.%d" % sys.version_info[:3]
    assert p["python"]["implementation"] == platform.python_implementation()
    assert p["device"]["type"] == "cpu" and p["device"]["count"] == os.cpu_count()
    assert "stdlib_corpus" not in p
    git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if git.returncode == 0:
        assert p["project"]["git_commit"] == git.stdout.strip()
        assert isinstance(p["project"]["git_dirty"], bool)
    json.dumps(p)  # plain JSON


def test_stdlib_hash_equals_a_walk_of_the_stdlib_folder():
    from torchtune_longshort.provenance import provenance

    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for d, dirs, names in os.walk(root):
        rel = Path(d).relative_to(root).parts
        if "site-packages" in rel or "dist-packages" in rel:
            dirs[:] = []
            continue
        files += [Path(d, n) for n in names if n.endswith(".py")]
    h, total = hashlib.sha256(), 0
    for f in sorted(files):
        b = f.read_bytes()
        total += len(b)
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + len(b).to_bytes(8, "little") + b)
    s = provenance(device="cpu", stdlib=True)["stdlib_corpus"]
    assert s == {"sha256": h.hexdigest(), "files": len(files), "bytes": total, "root": str(root)}


def test_stdlib_hash_only_when_the_corpus_was_used():
    # one fresh process (the flag is per process): its provenance before the corpus is imported and used, then after
    got = _fresh("from torchtune_longshort.provenance import provenance; import json; "
                 "before = provenance('cpu'); from torchtune_longshort.data import corpus; corpus.stdlib(limit=2); "
                 "print(json.dumps({'before': before, 'used': provenance('cpu')}))")
    assert "stdlib_corpus" not in got["before"]
    assert len(got["used"]["stdlib_corpus"]["sha256"]) == 64


def test_a_device_this_machine_lacks_is_not_labelled_with_the_cpu(monkeypatch):
    """A report rebuilt on a CPU-only machine from a GPU study's runs once read 'cuda (AMD EPYC ...)': the CPU's model
    name under the GPU's device type."""
    import torch

    from torchtune_longshort.provenance import device_info

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = device_info("cpu")
    cuda = device_info("cuda:0")
    assert cuda["type"] == "cuda" and cuda["count"] == 0
    assert cuda["name"] != cpu["name"] and "not available" in cuda["name"]


def test_a_repository_that_holds_the_package_untracked_is_not_named_the_projects_checkout(tmp_path):
    """``pip install --target .`` at the top of the user's own repository puts the package where a checkout's is;
    that repository's commit was recorded as the project's. Only a repository that tracks the package is named."""
    from torchtune_longshort.provenance import checkout_commit

    root = tmp_path.resolve()
    git = ["git", "-C", str(root), "-c", "user.name=u", "-c", "user.email=u@localhost"]
    (root / "app.py").write_text("X = 1\n")
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "app.py"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "the user's app"], check=True)
    (root / "torchtune_longshort").mkdir()  # what pip install --target . writes there
    (root / "torchtune_longshort" / "__init__.py").write_text("")
    (root / "torchtune_longshort" / "provenance.py").write_bytes((REPO / "torchtune_longshort/provenance.py")
                                                                  .read_bytes())
    assert checkout_commit(root) == {"git_commit": None, "git_dirty": None}
    subprocess.run(git + ["add", "torchtune_longshort"], check=True)  # a checkout: it tracks the package
    subprocess.run(git + ["commit", "-q", "-m", "the project"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert checkout_commit(root) == {"git_commit": head, "git_dirty": False}
