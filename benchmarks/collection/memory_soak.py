r"""Memory soak (issue 32): learner and actor memory and ``/dev/shm`` over a long async run.

Starts ``python -m alf.bin.train --conf=alf/examples/appo_pong.gin --root_dir=DIR``
(EnvPool Pong; actor processes write trajectory fragments into shared memory) and every
``--interval_s`` samples from ``/proc`` the RSS (and PSS, from ``smaps_rollup``) of the
learner and of each actor (the learner's ``spawn`` children), and the ``/dev/shm`` files
the run holds: torch's shared tensors (``torch_<pid>_*``, unlinked at once, so found
through the processes' open files and mappings) and the queues' named semaphores
(``sem.alf_<learner pid>-*``), each inode once. Samples go to ``DIR/memory_soak.csv``;
the report gives per kind the value after the warm-up, at the end, the maximum, the drift
in percent (end vs first sample after the warm-up) and the least-squares slope, with
PASS/FAIL against 5%. Then the run is stopped as a user would (SIGINT to its process
group) and anything of it left alive or in ``/dev/shm`` is reported. A worker subprocess
first sizes the shared buffers with ALF's own ``FragmentPool`` and ``SharedParameters``
(per environment step, environment and fragment slot), compared with ``/dev/shm``.

Usage::

    python -m benchmarks.collection.memory_soak --root_dir=/tmp/soak       # one hour
    python benchmarks/collection/memory_soak.py --minutes=2 --warmup_minutes=0.5 \
        --interval_s=10 --conf_param=create_environment.num_parallel_environments=4
    python -m benchmarks.collection.memory_soak --from_csv=/tmp/soak/memory_soak.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.collection.proc_memory import (  # noqa: E402
    SHM_DIR,
    classify,
    descendants,
    named_run_files,
    read_cmdline,
    read_pss,
    read_stat,
    read_status,
    run_shm,
)
from benchmarks.common import (  # noqa: E402
    WorkerError,
    emit_result,
    format_table,
    machine_info,
    run_worker,
    uptime,
    write_report,
)

SCRIPT = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(SCRIPT)))
DEFAULT_CONF = "alf/examples/appo_pong.gin"
CSV_NAME = "memory_soak.csv"
DRIFT_LIMIT_PCT = 5.0
MIB = 1024 * 1024
CSV_FIELDS = (
    "sample", "elapsed_s", "timestamp", "kind", "label", "pid", "rss_bytes", "pss_bytes",
    "rss_anon_bytes", "rss_shmem_bytes", "shm_files", "shm_bytes", "shm_alloc_bytes",
    "shm_sem_files",
)
SERIES = (
    ("learner RSS", "learner", "rss_bytes"),
    ("learner PSS", "learner", "pss_bytes"),
    ("actors RSS (sum)", "actor", "rss_bytes"),
    ("actors PSS (sum)", "actor", "pss_bytes"),
    ("/dev/shm (run's files)", "shm", "shm_bytes"),
)
"""(row label, process kind, CSV column) of the summary table."""


def sample_run(learner: int, index: int, elapsed_s: float) -> list[dict[str, Any]]:
    """One sample of the run: a row per process (learner, actors ``actor-<i>`` by pid
    order, others) and one for its ``/dev/shm`` files."""
    common = {"sample": index, "elapsed_s": round(elapsed_s, 2),
              "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S")}
    rows, actors = [], 0
    pids = [learner, *descendants(learner)]
    for pid in pids:
        stat = read_stat(pid)
        try:
            memory = read_status(pid)
        except OSError:
            continue
        if stat is None:
            continue
        kind = classify(pid, learner, stat[0], read_cmdline(pid))
        label = kind if kind != "actor" else f"actor-{actors}"
        actors += kind == "actor"
        rows.append({**common, "kind": kind, "label": label, "pid": pid,
                     "pss_bytes": read_pss(pid), **memory})
    rows.append({**common, "kind": "shm", "label": SHM_DIR, "pid": learner,
                 **run_shm(learner, pids)})
    return rows


# ----------------------------------------------------------------------------- summary
def least_squares_slope(xs: list[float], ys: list[float]) -> float:
    """Slope of the least-squares line through ``(xs, ys)`` (0 for fewer than 2 points)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var


