r"""Compare ALF training throughput between two checkouts (e.g. before / after a refactor).

Each benchmark is run with the *checkout's own* script, ``<checkout>/benchmarks/<topic>/<name>.py``
(or ``benchmarks/<name>.py`` in a checkout from before the topic folders),
in a fresh subprocess with ``cwd=<checkout>`` and ``PYTHONPATH=<checkout>`` (so ``import
alf`` resolves to that checkout even when another one is installed editable; this is
verified once per checkout before any measurement). The two checkouts alternate within
every round, in the order B A, A B, B A, ... (so a linear drift of the machine load
hits both sides alike), and ``uptime`` is printed before each run. The throughput metric
is read from the benchmark's ``--json`` output:

=================  ===========================================================  ==========
benchmark          metric (primary first)                                         settings
=================  ===========================================================  ==========
``ppo_cart_pole``  ALF ``throughput``: env steps / ``RLTrainer.train_time_s``     ALF only,
                   (collect + update); ``loop_throughput``: env steps / (train()   seed 0,
                   wall time minus evaluations)                                   25k steps
``sac_pendulum``   ALF ``updates_per_s`` (= env steps/s after the 1000 random     ALF only,
                   warm-up steps, evaluations excluded); ``train_only_updates_    seed 0,
                   per_s`` (from ``RLTrainer.train_time_s``)                      1 thread,
                                                                                  4k steps
``collection``     section 3 (``--sections train``): the async run's             8 s + 4 s
                   ``steps_per_s`` (env steps / wall time from progress.jsonl);   warm-up,
                   also its train-time rate and the sync run's rate               1 actor,
                                                                                  EnvPool
=================  ===========================================================  ==========

``collection`` uses ``--train_backend envpool``: with the default Gymnasium backend its
HalfCheetah-v5 worker fails in both checkouts measured for issue 16 (e71553b, 143a5d1)
because ``benchmarks/mujoco.py``, first on ``sys.path``, shadowed the ``mujoco`` package
(since renamed ``benchmarks/mujoco/mujoco_bench.py``).

For every metric the script prints the per-round values of both sides, the per-side
medians, the ratio AFTER/BEFORE of the medians, and the min-max of the per-round ratios
(AFTER_i / BEFORE_i of the two runs of round i, which ran back to back). On a shared,
noisy machine only such side-by-side ratios mean anything; absolute figures do not.
For the fixed-budget benchmarks (``ppo_cart_pole``, ``sac_pendulum``) it also reports
``cpu_s``, the CPU seconds (user + system) of the whole run, subprocesses included, read
with ``getrusage(RUSAGE_CHILDREN)``: other processes on the machine inflate wall time much
more than a run's own CPU time (though cache and SMT sharing still inflate the latter).

Usage::

    python benchmarks/compare_checkouts.py --before /path/alf_before --after /path/alf_after \
        --bench ppo_cart_pole --rounds 3 --out /tmp/ppo_compare.json
    python benchmarks/compare_checkouts.py --before B --after A --bench sac_pendulum,collection \
        --rounds 4 --out /tmp/compare.json
    # replace a benchmark's default arguments (``--json`` is always added):
    python benchmarks/compare_checkouts.py --before B --after A --bench ppo_cart_pole \
        --rounds 3 --out /tmp/ppo.json \
        --bench_args "--skip_sb3 --seeds 0 --num_env_steps 20480 --eval_every_steps 1000000"

``--bench`` accepts a comma-separated list; every benchmark gets ``--rounds`` rounds,
one benchmark after the other. ``--out`` receives every run's command, ``uptime`` line,
exit status and metrics, plus the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Metrics = dict[str, float]


# ------------------------------------------------------------------------ metric readers
def _alf_run(results: dict[str, Any]) -> dict[str, Any]:
    runs = [r for r in results.get("runs", []) if r.get("framework") == "alf"]
    if not runs:
        raise ValueError("no ALF run in the JSON output")
    if len(runs) > 1:
        raise ValueError(f"{len(runs)} ALF runs in the JSON output; pass a single seed")
    return runs[0]


def _ppo_metrics(results: dict[str, Any]) -> Metrics:
    run = _alf_run(results)
    return {
        "train_steps_per_s": float(run["throughput"]),
        "loop_steps_per_s": float(run["loop_throughput"]),
        "wall_s": float(run["wall_s"]),
        "setup_s": float(run["setup_s"]),
    }


def _sac_metrics(results: dict[str, Any]) -> Metrics:
    run = _alf_run(results)
    if run.get("updates_per_s") is None:
        raise ValueError("no post-warm-up phase (budget too small?)")
    return {
        "steps_per_s": float(run["updates_per_s"]),
        "train_only_steps_per_s": float(run["train_only_updates_per_s"]),
        "wall_s": float(run["wall_s"]),
        "setup_s": float(run["setup_s"]),
    }


def _collection_metrics(results: dict[str, Any]) -> Metrics:
    runs = [r for r in results.get("train", []) if "error" not in r]
    asyncs = [r for r in runs if r["mode"] == "async"]
    syncs = [r for r in runs if r["mode"] == "sync"]
    if not asyncs:
        raise ValueError("no successful async run in section 3's JSON output")
    metrics = {
        "async_steps_per_s": statistics.median(r["steps_per_s"] for r in asyncs),
        "async_train_time_steps_per_s": statistics.median(
            r["steps_per_s_train_time"] for r in asyncs),
    }
    if syncs:
        metrics["sync_steps_per_s"] = statistics.median(r["steps_per_s"] for r in syncs)
    return metrics


@dataclass(frozen=True)
class Benchmark:
    """A benchmark script, its default short settings and how to read its metrics."""

    default_args: tuple[str, ...]
    read_metrics: Callable[[dict[str, Any]], Metrics]
    higher_is_better: dict[str, bool]
    # Also report ``cpu_s``, the run's CPU seconds (user + system, the benchmark and its
    # worker subprocesses): for a fixed budget it is far less sensitive to a busy machine
    # than wall time (other processes take wall time, not this run's CPU time).
    cpu_metric: bool = False


BENCHMARKS: dict[str, Benchmark] = {
    "ppo_cart_pole": Benchmark(
        # 25088 = 98 iterations of 8 envs x 32 steps; only the end-of-budget evaluation.
        ("--skip_sb3", "--seeds", "0", "--num_env_steps", "25088",
         "--eval_every_steps", "1000000000"),
        _ppo_metrics,
        {"train_steps_per_s": True, "loop_steps_per_s": True, "wall_s": False,
         "setup_s": False, "cpu_s": False},
        cpu_metric=True,
    ),
    "sac_pendulum": Benchmark(
        ("--skip_sb3", "--seeds", "0", "--threads", "1", "--num_env_steps", "4000"),
        _sac_metrics,
        {"steps_per_s": True, "train_only_steps_per_s": True, "wall_s": False,
         "setup_s": False, "cpu_s": False},
        cpu_metric=True,
    ),
    "collection": Benchmark(
        ("--sections", "train", "--quick", "--train_backend", "envpool"),
        _collection_metrics,
        {"async_steps_per_s": True, "async_train_time_steps_per_s": True,
         "sync_steps_per_s": True},
    ),
}


# ------------------------------------------------------------------------------ running
def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return "load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _env_for(checkout: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = checkout
    return env


def verify_checkout(checkout: str, python: str) -> str:
    """Returns ``alf.__file__`` as imported in ``checkout``; raises if it is elsewhere."""
    proc = subprocess.run([python, "-c", "import alf; print(alf.__file__)"], cwd=checkout,
                          env=_env_for(checkout), capture_output=True, text=True, check=False)
    path = proc.stdout.strip()
    if proc.returncode != 0 or not os.path.realpath(path).startswith(
            os.path.realpath(checkout) + os.sep):
        raise RuntimeError(f"`import alf` in {checkout} gives {path!r} "
                           f"(rc {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return path


SCRIPT_PATHS = {
    "ppo_cart_pole": "ppo/ppo_cart_pole.py",
    "sac_pendulum": "offpolicy/sac_pendulum.py",
    "collection": "collection/collection.py",
}
"""Each benchmark's script under ``benchmarks/`` (topic folders)."""


