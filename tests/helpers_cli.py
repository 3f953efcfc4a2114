"""Shared helpers for the end-to-end command-line tests (``test_cli``, ``test_resume``,
``test_bad_input``): every test runs the real ``alf.bin.train`` / ``alf.bin.play`` in a
subprocess against a ``tmp_path`` root directory with a tiny budget."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "alf" / "examples" / "ppo_cart_pole.gin"

# ppo_cart_pole.gin: 8 environments x unroll_length 32.
STEPS_PER_ITERATION = 8 * 32

# A run that never-used binding: the scope ``never_used`` is referenced by nothing.
UNUSED_BINDING = "never_used/ConstantSchedule.value"

TINY_NUM_ITERATIONS = 8
TINY_NUM_CHECKPOINTS = 2
TINY_PARAMS = (
    f"TrainerConfig.num_env_steps={TINY_NUM_ITERATIONS * STEPS_PER_ITERATION}",
    "TrainerConfig.summary_interval=2",
    "TrainerConfig.eval_interval=4",
    "TrainerConfig.num_eval_episodes=2",
    "TrainerConfig.num_eval_environments=2",
    "TrainerConfig.checkpoint_interval=2",
    f"TrainerConfig.num_checkpoints={TINY_NUM_CHECKPOINTS}",
    "TrainerConfig.progress_interval_s=0",
    f"{UNUSED_BINDING}=2.0",
)

# One line printed by absl for the periodic progress report (TrainingReport.print_progress).
PROGRESS_LINE_RE = re.compile(
    r"iteration (?P<iteration>\d+) \| env steps (?P<env_steps>\d+) \((?P<percent>\d+\.\d)%\)"
    r" \| \d+ steps/s \| return (?P<ret>n/a|-?[\d.]+) \| elapsed (?P<elapsed>\d+:\d\d:\d\d)"
    r" \| ETA (?P<eta>\d+:\d\d:\d\d|n/a)"
)
CKPT_RE = re.compile(r"^ckpt-(\d+)\.pt$")

DEFAULT_TIMEOUT_S = 240


def cli_env() -> dict[str, str]:
    """Environment of the subprocesses: unbuffered, one CPU thread, off-screen SDL."""
    env = os.environ.copy()
    env["PYTHONUNBUFFERED"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env["MKL_NUM_THREADS"] = "1"
    env["SDL_VIDEODRIVER"] = "dummy"
    return env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for a rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_cmd(root: Path | str, *params: str, conf: Path | str | None = CONF) -> list[str]:
    """``python -m alf.bin.train`` with ``--conf``, ``--root_dir`` and ``--conf_param``s."""
    cmd = [sys.executable, "-m", "alf.bin.train", f"--root_dir={root}"]
    if conf is not None:
        cmd.append(f"--conf={conf}")
    cmd += [f"--conf_param={p}" for p in params]
    return cmd


def play_cmd(root: Path | str, *flags: str) -> list[str]:
    """``python -m alf.bin.play --root_dir=root`` plus ``flags``."""
    return [sys.executable, "-m", "alf.bin.play", f"--root_dir={root}", *flags]


def run_cli(
    cmd: list[str],
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    cwd: Path | str = REPO,
    pythonpath: Path | str | None = None,
) -> subprocess.CompletedProcess:
    """Runs ``cmd`` to completion and returns it with text stdout/stderr.

    ``python -m <module>`` commands are forked from a process that has imported torch
    already (``cli_zygote.py``; set ``ALF_TEST_NO_ZYGOTE=1`` to start each afresh).
    ``pythonpath`` is prepended to ``PYTHONPATH`` (for configs importing user modules).
    """
    env = cli_env()
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(pythonpath), env.get("PYTHONPATH", "")) if p
        )
    if cmd[:2] == [sys.executable, "-m"] and not os.environ.get("ALF_TEST_NO_ZYGOTE"):
        return _zygote().run(cmd, cwd=str(cwd), env=env, timeout=timeout)
    return subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class _Zygote:
    """The client of one ``cli_zygote.py`` process (started on first use, one per test
    process; safe to use from several threads)."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cli_zygote.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env=cli_env(),
        )
        self._lock = threading.Lock()
        self._next_id = 0
        self._pending: dict[int, dict] = {}
        self._events: dict[int, threading.Event] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._out_dir = Path(tempfile.mkdtemp(prefix="alf_cli_"))
        atexit.register(self.close)

    def _read(self) -> None:
        for line in self._proc.stdout:
            reply = json.loads(line)
            with self._lock:
                self._pending[reply["id"]].update(reply)
                self._events[reply["id"]].set()

    def _wait(self, request_id: int, key: str, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            event = self._events[request_id]
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            event.wait(remaining)
            with self._lock:
                if key in self._pending[request_id]:
                    return True
                event.clear()
            if deadline is not None and time.monotonic() >= deadline:
                return False
            if self._proc.poll() is not None:
                raise RuntimeError("the test CLI zygote ended")

    def run(
        self, cmd: list[str], *, cwd: str, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess:
        with self._lock:
            request_id = self._next_id
            self._next_id += 1
            self._pending[request_id] = {}
            self._events[request_id] = threading.Event()
            out = self._out_dir / f"{request_id}.out"
            err = self._out_dir / f"{request_id}.err"
            request = {
                "id": request_id,
                "module": cmd[2],
                "args": cmd[3:],
                "cwd": cwd,
                "env": env,
                "stdout": str(out),
                "stderr": str(err),
            }
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
        self._wait(request_id, "pid", 60)
        if not self._wait(request_id, "returncode", timeout):
            os.kill(self._pending[request_id]["pid"], signal.SIGKILL)
            self._wait(request_id, "returncode", 60)
            raise subprocess.TimeoutExpired(cmd, timeout)
        result = subprocess.CompletedProcess(
            cmd,
            self._pending[request_id]["returncode"],
            out.read_text(errors="replace"),
            err.read_text(errors="replace"),
        )
        out.unlink()
        err.unlink()
        with self._lock:
            del self._pending[request_id], self._events[request_id]
        return result

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        shutil.rmtree(self._out_dir, ignore_errors=True)


_ZYGOTE: list[_Zygote] = []
_ZYGOTE_LOCK = threading.Lock()


def _zygote() -> _Zygote:
    with _ZYGOTE_LOCK:
        if not _ZYGOTE or _ZYGOTE[0]._proc.poll() is not None:
            _ZYGOTE[:] = [_Zygote()]
        return _ZYGOTE[0]


def run_many(
    cmds: dict[str, list[str]], max_workers: int = 4, timeout: float = DEFAULT_TIMEOUT_S
) -> dict[str, subprocess.CompletedProcess]:
    """Runs independent commands concurrently (each a process of its own, so the test
    suite's wall time is not the sum of their start-up times); results by name."""
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        futures = {name: pool.submit(run_cli, cmd, timeout) for name, cmd in cmds.items()}
        return {name: future.result() for name, future in futures.items()}


def popen_cli(cmd: list[str], log_dir: Path) -> tuple[subprocess.Popen, Path, Path]:
    """Starts ``cmd`` in the background, stdout/stderr going to files in ``log_dir``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    out_path, err_path = log_dir / "stdout.txt", log_dir / "stderr.txt"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=cli_env(), stdout=out, stderr=err, start_new_session=True
        )
    return proc, out_path, err_path


def stop_process(proc: subprocess.Popen) -> None:
    """Kills ``proc`` (one we started) if it is still running, and reaps it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def wait_for(
    predicate,
    timeout: float,
    proc: subprocess.Popen | None = None,  # noqa: ANN001
    interval: float = 0.02,
    what: str = "condition",
) -> None:
    """Polls ``predicate`` until true; fails if ``proc`` exits first or on timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited (rc={proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def checkpoint_steps(root: Path) -> list[int]:
    """Iterations of the complete ``ckpt-N.pt`` files under ``root/checkpoints``."""
    directory = root / "checkpoints"
    if not directory.is_dir():
        return []
    found = (CKPT_RE.match(p.name) for p in directory.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


def played_average_return(proc: subprocess.CompletedProcess) -> float:
    """The value of ``play``'s last stdout line, ``average_return: <float>``."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("average_return: "), proc.stdout
    return float(last.split(": ")[1])


def read_progress(root: Path) -> list[dict]:
    """The records of ``root/progress.jsonl`` (each line must be a JSON object)."""
    lines = (root / "progress.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def train_records(records: list[dict]) -> list[dict]:
    """The training-summary records (those carrying ``fps``)."""
    return [r for r in records if "fps" in r]


def eval_records(records: list[dict]) -> list[dict]:
    """The evaluation records."""
    return [r for r in records if "eval/average_return" in r]


def snapshot(root: Path) -> dict[str, str]:
    """``relative path -> sha256`` of every file under ``root`` (but ``.lock``, which only
    names the process training there)."""
    result = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != ".lock":
            result[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return result


def error_lines(stderr: str, prog: str) -> list[str]:
    """Lines of ``stderr`` that are the CLI's own ``<prog>: error:`` messages."""
    return [line for line in stderr.splitlines() if line.startswith(f"{prog}: error:")]


def assert_clean_user_error(result: subprocess.CompletedProcess, prog: str, *keywords: str) -> str:
    """A user error: nonzero exit, exactly one ``prog: error:`` message containing every
    keyword (case-insensitive), and no traceback. Returns the whole stderr."""
    stderr = result.stderr
    assert result.returncode not in (0, None), f"expected failure, got rc 0:\n{stderr}"
    assert result.returncode > 0, f"killed by signal {-result.returncode}:\n{stderr}"
    assert "Traceback" not in stderr, stderr
    errors = error_lines(stderr, prog)
    assert len(errors) == 1, f"expected one '{prog}: error:' message:\n{stderr}"
    # The message may continue on following lines (gin's location of the binding).
    message = stderr[stderr.index(errors[0]) :].lower()
    for word in keywords:
        assert word.lower() in message, f"{word!r} not in error message:\n{stderr}"
    return stderr


_SHARED_RUN: dict[str, object] = {}


def shared_tiny_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:  # noqa: ANN001
    """Trains ``ppo_cart_pole.gin`` with ``TINY_PARAMS`` once per pytest session.

    The returned directory must not be modified: copy it (``copy_run``) first.
    """
    if "root" not in _SHARED_RUN:
        root = tmp_path_factory.mktemp("tiny_run") / "root"
        result = run_cli(train_cmd(root, *TINY_PARAMS))
        assert result.returncode == 0, f"training failed:\n{result.stdout}\n{result.stderr}"
        _SHARED_RUN["root"], _SHARED_RUN["result"] = root, result
    return _SHARED_RUN["root"], _SHARED_RUN["result"]  # type: ignore[return-value]


def copy_run(src: Path, dst: Path) -> Path:
    """Copies a run directory to ``dst`` and returns ``dst``."""
    shutil.copytree(src, dst)
    return dst