def series(rows: list[dict[str, Any]], kind: str, column: str) -> tuple[list[float], list[float]]:
    """``(elapsed seconds, value)`` per sample of ``column`` summed over the rows of
    ``kind``; a sample without such rows, or with an empty value, is skipped."""
    by_sample: dict[int, list[Any]] = {}
    times: dict[int, float] = {}
    for row in rows:
        if row["kind"] == kind:
            by_sample.setdefault(int(row["sample"]), []).append(row.get(column))
            times[int(row["sample"])] = float(row["elapsed_s"])
    xs, ys = [], []
    for index in sorted(by_sample):
        values = by_sample[index]
        if all(v not in (None, "") for v in values):
            xs.append(times[index])
            ys.append(float(sum(float(v) for v in values)))
    return xs, ys


def summarize(
    xs: list[float], ys: list[float], warmup_s: float, limit_pct: float = DRIFT_LIMIT_PCT
) -> dict[str, Any]:
    """Drift of series ``(xs seconds, ys bytes)`` from ``warmup_s`` on: ``samples``,
    ``start`` (first value after the warm-up), ``end``, ``max``, ``drift_pct`` (end vs
    start), ``slope_per_h`` (least squares, bytes per hour) and ``verdict`` (PASS when
    ``|drift_pct| <= limit_pct``, FAIL, or n/a with under two samples after the warm-up)."""
    kept = [(x, y) for x, y in zip(xs, ys, strict=True) if x >= warmup_s]
    if len(kept) < 2:
        return {"samples": len(kept), "start": None, "end": None, "max": None,
                "drift_pct": None, "slope_per_h": None, "verdict": "n/a"}
    start, end = kept[0][1], kept[-1][1]
    drift = 100.0 * (end - start) / start if start else 0.0
    slope = least_squares_slope([x for x, _ in kept], [y for _, y in kept]) * 3600.0
    return {"samples": len(kept), "start": start, "end": end, "max": max(y for _, y in kept),
            "drift_pct": drift, "slope_per_h": slope,
            "verdict": "PASS" if abs(drift) <= limit_pct else "FAIL"}


def summary_table(
    rows: list[dict[str, Any]], warmup_s: float, limit_pct: float = DRIFT_LIMIT_PCT
) -> tuple[dict[str, dict[str, Any]], str]:
    """The summary of every series of :data:`SERIES` and its table (MiB)."""

    def mib(value: float | None, digits: int = 1) -> str:
        return "-" if value is None else f"{value / MIB:,.{digits}f}"

    summaries, table = {}, []
    for label, kind, column in SERIES:
        s = summarize(*series(rows, kind, column), warmup_s, limit_pct)
        summaries[label] = s
        drift = "-" if s["drift_pct"] is None else f"{s['drift_pct']:+.2f}"
        table.append([label, mib(s["start"]), mib(s["end"]), mib(s["max"]), drift,
                      mib(s["slope_per_h"], 2), s["samples"], s["verdict"]])
    header = ["", "after warm-up MiB", "end MiB", "max MiB", "drift %", "slope MiB/h",
              "samples", f"|drift| <= {limit_pct:g}%"]
    return summaries, format_table(header, table)


