"""The tests' zygote: one per pytest worker, it imports torch, torchtune, transformers and lm-eval (not this
package) once, then runs each Python command line a test starts (``tests/warm/sitecustomize.py`` hands it over) in a
process forked from that warm interpreter: the same argv, working folder, environment and stdin/stdout/stderr, the same
entry point run as ``__main__``; only the interpreter's start-up and those imports are shared. A fresh interpreter
spent ~8 of a tiny ``tune run``'s 12 CPU-s importing torchtune (torchao imports torch._dynamo and torch._inductor).

It declines (the process then runs as usual) a command whose environment differs from its own in a variable read
at import time (``IMPORT_TIME_ENV``), another interpreter (the wheel tests' venv), a search path on which one of
the imported packages would be found elsewhere, or a namespace of its own other than a user and mount namespace
(``unshare``: tests/disk_full.py), which the job enters. Every request and decision is appended to ``--log``.

    python tests/warm/zygote.py SOCKET --log FILE
"""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time

PRELOAD = (
    "torch", "torch.distributed", "torchao", "torchtune", "torchtune.training", "torchtune._cli.tune",
    "torchtune.modules.peft", "transformers", "transformers.models.llama.modeling_llama", "safetensors.torch",
    "datasets", "lm_eval", "lm_eval.evaluator", "lm_eval.api.registry", "lm_eval.models.huggingface",
    "lm_eval.tasks", "scipy.stats", "matplotlib.pyplot",
)  # third-party only: this package's modules are the command's to import (whether one is loaded is read at run
# time: a task under stock lm-eval refuses misalignment unless the longshort model's module is loaded)
# Variables a library reads when it is imported (or glibc when the process starts): a command that sets them
# otherwise than the zygote did must start fresh. Prefixes; the exceptions are read at run time.
IMPORT_TIME_ENV = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "DATASETS", "TORCH", "PYTORCH", "CUDA", "OMP_", "MKL_",
                   "KMP_", "PYTHONHASHSEED", "PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE", "LOGLEVEL", "LD_",
                   "MALLOC", "GLIBC_TUNABLES", "TRITON", "TOKENIZERS", "MPLBACKEND", "MPLCONFIGDIR", "LANG",
                   "LC_", "HOME", "XDG_")
# OMP_NUM_THREADS: run_job sets torch's pool from it; KMP_DUPLICATE_LIB_OK: threadpoolctl sets it when imported (a
# test's import does, in the worker), only Intel's OpenMP reads it (torch here uses GNU's); TORCH_COMPILE_BACKEND:
# read when a model is compiled (the recipe's compile_setup, torchtune's compile_model), never by an import.
RUN_TIME_ENV = ("TORCHELASTIC_", "TORCH_NCCL_", "TORCHINDUCTOR_", "OMP_NUM_THREADS", "KMP_DUPLICATE_LIB_OK",
                "TORCH_COMPILE_BACKEND")


# torch's collect_env report, which lm-eval writes into every results file (``pretty_env_info``): ~1.3 s of
# subprocesses a call (``python -m pip list``, ``gcc --version``, ``lscpu``, ...; 89 calls in one suite run). The tests
# compute it once a run (conftest); a zygote of the interpreter that computed it hands it to its commands, and the
# pytest workers to their own lm-eval calls. The text is the one the call would have given: same interpreter, venv
# and machine, and a command with other import-time variables (CUDA_*, ...) starts fresh and computes its own.
ENV_REPORT = "LONGSHORT_TEST_ENV_REPORT"


def use_env_report(path) -> bool:
    """Serve torch's ``get_pretty_env_info`` from ``path`` (JSON: the interpreter and the text it computed), when
    this interpreter computed it; whether it does."""
    if not path or not os.path.isfile(path) or "torch" not in sys.modules:
        return False
    with open(path) as f:
        report = json.load(f)
    if report["python"] != sys.executable:  # another venv lists other packages
        return False
    import torch.utils.collect_env as collect_env

    collect_env.get_pretty_env_info = lambda: report["text"]
    return True


def import_time_env(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV) and not k.startswith(RUN_TIME_ENV)}