def bench_script(checkout: str, name: str) -> str:
    """``name``'s script in ``checkout``: in its topic folder, or at the top of
    ``benchmarks/`` in a checkout from before the folders."""
    script = os.path.join(checkout, "benchmarks", SCRIPT_PATHS[name])
    flat = os.path.join(checkout, "benchmarks", f"{name}.py")
    return script if os.path.exists(script) or not os.path.exists(flat) else flat


def run_once(name: str, side: str, checkout: str, bench_args: list[str], python: str,
             timeout_s: float, verbose: bool) -> dict[str, Any]:
    """One benchmark run in ``checkout``; returns its record (command, uptime, metrics)."""
    script = bench_script(checkout, name)
    with tempfile.TemporaryDirectory(prefix="compare_checkouts_") as tmp:
        json_path = os.path.join(tmp, f"{name}.json")
        cmd = [python, script, *bench_args, "--json", json_path]
        uptime = _uptime()
        print(f"  [{side}] uptime: {uptime}", flush=True)
        print(f"  [{side}] cd {checkout} && PYTHONPATH={checkout} {shlex.join(cmd)}",
              flush=True)
        record: dict[str, Any] = {"side": side, "checkout": checkout, "uptime": uptime,
                                  "command": shlex.join(cmd)}
        tick = time.monotonic()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_start = usage.ru_utime + usage.ru_stime
        try:
            proc = subprocess.run(cmd, cwd=checkout, env=_env_for(checkout),
                                  capture_output=not verbose, text=True, timeout=timeout_s,
                                  check=False)
            record["returncode"] = proc.returncode
            output = (proc.stdout or "") + (proc.stderr or "")
        except subprocess.TimeoutExpired:
            record["returncode"] = None
            output = f"timed out after {timeout_s:.0f}s"
        record["elapsed_s"] = time.monotonic() - tick
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        record["cpu_s"] = usage.ru_utime + usage.ru_stime - cpu_start
        record["load_after"] = list(os.getloadavg())
        try:
            with open(json_path) as f:
                results = json.load(f)
            record["metrics"] = BENCHMARKS[name].read_metrics(results)
            if BENCHMARKS[name].cpu_metric:
                record["metrics"]["cpu_s"] = record["cpu_s"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            record["error"] = f"{type(err).__name__}: {err}"
            record["output_tail"] = output[-3000:]
            print(f"  [{side}] FAILED (rc {record['returncode']}): {record['error']}\n"
                  f"{record['output_tail']}", flush=True)
            return record
    shown = ", ".join(f"{k}={v:,.1f}" for k, v in record["metrics"].items())
    print(f"  [{side}] {record['elapsed_s']:.0f}s: {shown}", flush=True)
    return record


# ----------------------------------------------------------------------------- summary
def summarize(name: str, rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per-metric values per round, per-side medians, ratio of medians and its spread."""
    summary: dict[str, Any] = {}
    for metric in BENCHMARKS[name].higher_is_better:
        before = [r["before"].get("metrics", {}).get(metric) for r in rounds]
        after = [r["after"].get("metrics", {}).get(metric) for r in rounds]
        b_vals = [v for v in before if v is not None]
        a_vals = [v for v in after if v is not None]
        if not b_vals or not a_vals:
            continue
        pair_ratios = [a / b for a, b in zip(after, before, strict=True)
                       if a is not None and b is not None and b > 0]
        med_b, med_a = statistics.median(b_vals), statistics.median(a_vals)
        summary[metric] = {
            "before": before, "after": after,
            "median_before": med_b, "median_after": med_a,
            "ratio_after_over_before": med_a / med_b if med_b else None,
            "round_ratios": pair_ratios,
            "round_ratio_min": min(pair_ratios) if pair_ratios else None,
            "round_ratio_max": max(pair_ratios) if pair_ratios else None,
            "round_ratio_median": statistics.median(pair_ratios) if pair_ratios else None,
            "higher_is_better": BENCHMARKS[name].higher_is_better[metric],
        }
    return summary


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def print_summary(name: str, summary: dict[str, Any]) -> None:
    print(f"\n== {name}: AFTER / BEFORE ==")
    for metric, s in summary.items():
        direction = "higher is better" if s["higher_is_better"] else "lower is better"
        print(f"{metric} ({direction})")
        for i, (b, a) in enumerate(zip(s["before"], s["after"], strict=True)):
            ratio = f"{a / b:.3f}" if a is not None and b else "-"
            print(f"  round {i + 1}: before {_fmt(b):>10}  after {_fmt(a):>10}  "
                  f"ratio {ratio}")
        ratio = s["ratio_after_over_before"]
        print(f"  median:  before {_fmt(s['median_before']):>10}  "
              f"after {_fmt(s['median_after']):>10}  ratio of medians "
              f"{ratio:.3f}  (per-round ratios {s['round_ratio_min']:.3f}-"
              f"{s['round_ratio_max']:.3f}, median {s['round_ratio_median']:.3f})")


# --------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="checkout measured as BEFORE")
    p.add_argument("--after", required=True, help="checkout measured as AFTER")
    p.add_argument("--bench", default="ppo_cart_pole",
                   help=f"comma-separated benchmarks out of {', '.join(BENCHMARKS)} "
                        "(default ppo_cart_pole)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds per benchmark; each round runs both sides (default 3)")
    p.add_argument("--out", required=True, help="write every run and the summary here")
    p.add_argument("--bench_args", default=None,
                   help="replace the benchmark's default arguments (a shell-quoted string; "
                        "only with a single --bench)")
    p.add_argument("--after_args", default="",
                   help="arguments added for the AFTER checkout only (a shell-quoted string), "
                        "e.g. '--skip_bare' for a flag the BEFORE checkout does not know")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter for the benchmark runs (default: this one)")
    p.add_argument("--timeout_s", type=float, default=900.0,
                   help="kill a benchmark run after this many seconds (default 900)")
    p.add_argument("--verbose", action="store_true", help="show the benchmarks' output")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.bench.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown or not names:
        print(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}",
              file=sys.stderr)
        return 2
    if args.bench_args is not None and len(names) != 1:
        print("--bench_args needs a single --bench", file=sys.stderr)
        return 2
    sides = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    report: dict[str, Any] = {"checkouts": {}, "rounds_requested": args.rounds,
                              "python": args.python, "benchmarks": {}}
    for side, checkout in sides.items():
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout,
                                capture_output=True, text=True, check=False).stdout.strip()
        alf_file = verify_checkout(checkout, args.python)
        report["checkouts"][side] = {"path": checkout, "commit": commit, "alf": alf_file}
        print(f"{side.upper()}: {checkout} (commit {commit or '?'}), alf from {alf_file}")

    failures = 0
    for name in names:
        bench_args = (shlex.split(args.bench_args) if args.bench_args is not None
                      else list(BENCHMARKS[name].default_args))
        rounds: list[dict[str, dict[str, Any]]] = []
        print(f"\n### {name} {shlex.join(bench_args)}", flush=True)
        for i in range(args.rounds):
            order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
            print(f"round {i + 1}/{args.rounds} ({' then '.join(order)})", flush=True)
            side_args = {"before": bench_args,
                         "after": bench_args + shlex.split(args.after_args)}
            runs = {side: run_once(name, side, sides[side], side_args[side], args.python,
                                   args.timeout_s, args.verbose) for side in order}
            failures += sum("error" in r for r in runs.values())
            rounds.append({**runs, "order": order})
        summary = summarize(name, rounds)
        report["benchmarks"][name] = {"args": bench_args, "rounds": rounds,
                                      "summary": summary}
        print_summary(name, summary)
        with open(args.out, "w") as f:  # after every benchmark, in case a later one hangs
            json.dump(report, f, indent=2)
    print(f"\nwritten to {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