def write_csv(path: str, rows: list[dict[str, Any]], append: bool = True) -> None:
    """Writes ``rows`` (the columns of :data:`CSV_FIELDS`) to ``path``, with a header
    when the file is new."""
    new = not append or not os.path.exists(path)
    with open(path, "a" if append else "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerows(rows)


def read_csv(path: str) -> list[dict[str, Any]]:
    """The rows of a CSV written by :func:`write_csv` (values as strings)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------- sizes
def _configured(name: str, param: str) -> Any:
    """A bound gin parameter of ALF's configurable ``name``, else its default."""
    import gin

    from alf import config as alf_config

    try:
        return gin.query_parameter(f"{name}.{param}")
    except ValueError:
        return alf_config.default_value(name, param)


def worker_sizes(args: argparse.Namespace) -> dict[str, Any]:
    """Builds the run's algorithm and policy from the config and sizes the shared memory
    of its ``AsyncUnroller`` with ALF's own :class:`FragmentPool` (one slot) and
    :class:`SharedParameters`, laid out as ``AsyncUnroller._open_channels`` does."""
    import threading

    import optree
    import torch
    from absl import logging as absl_logging

    torch.set_num_threads(1)
    absl_logging.set_verbosity(absl_logging.WARNING)
    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.trainers import TrainerConfig
    from alf.trainers.components import build_components
    from alf.unrollers.shared_memory import FragmentPool, SharedParameters

    import_configurables()
    alf_config.load_config(args.conf, args.conf_param)
    config = TrainerConfig()
    if not config.async_unroll:
        raise ValueError("the config does not collect asynchronously (TrainerConfig.async_unroll)")
    parts = build_components(config, distributed=None, resumed_env_steps=None, evaluate=False)
    algorithm, history = parts.policy.algorithm, parts.policy.history_length
    num_actors = int(_configured("AsyncUnroller", "num_actors"))
    num_buffers = int(_configured("AsyncUnroller", "num_buffers") or 2 * num_actors)
    envs_per_actor = parts.num_envs // num_actors
    length = history + int(config.unroll_length) + 1
    slot = FragmentPool(spec=algorithm.experience_spec(), num_buffers=1, length=length,
                        batch_size=envs_per_actor)
    accessors, tensors, _ = optree.tree_flatten_with_accessor(slot.storage, namespace="alf")
    leaves = {a.codify("").lstrip("."): t.nbytes // (length * envs_per_actor)
              for a, t in zip(accessors, tensors, strict=True)}
    params = SharedParameters(module=algorithm, lock=threading.Lock(),
                              skip_prefixes=algorithm.learner_only_state)
    param_bytes = sum(t.nbytes for t in params.tensors.values())
    step_bytes = sum(leaves.values())
    slot_bytes = step_bytes * length * envs_per_actor
    return {
        "num_envs": parts.num_envs, "num_actors": num_actors, "envs_per_actor": envs_per_actor,
        "num_buffers": num_buffers, "unroll_length": int(config.unroll_length),
        "history_length": history, "fragment_rows": length,
        "bytes_per_env_step": step_bytes, "bytes_per_leaf_step": leaves,
        "bytes_per_env_per_slot": step_bytes * length,
        "bytes_per_env_all_slots": step_bytes * length * num_buffers,
        "bytes_per_slot": slot_bytes, "pool_bytes": slot_bytes * num_buffers,
        "parameter_bytes": param_bytes, "parameter_tensors": len(params.tensors),
        # the version counter (int64) and the actors' heartbeats (float64 each)
        "counter_bytes": 8 + 8 * num_actors,
        "expected_shm_bytes": slot_bytes * num_buffers + param_bytes + 8 + 8 * num_actors,
    }


def sizes_text(sizes: dict[str, Any], shm_bytes: float | None) -> str:
    """The shared-memory sizes of the run, against the measured ``/dev/shm`` total."""
    leaves = ", ".join(f"{k} {v}" for k, v in sizes["bytes_per_leaf_step"].items() if v)
    lines = [
        f"Shared memory by ALF's FragmentPool / SharedParameters ({sizes['num_actors']} actors "
        f"x {sizes['envs_per_actor']} envs, {sizes['num_buffers']} fragment slots of "
        f"{sizes['fragment_rows']} rows = {sizes['history_length']} history + "
        f"{sizes['unroll_length']} steps + 1):",
        f"  per environment step  {sizes['bytes_per_env_step']:,} B ({leaves})",
        f"  per environment, one slot   {sizes['bytes_per_env_per_slot'] / MIB:.3f} MiB",
        f"  per environment, all slots  {sizes['bytes_per_env_all_slots'] / MIB:.3f} MiB",
        f"  per fragment slot           {sizes['bytes_per_slot'] / MIB:.3f} MiB",
        f"  fragment pool               {sizes['pool_bytes'] / MIB:.3f} MiB",
        f"  shared parameters           {sizes['parameter_bytes'] / MIB:.3f} MiB "
        f"({sizes['parameter_tensors']} tensors)",
        f"  expected in /dev/shm        {sizes['expected_shm_bytes'] / MIB:.3f} MiB "
        "(+ 32 B per named semaphore)",
    ]
    if shm_bytes:
        diff = shm_bytes - sizes["expected_shm_bytes"]
        lines.append(f"  measured in /dev/shm        {shm_bytes / MIB:.3f} MiB "
                     f"(measured - expected: {diff:+,.0f} B)")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the run
def _start_train(args: argparse.Namespace, log_path: str) -> subprocess.Popen:
    """Starts ``alf.bin.train`` in a session of its own, its output into ``log_path``."""
    cmd = [sys.executable, "-m", "alf.bin.train", f"--conf={args.conf}",
           f"--root_dir={args.root_dir}", *(f"--conf_param={p}" for p in args.conf_param)]
    print("training:", " ".join(cmd), flush=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with open(log_path, "w") as log:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _sample_loop(args: argparse.Namespace, proc: subprocess.Popen, csv_path: str
                 ) -> tuple[list[dict[str, Any]], dict[int, tuple[int, int]]]:
    """Samples every ``interval_s`` for ``minutes`` (or until the run exits or Ctrl-C);
    returns the rows and every process seen (pid -> (ppid, start time))."""
    start = time.monotonic()
    rows: list[dict[str, Any]] = []
    seen: dict[int, tuple[int, int]] = {}
    index = 0
    try:
        while proc.poll() is None:
            elapsed = time.monotonic() - start
            new = sample_run(proc.pid, index, elapsed)
            for row in new:
                stat = read_stat(row["pid"])
                if stat is not None:
                    seen.setdefault(row["pid"], stat)
            write_csv(csv_path, new)
            rows += new
            shm = new[-1]
            actors = [r for r in new if r["kind"] == "actor"]
            print(f"[{elapsed / 60:6.1f} min] learner {new[0]['rss_bytes'] / MIB:7.1f} MiB, "
                  f"{len(actors)} actors {sum(r['rss_bytes'] for r in actors) / MIB:7.1f} MiB, "
                  f"/dev/shm {shm['shm_bytes'] / MIB:6.2f} MiB in {shm['shm_files']} files",
                  flush=True)
            index += 1
            if elapsed >= args.minutes * 60:
                break
            next_at = start + index * args.interval_s
            while proc.poll() is None and time.monotonic() < next_at:
                time.sleep(min(1.0, max(0.0, next_at - time.monotonic())))
    except KeyboardInterrupt:
        print("interrupted: stopping the run", flush=True)
    return rows, seen


def _stop_and_check(proc: subprocess.Popen, seen: dict[int, tuple[int, int]],
                    stop_timeout_s: float) -> dict[str, Any]:
    """Stops the run as a user would (SIGINT to its process group), waits, and reports
    what of it is left: processes still alive and files in ``/dev/shm``."""
    result: dict[str, Any] = {"exited_before_stop": proc.poll() is not None}
    t0 = time.monotonic()
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=stop_timeout_s)
        except subprocess.TimeoutExpired:
            result["killed_after_s"] = stop_timeout_s
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    result["exit_status"] = proc.returncode
    result["stop_s"] = round(time.monotonic() - t0, 1)
    deadline = time.monotonic() + 15.0
    alive = list(seen)
    while alive and time.monotonic() < deadline:  # the actors and tracker follow
        alive = [pid for pid, (_, born) in seen.items()
                 if (read_stat(pid) or (0, -1))[1] == born]
        time.sleep(0.5)
    result["processes_left"] = alive
    result["shm_files_left"] = named_run_files(proc.pid, set(seen))
    held = run_shm(proc.pid, alive) if alive else {"shm_files": 0, "shm_bytes": 0}
    result["shm_held_by_survivors"] = held["shm_files"]
    return result


def _report(args: argparse.Namespace, rows: list[dict[str, Any]], sizes: dict[str, Any] | None,
            stop: dict[str, Any] | None, start_uptime: str) -> tuple[dict[str, Any], str]:
    """The results and the text report."""
    summaries, table = summary_table(rows, args.warmup_minutes * 60, args.drift_limit_pct)
    shm = [r for r in rows if r["kind"] == "shm"]
    last_shm = float(shm[-1]["shm_bytes"]) if shm else None
    lines = [f"uptime at start: {start_uptime}", f"uptime at end:   {uptime()}", "",
             f"Memory over {rows[-1]['elapsed_s'] if rows else 0:.0f} s "
             f"(warm-up {args.warmup_minutes:g} min excluded; drift = end vs first sample "
             "after the warm-up):", table]
    if sizes:
        lines += ["", sizes_text(sizes, last_shm)]
        actors = [r for r in rows if r["kind"] == "actor" and r["sample"] == rows[-1]["sample"]]
        if actors and sizes["envs_per_actor"]:
            per_env = sum(float(r["rss_bytes"]) for r in actors) / sizes["num_envs"] / MIB
            lines.append(f"  actor RSS per environment   {per_env:.1f} MiB at the end "
                         "(whole actor RSS / envs: includes each actor's fixed cost)")
    if stop is not None:
        clean = not stop["processes_left"] and not stop["shm_files_left"]
        lines += ["", f"Stop (SIGINT to the process group): exit status {stop['exit_status']} "
                  f"after {stop['stop_s']} s" + (" (killed)" if "killed_after_s" in stop else ""),
                  f"  left after the run: {len(stop['processes_left'])} processes, "
                  f"{len(stop['shm_files_left'])} files in {SHM_DIR} "
                  f"{stop['shm_files_left'] or ''} -> {'clean' if clean else 'NOT CLEAN'}"]
    results = {"benchmark": "memory_soak", "settings": vars(args), "summary": summaries,
               "sizes": sizes, "stop": stop, "machine": machine_info(("torch", "envpool"))}
    return results, "\n".join(lines)


def _sizes(args: argparse.Namespace) -> dict[str, Any] | None:
    """The sizing worker's result (None, with the error printed, if it failed)."""
    argv = [SCRIPT, "--worker", f"--conf={args.conf}",
            *(f"--conf_param={p}" for p in args.conf_param)]
    try:
        return run_worker(argv, timeout_s=args.worker_timeout_s)
    except WorkerError as err:
        print(f"sizing the shared buffers failed: {err}", file=sys.stderr)
        return None


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conf", default=DEFAULT_CONF, help="the async run's .gin config")
    parser.add_argument("--conf_param", action="append", default=[],
                        help="a gin binding passed to the run (repeatable)")
    parser.add_argument("--root_dir", help="the run's directory (default: new, under /tmp)")
    parser.add_argument("--minutes", type=float, default=60.0, help="how long to sample")
    parser.add_argument("--interval_s", type=float, default=30.0, help="sampling period")
    parser.add_argument("--warmup_minutes", type=float, default=5.0, help="not in the drift")
    parser.add_argument("--drift_limit_pct", type=float, default=DRIFT_LIMIT_PCT)
    parser.add_argument("--stop_timeout_s", type=float, default=180.0,
                        help="SIGKILL the run if it has not stopped this long after SIGINT")
    parser.add_argument("--worker_timeout_s", type=float, default=600.0)
    parser.add_argument("--from_csv", help="only summarize the CSV of an earlier soak")
    parser.add_argument("--json", default=None, help="write the raw results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Runs the soak (or a worker, or the summary of ``--from_csv``); returns the exit
    status: 0 when every series passed and the run left nothing behind."""
    args = _parse_args(argv)
    if args.worker:
        emit_result(worker_sizes(args))
        return 0
    if args.from_csv:
        _, table = summary_table(read_csv(args.from_csv), args.warmup_minutes * 60,
                                 args.drift_limit_pct)
        print(table)
        return 0
    if not os.path.isabs(args.conf) and os.path.exists(os.path.join(REPO, args.conf)):
        args.conf = os.path.join(REPO, args.conf)
    args.root_dir = os.path.abspath(args.root_dir or time.strftime("/tmp/alf_memory_soak_%H%M%S"))
    os.makedirs(args.root_dir, exist_ok=True)
    start_uptime = uptime()
    print(f"uptime: {start_uptime}", flush=True)
    sizes = _sizes(args)
    if sizes:
        print(sizes_text(sizes, None), flush=True)
    csv_path = os.path.join(args.root_dir, CSV_NAME)
    if os.path.exists(csv_path):
        os.remove(csv_path)
    proc = _start_train(args, os.path.join(args.root_dir, "memory_soak_train.log"))
    try:
        rows, seen = _sample_loop(args, proc, csv_path)
    except BaseException:
        _stop_and_check(proc, {}, args.stop_timeout_s)
        raise
    stop = _stop_and_check(proc, seen, args.stop_timeout_s)
    results, text = _report(args, rows, sizes, stop, start_uptime)
    write_report(results, text, args.json)
    print(f"samples: {csv_path}; the run's log: {args.root_dir}/memory_soak_train.log")
    if stop["exited_before_stop"]:
        print(f"the run exited early (status {stop['exit_status']}): see its log")
    verdicts = [s["verdict"] for s in results["summary"].values()]
    clean = not stop["processes_left"] and not stop["shm_files_left"]
    return 0 if clean and all(v == "PASS" for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
