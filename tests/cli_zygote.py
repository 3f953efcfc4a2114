"""A process that has imported torch once and forks a child per ``python -m <module>``
command of the tests (``helpers_cli.run_cli``), so that a command costs its own work
rather than another 2-3 CPU-seconds of ``import torch``.

It imports only third-party packages (torch, numpy, gymnasium, gin, absl), none of ALF:
every child imports ALF afresh, after its environment variables, working directory and
``PYTHONPATH`` are set, exactly as ``python -m`` would. A child is a real process with
its own pid, standard streams redirected to files, and the default signal handlers; it
ends as the interpreter would (threads joined, ``atexit`` handlers run, streams
flushed) but skips the teardown of every module (``_exit_child``).

Protocol (JSON lines): a request on stdin ``{"id", "module", "args", "cwd", "env",
"pythonpath", "stdout", "stderr"}``; replies on stdout ``{"id", "pid"}`` when the child
starts and ``{"id", "returncode"}`` when it ends. The zygote exits when stdin closes and
its children have ended.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
from typing import Any

# Third-party modules that a command would otherwise import again in every child, each
# costing seconds: ``torch._dynamo`` (imported by the first ``torch.optim`` optimizer
# built), TensorBoard's writer, and the simulators of the optional extras.
OPTIONAL_PRELOADS = ("torch._dynamo", "torch.utils.tensorboard", "envpool", "mujoco", "ale_py")


def _preload() -> None:
    import importlib

    import absl.logging  # noqa: F401
    import gin  # noqa: F401
    import gymnasium  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401

    for module in OPTIONAL_PRELOADS:
        try:
            importlib.import_module(module)
        except ImportError:  # an extra that is not installed
            pass
    _compile_alf()


def _compile_alf() -> None:
    """Writes the bytecode of ALF's sources (without importing them), so that children
    read it rather than compiling every module again, even where
    ``PYTHONDONTWRITEBYTECODE`` keeps imports from writing it."""
    import compileall

    compileall.compile_dir(
        os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "alf"),
        quiet=1,
    )


def _reply(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _serve() -> dict[str, Any] | None:
    """Forks a child per request; returns the request in a child, None in the zygote
    when it is done."""
    running: dict[int, Any] = {}
    buffer = b""
    open_stdin = True
    while open_stdin or running:
        readable = []
        if open_stdin:
            readable, _, _ = select.select([0], [], [], 0.02)
        else:
            select.select([], [], [], 0.02)
        if readable:
            data = os.read(0, 65536)
            if not data:
                open_stdin = False
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    return request
                running[pid] = request["id"]
                _reply({"id": request["id"], "pid": pid})
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            _reply({"id": running.pop(pid), "returncode": os.waitstatus_to_exitcode(status)})
    return None


def _run_child(request: dict[str, Any]) -> int:
    """Becomes ``python -m <module> <args>`` as the request describes; its exit status."""
    import runpy
    import traceback

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # As ``python -m``: the working directory first, then PYTHONPATH's entries.
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request["cwd"], *extra, *sys.path[1:]]
    sys.argv = [request["module"], *request["args"]]
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - reported as python would
        traceback.print_exc()
        return 1
    return 0


def _exit_child(code: int) -> None:
    """Ends a child as the interpreter would (non-daemon threads joined, ``atexit``
    handlers run, streams flushed), but without tearing down every module and object:
    in a forked child that teardown touches, and so copies, every page of the zygote's
    preloaded heap, which took seconds per command."""
    import atexit
    import threading

    threading._shutdown()  # what the interpreter does first at exit
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _preload()
    # Keeps the preloaded objects out of the children's garbage collections (which would
    # otherwise scan, and copy, them).
    import gc

    gc.freeze()
    child_request = _serve()
    if child_request is not None:
        _exit_child(_run_child(child_request))
