"""The tests' warm start (tests/warm/): a command line run through the zygote behaves as the same command line in
a fresh interpreter (the reference: ``LONGSHORT_TEST_FRESH=1``): argv, sys.path, working folder, environment,
stdin/stdout/stderr, exit status, a relayed signal; and the cases the zygote must decline start fresh."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from warm_start import with_warm_start


@pytest.fixture(autouse=True)
def _warm_start_on():
    if not os.environ.get("LONGSHORT_TEST_ZYGOTE"):  # set by conftest's session fixture, unless LONGSHORT_TEST_FRESH
        pytest.skip("warm start off (LONGSHORT_TEST_FRESH)")

PROBE = """
import json, os, sys, tempfile
line = sys.stdin.readline().strip()
print(json.dumps({"argv": sys.argv, "orig_argv": sys.orig_argv, "path0": sys.path[0], "path": sys.path[1:],
                  "cwd": os.getcwd(), "probe": os.environ.get("PROBE"), "stdin": line, "tmp": tempfile.gettempdir(),
                  "main": __name__, "torch_imported": "torch" in sys.modules, "pid": os.getpid()}))
print("to stderr", file=sys.stderr)
sys.exit(int(os.environ.get("PROBE_RC", "0")))
"""


def _run(argv, tmp_path, fresh: bool, **env):
    e = dict(os.environ, PROBE="x", TMPDIR=str(tmp_path), PYTHONPATH=with_warm_start(), **env)
    if fresh:
        e["LONGSHORT_TEST_FRESH"] = "1"
    p = subprocess.run(argv, cwd=tmp_path, env=e, input="hello\n", capture_output=True, text=True, timeout=120)
    return p


@pytest.mark.parametrize("mode", ["-c", "file", "-m"])
def test_a_command_runs_as_in_a_fresh_interpreter(tmp_path, mode):
    script = tmp_path / "probe_mod.py"
    script.write_text(PROBE)
    target = {"-c": ["-c", PROBE], "file": [str(script)], "-m": ["-m", "probe_mod"]}[mode]
    argv = [sys.executable, *target, "a1", "--b"]
    warm, fresh = (_run(argv, tmp_path, f, PROBE_RC="3") for f in (False, True))
    w, f = (json.loads(p.stdout) for p in (warm, fresh))
    assert w["pid"] != f["pid"] and w["torch_imported"] and not f["torch_imported"]  # it did run in the zygote
    for k in ("pid", "torch_imported"):
        del w[k], f[k]
    assert w == f and w["stdin"] == "hello" and w["tmp"] == str(tmp_path)
    assert (warm.returncode, warm.stderr) == (fresh.returncode, fresh.stderr) == (3, "to stderr\n")


def test_a_module_s_packages_import_as_under_a_fresh_python_m(tmp_path):
    """While ``python -m pkg.mod`` imports ``pkg``, ``sys.argv[0]`` is ``"-m"`` and ``sys.orig_argv`` the command line
    (torchtune_longshort.started_as reads both to name the command as typed)."""
    (tmp_path / "probe_pkg").mkdir()
    (tmp_path / "probe_pkg" / "__init__.py").write_text("import sys\nAT_IMPORT = [list(sys.argv), sys.orig_argv]\n")
    (tmp_path / "probe_pkg" / "mod.py").write_text(
        "import json, sys\nfrom probe_pkg import AT_IMPORT\n"
        "print(json.dumps([*AT_IMPORT, sys.argv[1:], 'torch' in sys.modules]))\n")
    argv = [sys.executable, "-u", "-m", "probe_pkg.mod", "a1", "--b"]
    warm, fresh = (json.loads(_run(argv, tmp_path, f).stdout) for f in (False, True))
    assert warm.pop() and not fresh.pop()  # it did run in the zygote
    assert warm == fresh == [["-m", "a1", "--b"], argv, ["a1", "--b"]]


def test_an_exception_exits_1_with_its_traceback(tmp_path):
    argv = [sys.executable, "-c", "raise ValueError('boom')"]
    warm, fresh = (_run(argv, tmp_path, f) for f in (False, True))
    assert warm.returncode == fresh.returncode == 1
    assert warm.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1] == "ValueError: boom"


def test_a_signal_reaches_the_command_and_its_status_comes_back(tmp_path):
    """The command waits on its stdin, which stays open until it has ended: it ends on the signal, not after a fixed
    60 s sleep that the 60 s wait for it could outlast on a loaded machine."""
    wait = "print('ready', flush=True)\nsys.stdin.read()\n"
    code = ("import signal, sys\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('got', flush=True), sys.exit(7)))\n" + wait)
    for handled in (True, False):
        c = code if handled else "import sys\n" + wait
        e = dict(os.environ, PYTHONPATH=with_warm_start())
        p = subprocess.Popen([sys.executable, "-c", c], env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
        assert p.stdout.readline() == "ready\n"
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
        out = p.stdout.read()
        p.stdin.close()
        p.stdout.close()
        assert (p.returncode, out) == ((7, "got\n") if handled else (-signal.SIGTERM, ""))


def test_an_import_time_variable_of_its_own_starts_it_fresh(tmp_path):
    argv = [sys.executable, "-c", PROBE]
    p = _run(argv, tmp_path, False, HF_HOME=str(tmp_path / "elsewhere"))
    assert p.returncode == 0 and not json.loads(p.stdout)["torch_imported"]
    p = _run([sys.executable, "-X", "utf8", "-c", PROBE], tmp_path, False)  # an interpreter option
    assert p.returncode == 0 and not json.loads(p.stdout)["torch_imported"]


def test_the_waiting_process_killed_takes_its_command_with_it(tmp_path):
    flag = tmp_path / "alive"
    code = (f"import time, pathlib\nflag = pathlib.Path({str(flag)!r})\nflag.touch()\nprint('ready', flush=True)\n"
            "for _ in range(600):\n    flag.touch(); time.sleep(0.1)\n")  # touched before 'ready': it ran
    p = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=with_warm_start()),
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    p.kill()
    p.wait(timeout=30)
    time.sleep(1)
    flag.unlink()
    time.sleep(1)
    assert not flag.exists()


def test_a_warm_command_gets_the_collect_env_report_a_fresh_one_computes(tmp_path):
    """lm-eval writes torch's collect_env report into every results file (``pretty_env_info``; the eval report reads
    whether CUDA was available from it). The tests compute it once a run and serve it (``ENV_REPORT`` in
    tests/warm/zygote.py): a warm command's report is the text a fresh interpreter computes, and it is served, not
    computed again (its ~1.3 s of subprocesses were 89 calls in one suite run)."""
    code = ("import os, torch.utils.collect_env as c; text = c.get_pretty_env_info(); "
            "print(os.path.basename(c.get_pretty_env_info.__code__.co_filename)); print(text)")
    warm, fresh = (_run([sys.executable, "-c", code], tmp_path, f) for f in (False, True))
    assert warm.returncode == fresh.returncode == 0, warm.stderr + fresh.stderr
    (by_warm, warm_text), (by_fresh, fresh_text) = (p.stdout.split("\n", 1) for p in (warm, fresh))
    assert warm_text == fresh_text and "PyTorch version" in warm_text
    assert (by_warm, by_fresh) == ("zygote.py", "collect_env.py")


def test_a_test_that_imports_lm_eval_keeps_its_commands_warm(tmp_path):
    """lm_eval's import sets HF_XET_HIGH_PERFORMANCE in this process's environment, an import-time variable the
    zygote compares: once a test had imported it (after the zygote started), every later command was declined and
    ran fresh (test_wheel_install.py before this file under ``-n 0``). conftest imports it before the zygote."""
    importlib.import_module("lm_eval")

    p = _run([sys.executable, "-c", PROBE], tmp_path, False)
    assert p.returncode == 0 and json.loads(p.stdout)["torch_imported"], p.stderr[-2000:]
