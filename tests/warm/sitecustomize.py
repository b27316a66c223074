"""The tests' warm start (see ``tests/warm/zygote.py``): a Python process the tests start hands its command line to
the session's zygote, which runs it in a process forked from an interpreter that has torch, torchtune, transformers
and lm-eval imported already; this process relays signals to it and exits as it exits.

Only with ``LONGSHORT_TEST_ZYGOTE`` set (the tests' conftest sets it, with this folder on ``PYTHONPATH``), only for
this interpreter's ``python -m MOD``, ``python FILE`` (console scripts too) and ``python -c CODE`` without other
options but ``-u``, and never with ``LONGSHORT_TEST_FRESH`` set (``=self``: not this process, but the ones it
starts). Whatever the zygote declines or cannot serve runs here, as
usual: this file then returns and Python goes on."""

import os
import sys


def _request():
    argv = list(sys.orig_argv)
    unbuffered = len(argv) > 1 and argv[1] == "-u"  # torchrun starts its workers so
    if unbuffered:
        del argv[1]
    if len(argv) < 2:
        return None
    if argv[1][:2] in ("-m", "-c") and len(argv[1]) > 2:  # python -mpip (torch's collect_env, run by lm-eval)
        argv[1:2] = [argv[1][:2], argv[1][2:]]
    if argv[1] in ("-m", "-c"):
        if len(argv) < 3:
            return None
        return {"mode": argv[1], "target": argv[2], "args": argv[3:], "unbuffered": unbuffered}
    if argv[1].startswith("-"):
        return None  # other interpreter options (-X, -W, -I ...) change start-up: run as usual
    return {"mode": "file", "target": argv[1], "args": argv[2:], "unbuffered": unbuffered}


RELAYED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGQUIT")


def _relay(sock_path, request):
    import json
    import signal
    import socket
    import struct

    job = {"pid": None, "pending": []}

    def forward(signum, _frame):  # installed before asking: a signal that comes before the job's pid waits for it
        if job["pid"] is None:
            job["pending"].append(signum)
            return
        try:
            os.kill(job["pid"], signum)
        except ProcessLookupError:
            pass

    sigs = [getattr(signal, n) for n in RELAYED]
    before = {sig: signal.signal(sig, forward) for sig in sigs}

    def run_here():  # declined or no zygote: as if nothing happened, the signals that came included
        for sig, handler in before.items():
            signal.signal(sig, handler)
        for sig in job["pending"]:
            os.kill(os.getpid(), sig)

    ns = _namespaces()
    joined = [n for n in JOINED if n in ns]  # the fds after stdin, stdout and stderr, in this order
    request.update(cwd=os.getcwd(), env=dict(os.environ), path=list(sys.path), executable=sys.executable,
                   prefix=sys.prefix, orig_argv=list(sys.orig_argv), ns={n: i for n, (i, _) in ns.items()},
                   joined=joined)
    body = json.dumps(request).encode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sock_path)
        socket.send_fds(s, [struct.pack("!Q", len(body))], [0, 1, 2, *(ns[n][1] for n in joined)])
        s.sendall(body)
        f = s.makefile("rb")
        reply = json.loads(f.readline() or b"{}")
    except OSError:
        s.close()
        return run_here()  # no zygote
    if "pid" not in reply:
        s.close()
        return run_here()  # declined (reply["fresh"] says why)
    job["pid"] = reply["pid"]
    for sig in job["pending"]:
        forward(sig, None)
    line = f.readline()
    rc = json.loads(line)["rc"] if line else 1
    if rc < 0:  # killed by a signal: die of the same one, as the parent would have seen
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    os._exit(rc)


JOINED = ("user", "mnt")  # the namespaces a job joins where they are not the zygote's (tests/disk_full.py's small
# tmpfs is mounted in the command's only): the user namespace first, as it grants the join of its mount namespace


def _namespaces() -> dict:
    """``{namespace: (its identity, an fd of it to join, for JOINED)}`` of this process (``/proc/self/ns``)."""
    out = {}
    for n in ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts"):
        try:
            out[n] = (os.readlink(f"/proc/self/ns/{n}"), os.open(f"/proc/self/ns/{n}", os.O_RDONLY)
                      if n in JOINED else None)
        except OSError:  # no such namespace here
            pass
    return out


def _chain():
    """The ``sitecustomize`` this one shadows (benchmarks/suite_cost.py's logger, when it runs), as Python would have
    imported it."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("LONGSHORT_TEST_FRESH") == "self":  # this process fresh, the ones it starts served again
    del os.environ["LONGSHORT_TEST_FRESH"]
elif os.environ.get("LONGSHORT_TEST_ZYGOTE") and not os.environ.get("LONGSHORT_TEST_FRESH"):
    _req = _request()
    if _req is not None:
        _relay(os.environ["LONGSHORT_TEST_ZYGOTE"], _req)
_chain()
