"""Shared helpers for the benchmarks in this directory.

The benchmarks run each measurement in a fresh subprocess (a *worker*: the benchmark
script itself, started with a hidden ``--worker`` flag) so that torch thread settings,
gin state and imported modules cannot leak from one run into the next. A worker prints
its result as one JSON line prefixed by :data:`RESULT_MARKER`; everything else it
prints (logging, warnings) is captured and shown only if the worker fails.

Nothing here imports torch, ALF or any benchmarked framework, so the parent process
stays light and does not perturb the timed workers.
"""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "RESULT_MARKER",
    "WorkerError",
    "emit_result",
    "run_worker",
    "machine_info",
    "package_version",
    "median",
    "first_reaching",
    "fmt_num",
    "fmt_seconds",
    "format_table",
    "write_report",
    "uptime",
    "run_logged",
]

RESULT_MARKER = "@@BENCHMARK_RESULT@@ "
"""Prefix of the one stdout line that carries a worker's JSON result."""


class WorkerError(RuntimeError):
    """A worker subprocess failed or printed no result line."""


def emit_result(result: dict[str, Any]) -> None:
    """Prints ``result`` as the worker's result line (call once, at the end of a worker)."""
    sys.stdout.write(RESULT_MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


def run_worker(
    argv: Sequence[str], *, timeout_s: float | None = None, verbose: bool = False
) -> dict[str, Any]:
    """Runs ``python argv...`` in a subprocess and returns the JSON it emitted.

    Args:
        argv: arguments after the interpreter (script path first).
        timeout_s: kill the worker after this many seconds.
        verbose: stream the worker's stderr to ours instead of capturing it.

    Raises:
        WorkerError: non-zero exit, timeout, or no result line; the message holds the
            tail of the worker's output.
    """
    cmd = [sys.executable, *argv]
    try:
        proc = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=None if verbose else subprocess.PIPE,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise WorkerError(f"worker timed out after {timeout_s}s: {' '.join(cmd)}") from err
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARKER) and proc.returncode == 0:
            return json.loads(line[len(RESULT_MARKER) :])
    tail = "\n".join((proc.stdout + "\n" + (proc.stderr or "")).strip().splitlines()[-40:])
    raise WorkerError(
        f"worker exited with status {proc.returncode} without a result: {' '.join(cmd)}\n"
        f"--- last lines of its output ---\n{tail}"
    )


def package_version(name: str) -> str | None:
    """Installed version of distribution ``name``, or None if it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine_info(packages: Iterable[str] = ("torch", "gymnasium", "numpy")) -> dict[str, Any]:
    """Facts about the machine that matter for timings (cheap; imports nothing heavy)."""
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "nproc": os.cpu_count(),
        "cpus_available": affinity,
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_1_5_15min": load,
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "versions": {name: package_version(name) for name in packages},
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def median(values: Sequence[float]) -> float:
    """Median of ``values`` (``inf`` entries allowed; NaN for an empty list)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    low, high = ordered[mid - 1], ordered[mid]
    if math.isinf(low) or math.isinf(high):
        return max(low, high)
    return (low + high) / 2


def first_reaching(
    evals: Sequence[dict[str, Any]], threshold: float, key: str = "average_return"
) -> dict[str, Any] | None:
    """The first evaluation record whose ``key`` is >= ``threshold``, or None."""
    for record in evals:
        if record[key] >= threshold:
            return record
    return None


def fmt_num(value: float | None, digits: int = 0) -> str:
    """``value`` with thousands separators, or ``-`` for None/NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:,.{digits}f}"


def fmt_seconds(value: float | None, not_reached: str = "not reached") -> str:
    """Seconds with one decimal, or ``not_reached`` for None/inf."""
    if value is None or math.isinf(value):
        return not_reached
    if math.isnan(value):
        return "-"
    return f"{value:.1f}"


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        parts = [row[0].ljust(widths[0]), *rest]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def write_report(results: dict[str, Any], text: str, json_path: str | None) -> None:
    """Prints a benchmark's report ``text`` and, with ``json_path``, writes ``results``
    there as JSON."""
    print()
    print(text)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=2)
        print(f"raw numbers written to {json_path}")


def uptime() -> str:
    """The ``uptime`` line (the load averages), printed beside every measurement."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable"


def run_logged(
    cmd: Sequence[str],
    *,
    log: Path,
    cwd: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> tuple[int, float]:
    """Runs ``cmd`` in a session of its own, its output into ``log``, with one thread per
    numeric library (plus ``env``); returns the exit status and wall seconds. After
    ``timeout_s`` the whole process group gets SIGINT (a run checkpoints and stops), 60 s
    later SIGKILL; at the end the group is killed anyway, so no worker outlives it."""
    full_env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **(env or {}))
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                rc = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                rc = -9
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    return rc, time.monotonic() - start
