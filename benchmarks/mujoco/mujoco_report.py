"""The results of ``mujoco.py``: what each run directory says, the per-framework
aggregates over seeds (with the time to SB3's final score), the printed tables, and
``alf.bin.report`` on the root at the end.

Nothing here imports torch or ALF beyond :mod:`alf.run_dir.layout`.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from alf.run_dir import layout
from benchmarks.common import fmt_num, fmt_seconds, format_table, median
from benchmarks.mujoco.mujoco_common import REPO_ROOT


def summarize_run(run_dir: str) -> dict[str, Any]:
    """What a run directory says: its evaluations, final and best return, times."""
    records = layout.read_progress(run_dir)
    evals = [{"env_steps": r.get("env_steps"), "elapsed_s": r.get("elapsed_s"),
              "train_time_s": r.get("train_time_s"),
              "average_return": r["eval/average_return"]}
             for r in records if "eval/average_return" in r]
    env_steps = max((int(r.get("env_steps", 0)) for r in records), default=0)
    elapsed = max((float(r["elapsed_s"]) for r in records if "elapsed_s" in r), default=None)
    train = max((float(r["train_time_s"]) for r in records if "train_time_s" in r),
                default=None)
    status = layout.read_status(run_dir) or {}
    return {
        "state": status.get("state"),
        "env_steps": env_steps,
        "elapsed_s": elapsed,
        "train_time_s": train,
        "final_eval_return": evals[-1]["average_return"] if evals else None,
        "best_eval_return": max((e["average_return"] for e in evals), default=None),
        "steps_per_s_train": env_steps / train if train else None,
        "steps_per_s_wall": env_steps / elapsed if elapsed else None,
        "evals": evals,
    }


def time_to_return(evals: Sequence[dict[str, Any]], threshold: float) -> float | None:
    """``elapsed_s`` at the first evaluation with average return >= ``threshold``."""
    for record in evals:
        if record["average_return"] >= threshold and record.get("elapsed_s") is not None:
            return float(record["elapsed_s"])
    return None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _known(runs: Sequence[dict[str, Any]], key: str) -> list[Any]:
    """The runs' ``key`` values that are not None."""
    return [r[key] for r in runs if r[key] is not None]


def _median_or_none(values: Sequence[float]) -> float | None:
    return median(values) if values else None


def _median_rate(runs: Sequence[dict[str, Any]], key: str) -> float | None:
    """Median of the runs' non-zero ``key`` rates (NaN when none has one; None without
    runs)."""
    return median([r[key] for r in runs if r[key]]) if runs else None


def aggregate(runs: list[dict[str, Any]], threshold: float | None,
              sb3_wall: float | None) -> dict[str, Any]:
    """One framework's runs of one combination, over seeds."""
    times = [time_to_return(r["evals"], threshold) if threshold is not None else None
             for r in runs]
    reached = [t for t in times if t is not None]
    med_time = median([t if t is not None else math.inf for t in times]) if runs else None
    if med_time is not None and (math.isinf(med_time) or math.isnan(med_time)):
        med_time = None
    return {
        "seeds": [r["seed"] for r in runs],
        "final_mean": _mean(_known(runs, "final_eval_return")),
        "final_per_seed": [r["final_eval_return"] for r in runs],
        "best_mean": _mean(_known(runs, "best_eval_return")),
        "median_wall_s": _median_or_none(_known(runs, "elapsed_s")),
        "median_steps_per_s_train": _median_rate(runs, "steps_per_s_train"),
        "median_steps_per_s_wall": _median_rate(runs, "steps_per_s_wall"),
        "time_to_sb3_final_per_seed": times,
        "median_time_to_sb3_final_s": med_time,
        "reached_sb3_final": f"{len(reached)}/{len(runs)}",
        "time_ratio_to_sb3_wall": (med_time / sb3_wall
                                   if med_time is not None and sb3_wall else None),
    }


def summarize_combination(combo: dict[str, Any], frameworks: Sequence[str]) -> None:
    """Adds to ``combo`` the mean of SB3's final evaluations (``sb3_final_mean``) and
    each framework's :func:`aggregate` of its runs (``summary``)."""
    by_fw = {fw: sorted([r for r in combo["runs"] if r["framework"] == fw],
                        key=lambda r: r["seed"]) for fw in frameworks}
    sb3_runs = by_fw.get("sb3") or []
    threshold = _mean(_known(sb3_runs, "final_eval_return"))
    sb3_wall = _median_or_none(_known(sb3_runs, "elapsed_s"))
    combo["sb3_final_mean"] = threshold
    combo["summary"] = {fw: aggregate(runs, threshold, sb3_wall)
                        for fw, runs in by_fw.items() if runs}


def fmt_or_dash(value: float | None, digits: int = 0) -> str:
    """``value`` with thousands separators and ``digits`` decimals, or ``-`` for None."""
    return fmt_num(value, digits) if value is not None else "-"