def preload(log) -> dict:
    """Import PRELOAD; the folder each top-level package was found in, to compare a command's search path with."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a package that fails to import is simply not shared
            log({"preload_failed": name, "error": repr(e)})
    if use_env_report(os.environ.get(ENV_REPORT)):
        log({"env_report": os.environ[ENV_REPORT]})
    tops = {n.split(".")[0] for n in PRELOAD if n.split(".")[0] in sys.modules}
    return {n: getattr(sys.modules[n], "__file__", None) for n in sorted(tops)}


def decline_reason(req: dict, own_env: dict, origins: dict) -> str | None:
    if os.path.realpath(req["executable"]) != os.path.realpath(sys.executable) or req["prefix"] != sys.prefix:
        return "another interpreter"
    ours = namespaces(req.get("ns", {}))
    other = sorted(n for n, i in req.get("ns", {}).items() if ours[n] != i and n not in req.get("joined", ()))
    if other:
        return "another namespace: " + ", ".join(other)
    theirs, ours = import_time_env(req["env"]), import_time_env(own_env)
    diff = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
    if diff:
        return "import-time environment differs: " + ", ".join(diff)
    path = [main_path_entry(req)] + req["path"]
    for name, origin in origins.items():
        found = where(name, path)
        if found != origin:
            return f"{name} would come from {found or 'nowhere'}, not {origin}"
    return None


def namespaces(names) -> dict:
    """This process's identity of each of the namespaces ``names`` (``/proc/self/ns``)."""
    return {n: os.readlink(f"/proc/self/ns/{n}") for n in names}


CLONE_NEW = {"user": 0x10000000, "mnt": 0x00020000}  # setns(2)'s flags (<sched.h>)


def join_namespaces(req: dict, fds: list) -> None:
    """Enter the command's namespaces (``req["joined"]``, their fds in that order) that are not this process's: a
    command run under ``unshare`` (tests/disk_full.py: a small tmpfs mounted in its mount namespace only) runs in
    them, its writes there failing as they would in a fresh interpreter. Only a single-threaded process may enter a
    user namespace: a forked child is one."""
    import ctypes

    own = namespaces(req.get("joined", ()))
    for name, fd in zip(req.get("joined", ()), fds):
        if req["ns"][name] != own[name] and ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEW[name]) != 0:
            raise OSError(ctypes.get_errno(), f"setns to the command's {name} namespace: "
                          + os.strerror(ctypes.get_errno()))
        os.close(fd)


def where(name: str, path: list) -> str | None:
    """The file a fresh interpreter with this search path would import top-level ``name`` from (the modules
    imported here stay out of it): the meta path's finders in order, the path finder on ``path``."""
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder:
            spec = finder.find_spec(name, path)
        elif hasattr(finder, "find_spec"):
            try:
                spec = finder.find_spec(name, None)
            except Exception:  # noqa: BLE001 - a finder that cannot answer does not find it
                spec = None
        else:
            continue
        if spec is not None:
            return spec.origin
    return None


def main_path_entry(req: dict) -> str:
    """What Python puts first on sys.path for this command line."""
    if req["mode"] == "-c":
        return ""
    if req["mode"] == "-m":
        return req["cwd"]
    return os.path.dirname(os.path.realpath(os.path.join(req["cwd"], req["target"])))


