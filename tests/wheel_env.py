"""An environment where the only ``torchtune_longshort`` is the wheel built from this checkout, as a user installs it.

:func:`build_wheel_env` copies the checkout's files (``git ls-files``: tracked and new, not ignored) into a git
repository of one commit, as a user's clone (the wheel records its commit: ``setup.py``), builds the wheel there with
pip (no build isolation, no index: the suite runs offline), and installs it with pip into a new
virtual environment. The test suite's own venv has an *editable* install of the checkout, whose meta-path finder
(``__editable__...finder``, installed by a ``.pth`` file) resolves ``torchtune_longshort.<child>`` from the checkout
whenever the wheel lacks it: it would hide exactly the fault the wheel test exists to catch. So the new venv sees
the suite venv's third-party packages through a plain path line in a ``.pth`` file: the folder is importable, but
the ``.pth`` files inside it (the editable finder's among them) are not run. torchtune's and lm-eval's console
scripts are written into the new venv with its own interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Sequence

from warm_start import start_zygote

ROOT = Path(__file__).resolve().parents[1]
# Console scripts of the third-party packages the README's commands call.
THIRD_PARTY_SCRIPTS = ("tune", "lm_eval", "lm-eval")


@dataclass
class WheelEnv:
    venv: Path
    wheel: Path
    commit: str  # the commit of the copy it was built from
    work: Path  # a folder outside the checkout to run commands from
    env: Dict[str, str]  # served by a zygote of the venv's own interpreter (tests/warm), the wheel imported in it
    fresh_env: Dict[str, str]  # the same without it: nothing of the checkout on any path
    stop: Callable[[], None]  # stops the zygote

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self, argv: Sequence[str], timeout: float = 600, cwd: Path | None = None,
            fresh: bool | str = False) -> subprocess.CompletedProcess:
        """``argv`` (a console script name is looked up in the venv's ``bin``) from :attr:`work`. ``fresh``: in a
        fresh interpreter with nothing of the checkout on its path, not forked from the zygote; ``"self"``: this
        process fresh (its own import-time output is seen), the ones it starts forked."""
        argv = [str(a) for a in argv]
        if (self.venv / "bin" / argv[0]).is_file():
            argv[0] = str(self.venv / "bin" / argv[0])
        env = self.fresh_env if fresh is True else {**self.env, "LONGSHORT_TEST_FRESH": "self"} if fresh else self.env
        return subprocess.run(argv, cwd=cwd or self.work, env=env, capture_output=True, text=True, timeout=timeout)

    def shell(self, command: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """A README command line as written, run by bash in :attr:`work` with the venv's ``bin`` first on PATH."""
        return subprocess.run(["bash", "-c", command], cwd=self.work, env=self.env, capture_output=True, text=True,
                              timeout=timeout)


def source_files(root: Path = ROOT) -> List[str]:
    """The checkout's files as a clone plus the not yet committed ones would hold them (relative paths)."""
    p = subprocess.run(["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"git ls-files failed in {root}: {p.stderr.strip()}")
    return [f for f in p.stdout.splitlines() if (root / f).is_file()]


def _copy_checkout(dest: Path) -> str:
    """The checkout's files copied to ``dest``, committed there as one commit (its hash returned)."""
    for rel in source_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    git = ["git", "-C", str(dest), "-c", "user.name=suite", "-c", "user.email=suite@localhost"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "a copy of the checkout"]):
        subprocess.run([*git, *args], check=True, capture_output=True, text=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def _write_script(venv_dir: Path, name: str) -> None:
    """The suite venv's console script ``name`` with the new venv's interpreter as its ``#!`` line."""
    src = Path(sys.executable).with_name(name)
    if not src.is_file():
        return
    body = src.read_text().split("\n", 1)[1]
    dst = venv_dir / "bin" / name
    dst.write_text(f"#!{venv_dir / 'bin' / 'python'}\n{body}")
    dst.chmod(0o755)


def build_wheel_env(tmp: Path) -> WheelEnv:
    """Build the wheel from a copy of the checkout and install it into a new venv under ``tmp``."""
    src, dist, venv_dir, work = tmp / "src", tmp / "dist", tmp / "venv", tmp / "work"
    commit = _copy_checkout(src)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(dist),
                    str(src)], check=True, capture_output=True, text=True)
    wheel = next(dist.glob("torchtune_longshort-*.whl"))
    venv.EnvBuilder(with_pip=False, symlinks=True).create(venv_dir)
    purelib = Path(subprocess.run([str(venv_dir / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    # A plain path line: the suite venv's packages import, its .pth files (the editable finder) do not run.
    (purelib / "_suite_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([*pip, "--python", str(venv_dir / "bin" / "python"), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True, text=True)
    for name in THIRD_PARTY_SCRIPTS:
        _write_script(venv_dir, name)
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env = {k: v for k, v in env.items() if k != "LONGSHORT_TEST_ZYGOTE"}
    env.update(PATH=f"{venv_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv_dir),
               PYTHONNOUSERSITE="1", TMPDIR=str(tmp), HF_HOME=str(tmp / "hf_home"))
    warm, stop = start_zygote(tmp, "wheel", env, python=str(venv_dir / "bin" / "python"))
    return WheelEnv(venv=venv_dir, wheel=wheel, commit=commit, work=work, env=warm, fresh_env=env, stop=stop)