def _combination_table(combo: dict[str, Any]) -> str:
    """The table of one combination: a row per framework."""
    threshold = combo.get("sb3_final_mean")
    thr = f"{threshold:,.0f}" if threshold is not None else "n/a"
    header = ["framework", "seeds", "final eval (mean)", "final per seed", "best (mean)",
              "wall s (median)", "steps/s train", "steps/s wall",
              f"time to SB3 final {thr} (s)", "reached", "/ SB3 wall"]
    rows = []
    for fw, agg in combo["summary"].items():
        per_seed = " / ".join(fmt_or_dash(v, 0) for v in agg["final_per_seed"])
        rows.append([fw.upper(), ",".join(map(str, agg["seeds"])),
                     fmt_or_dash(agg["final_mean"], 1), per_seed,
                     fmt_or_dash(agg["best_mean"], 1), fmt_seconds(agg["median_wall_s"]),
                     fmt_or_dash(agg["median_steps_per_s_train"]),
                     fmt_or_dash(agg["median_steps_per_s_wall"]),
                     fmt_seconds(agg["median_time_to_sb3_final_s"]),
                     agg["reached_sb3_final"],
                     fmt_or_dash(agg["time_ratio_to_sb3_wall"], 2)])
    return format_table(header, rows)


def report(results: dict[str, Any]) -> str:
    """The plain-text report."""
    out = ["== MuJoCo v5 benchmark: ALF vs Stable-Baselines3 =="]
    m = results["machine"]
    out.append(f"machine: nproc={m['nproc']} (available: {m['cpus_available']}), "
               f"cpu={m['cpu_model']}, {m['platform']}, python {m['python']}")
    out.append("versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()))
    out.append(f"uptime at start: {results['uptime_start']}")
    out.append(f"uptime at end:   {results.get('uptime_end')}")
    s = results["settings"]
    out.append(f"settings: seeds={s['seeds']}, frameworks={s['frameworks']}, "
               f"threads={s['threads']}, root_dir={s['root_dir']}")
    for combo in results["combinations"]:
        out.append("")
        head = (f"--- {combo['algo'].upper()} {combo['env']}: {combo['num_env_steps']:,} env "
                f"steps, eval every {combo['cadence']['eval_every_steps']:,} steps ---")
        out.append(head)
        if combo.get("skipped"):
            out.append(f"skipped: {combo['skipped']}")
            continue
        for problem in combo.get("config_differences", []):
            out.append(f"WARNING: ALF config differs from the SB3 hyperparameters: {problem}")
        out.append(_combination_table(combo))
        failed = [r for r in combo["runs"] if r.get("outcome") == "failed"]
        for r in failed:
            out.append(f"FAILED: {r['framework']} seed {r['seed']} ({r['run_dir']})")
    out.append("")
    out.append("final eval: average return of the last evaluation (10 deterministic episodes); "
               "best: the best evaluation of each run, averaged over seeds.")
    out.append("wall s: elapsed_s at the end (training + evaluations, construction excluded); "
               "steps/s train: env steps / train_time_s (evaluations excluded).")
    out.append("time to SB3 final: elapsed_s at the first evaluation reaching the mean of SB3's "
               "final evaluations (median over seeds); '/ SB3 wall': that time / SB3's median "
               "wall s.")
    loads = [results["machine"].get("load_average_1_5_15min"), results.get("load_at_end")]
    busiest = max((load[0] for load in loads if load), default=0.0)
    nproc = m.get("cpus_available") or m.get("nproc") or 1
    if busiest > 0.5 * nproc:
        out.append(f"WARNING: the machine was busy (1-min load average up to {busiest:.2f} on "
                   f"{nproc} CPUs): timings are not representative.")
    return "\n".join(out)


def uptime() -> str:
    """The ``uptime`` line (the load averages if that tool is missing)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return f"load average {os.getloadavg()}"


def run_alf_report(root_dir: str) -> None:
    """``python -m alf.bin.report`` on ``root_dir`` if that tool exists (guarded: its
    command line is not fixed here; a failure is reported, not raised)."""
    if not os.path.isfile(os.path.join(REPO_ROOT, "alf", "bin", "report.py")):
        print("\n(alf.bin.report not available: skipping the IQM table)")
        return
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    base = [sys.executable, "-m", "alf.bin.report"]
    helped = subprocess.run([*base, "--help"], capture_output=True, text=True, env=env,
                            cwd=REPO_ROOT, check=False)
    args = [f"--root_dir={root_dir}"] if "--root_dir" in helped.stdout else [root_dir]
    print(f"\n$ python -m alf.bin.report {' '.join(args)}", flush=True)
    proc = subprocess.run([*base, *args], capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT, check=False)
    print(proc.stdout.rstrip())
    if proc.returncode:
        print(f"(alf.bin.report exited with status {proc.returncode}: "
              f"{proc.stderr.strip().splitlines()[-1:] or ''})")