def run_job(req: dict, fds: list) -> None:
    """In the forked child: become the command line, run it, exit as the interpreter would. Never returns."""
    import atexit
    import runpy
    import tempfile
    import threading
    import traceback
    import types

    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    try:
        join_namespaces(req, fds[3:])
    except OSError as e:  # run fresh would have run it in them: say so, in the command's stderr
        os.write(2, f"warm start: {e}; LONGSHORT_TEST_FRESH=1 runs the command fresh\n".encode())
        os._exit(1)
    std_streams(req.get("unbuffered") or bool(req["env"].get("PYTHONUNBUFFERED")))
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    tempfile.tempdir = None  # TMPDIR is the command's
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if "OMP_NUM_THREADS" in os.environ:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    # a fork shares the zygote's random state: every job drew the same unseeded numbers (each rank of a torchrun job
    # the same torchtune seed: null draw), where fresh interpreters each start from the OS's entropy
    random.seed()
    sys.modules["torch"].seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    sys.path[:] = [main_path_entry(req)] + req["path"]
    sys.orig_argv = req["orig_argv"]  # the command line as typed (torchtune_longshort.started_as reads it)
    code = 0
    try:
        if req["mode"] == "-m":
            sys.argv = ["-m", *req["args"]]  # while its packages import, as Python's own -m; runpy sets [0] after
            runpy.run_module(req["target"], run_name="__main__", alter_sys=True)
        elif req["mode"] == "-c":
            sys.argv = ["-c", *req["args"]]
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(req["target"], "<string>", "exec"), main.__dict__)
        else:
            sys.argv = [req["target"], *req["args"]]
            runpy.run_path(req["target"], run_name="__main__")
    except SystemExit as e:
        code = exit_code(e.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 - as the interpreter: print it, exit 1
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        threading._shutdown()  # what the interpreter does at exit: wait for non-daemon threads, then atexit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)


def std_streams(unbuffered: bool) -> None:
    """Python's start-up buffering on the zygote's own stream objects (modules imported here hold them: logging's
    handlers), now on the command's fds: stdout line-buffered on a terminal, stderr by line; ``-u``: every line
    (the binary layer keeps a partial line until the next newline or the exit)."""
    sys.stdout.reconfigure(line_buffering=unbuffered or os.isatty(1), write_through=unbuffered)
    sys.stderr.reconfigure(line_buffering=True, write_through=unbuffered)


def exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def recv_request(conn: socket.socket):
    head, fds, _flags, _addr = socket.recv_fds(conn, 8, 8)
    if len(head) < 8:
        return None, fds
    (n,) = struct.unpack("!Q", head)
    body = b""
    while len(body) < n:
        chunk = conn.recv(n - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return json.loads(body), fds


def serve(sock_path: str, log_path: str) -> None:
    def log(entry: dict) -> None:
        with open(log_path, "a") as f:
            f.write(json.dumps({"t": round(time.time(), 3), **entry}) + "\n")

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)  # bound before the imports: a command that comes early waits in the backlog
    server.listen(64)
    own_env = dict(os.environ)  # what the imports saw (some set variables: huggingface_hub sets HF_XET_*)
    origins = preload(log)
    jobs: dict[socket.socket, int] = {}  # the connection of the process that waits for each job
    log({"ready": True, "origins": origins})
    while True:
        readable, _, _ = select.select([server, *jobs], [], [], 0.1)
        for s in readable:
            if s is server:
                conn, _ = server.accept()
                try:
                    serve_one(conn, jobs, server, own_env, origins, log)
                except OSError as e:  # the process that asked is gone: nothing to answer
                    log({"lost": repr(e)})
                    conn.close()
            elif not recv_or_eof(s):  # the waiting process is gone (killed): so goes its job
                try:
                    os.kill(jobs[s], signal.SIGKILL)
                except ProcessLookupError:
                    pass
        reap(jobs)


def serve_one(conn, jobs: dict, server, own_env: dict, origins: dict, log) -> None:
    """Fork one request's job (or decline it); the job's pid goes back to the waiting process."""
    req, fds = recv_request(conn)
    try:
        reason = "unreadable request" if req is None else decline_reason(req, own_env, origins)
        if reason is not None:
            log({"declined": reason, "argv": req and [req["mode"], req["target"], *req["args"][:4]]})
            conn.sendall(json.dumps({"fresh": reason}).encode() + b"\n")
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            server.close()
            for c in [*jobs, conn]:
                c.close()
            run_job(req, fds)
    finally:
        for fd in fds:
            os.close(fd)
    jobs[conn] = pid
    log({"forked": pid, "argv": [req["mode"], req["target"], *req["args"][:4]]})
    try:
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:  # the waiting process is gone already: so goes its job
        os.kill(pid, signal.SIGKILL)
        del jobs[conn]
        conn.close()


def recv_or_eof(s: socket.socket) -> bytes:
    try:
        return s.recv(1)
    except OSError:
        return b""


def reap(jobs: dict) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rc = os.waitstatus_to_exitcode(status)
        for conn, p in list(jobs.items()):
            if p == pid:
                try:
                    conn.sendall(json.dumps({"rc": rc}).encode() + b"\n")
                except OSError:
                    pass
                conn.close()
                del jobs[conn]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(a.socket, a.log)
