r"""Benchmark: ALF vs. Stable-Baselines3 on Gymnasium MuJoCo v5 (PPO, SAC, TD3).

Trains every (environment, algorithm, seed) once per framework with the same
hyperparameters, each run in a fresh subprocess with one torch thread. The frameworks
alternate per seed (ALF first for even seed positions, SB3 first for odd ones), so a
drifting machine load hits both alike.

* **ALF** runs are ordinary ``alf.bin.train`` runs of the example configs
  (``alf/examples/<algo>_<env>.gin``), launched as
  ``python -m alf.bin.train --conf=... --root_dir=<root>/alf/<algo>_<env>/seed-<k>
  --conf_param=TrainerConfig.random_seed=<k> [--conf_param=TrainerConfig.num_env_steps=N]``
  plus ``TrainerConfig.torch_num_threads`` (``--threads``) and, with
  ``--eval_every_steps``, ``TrainerConfig.eval_interval``.
* **SB3** runs are this script with a hidden ``--worker`` flag; each writes an
  ALF-format run directory ``<root>/sb3/<algo>_<env>/seed-<k>/`` (``progress.jsonl``,
  ``run_info.json``, ``status.json``, ``train.log``) so ALF's tools read both alike.

Evaluation is the same on both sides: every ``TrainerConfig.eval_interval`` iterations of
the ALF config (PPO: 10 x 2048 = 20,480 env steps; SAC/TD3: 5,000), after the update of the
iteration that crossed the mark, and once more at the end of the budget: one
deterministic episode on each of 10 separate environments (seeded from
``seed + 1_000_003``). For PPO the observations are normalised with the training
statistics, frozen during the evaluation; returns are the environment's own rewards.

A run whose ``status.json`` says ``finished`` for the requested budget is skipped, so a
long benchmark can be stopped (Ctrl-C) and continued by running the same command again
(an interrupted ALF run resumes from its checkpoint, an interrupted SB3 run starts over).

Usage::

    python benchmarks/mujoco/mujoco_bench.py --short                 # Hopper PPO, 1 seed, 50k steps
    python benchmarks/mujoco/mujoco_bench.py --envs Hopper-v5,HalfCheetah-v5 --algos ppo \
        --seeds 0,1,2
    python benchmarks/mujoco/mujoco_bench.py --algos sac,td3 --envs Hopper-v5 \
        --json /tmp/mujoco.json

Modules: this script is the entry point (flags, planning, alternating the runs, skipping
finished ones) and the SB3 worker's command line; ``mujoco_common.py`` holds the
environments, algorithms and shared hyperparameters, ``mujoco_alf.py`` the ALF side
(reading the configs, the hyperparameter check, the ``alf.bin.train`` command),
``mujoco_sb3.py`` the SB3 worker and ``mujoco_report.py`` the results and tables.

Stable-Baselines3 is not an ALF dependency: ``pip install stable-baselines3`` (or pass
``--frameworks alf``).
"""


from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
# alf.run_dir.layout imports nothing heavy (no torch): the parent process stays light.
from alf.run_dir import layout
from benchmarks.common import machine_info, package_version
from benchmarks.mujoco.mujoco_alf import (
    alf_command,
    binding_number,
    cadence,
    check_alf_config,
    read_config_bindings,
)
from benchmarks.mujoco.mujoco_common import (
    ALGOS,
    DEFAULT_NUM_ENV_STEPS,
    DEFAULT_ROOT_DIR,
    ENVS,
    FRAMEWORKS,
    HPARAMS,
    REPO_ROOT,
    SHORT_NUM_ENV_STEPS,
    config_path,
    run_name,
)
from benchmarks.mujoco.mujoco_report import (
    fmt_or_dash,
    report,
    run_alf_report,
    summarize_combination,
    summarize_run,
    uptime,
)
from benchmarks.mujoco.mujoco_sb3 import sb3_command, worker_sb3


# ------------------------------------------------------------------------ launching
def _is_finished(run_dir: str, num_env_steps: int) -> bool:
    status = layout.read_status(run_dir)
    return bool(status and status.get("state") == layout.RunStatus.FINISHED
                and status.get("num_env_steps") == num_env_steps)


def _wait(process: subprocess.Popen, timeout_s: float, what: str) -> int:
    """Waits for a child run; on Ctrl-C asks it to stop (SIGTERM: ALF checkpoints) and
    re-raises; on timeout kills it."""
    try:
        return process.wait(timeout=timeout_s)
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopping {what} ...", flush=True)
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=120)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(process.pid, signal.SIGKILL)
        raise
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return -9


def _launch(cmd: list[str], run_dir: str, threads: int, verbose: bool) -> subprocess.Popen:
    os.makedirs(run_dir, exist_ok=True)
    env = os.environ.copy()
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    log_path = os.path.join(run_dir, layout.LOG_FILE)
    with open(log_path, "a") as log:
        log.write(f"\n$ {' '.join(cmd)}\n")
        log.flush()
        return subprocess.Popen(cmd, stdout=None if verbose else log,
                                stderr=None if verbose else subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=REPO_ROOT,
                                start_new_session=True)


def _log_tail(run_dir: str, lines: int = 25) -> str:
    try:
        with open(os.path.join(run_dir, layout.LOG_FILE), errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


# ------------------------------------------------------------------------------ flags
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command-line flags."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Defaults: all four envs, all three algorithms, seeds 0,1,2, 1M env steps for\n"
               "PPO and 100k for SAC/TD3. A combination without an ALF example config\n"
               "(e.g. sac_walker2d.gin) is skipped unless --frameworks sb3. Rerunning the same\n"
               "command skips finished runs and continues the others.",
    )
    p.add_argument("--envs", default=",".join(ENVS),
                   help=f"comma-separated env ids from {', '.join(ENVS)} (default: all)")
    p.add_argument("--algos", default=",".join(ALGOS),
                   help="comma-separated algorithms from ppo, sac, td3 (default: all)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--num_env_steps", type=int, default=None,
                   help="training env steps per run (default: 1000000 for ppo, 100000 for "
                        "sac and td3)")
    p.add_argument("--frameworks", default="alf,sb3",
                   help="comma-separated frameworks from alf, sb3 (default alf,sb3)")
    p.add_argument("--root_dir", default=None,
                   help=f"where the runs go (default {DEFAULT_ROOT_DIR}; with --short, "
                        f"{DEFAULT_ROOT_DIR}_short)")
    p.add_argument("--short", action="store_true",
                   help="quick check: Hopper-v5, PPO, one seed (the first of --seeds), "
                        f"{SHORT_NUM_ENV_STEPS:,} env steps (a few minutes)")
    p.add_argument("--eval_every_steps", type=int, default=None,
                   help="override the evaluation interval in env steps (a multiple of the "
                        "ALF iteration: 2048 for PPO, 1 for SAC/TD3); default: the ALF "
                        "config's TrainerConfig.eval_interval")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per run, both frameworks (default 1)")
    p.add_argument("--json", default=None, help="also write the raw numbers to this file")
    p.add_argument("--no_report", action="store_true",
                   help="do not run alf.bin.report on the root at the end")
    p.add_argument("--worker_timeout_s", type=float, default=48 * 3600.0,
                   help="kill a run after this many seconds (default 172800)")
    p.add_argument("--verbose", action="store_true",
                   help="show the runs' output instead of writing it to their train.log")
    # Internal: one SB3 run.
    p.add_argument("--worker", choices=["sb3"], help=argparse.SUPPRESS)
    p.add_argument("--algo", help=argparse.SUPPRESS)
    p.add_argument("--env", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--run_dir", help=argparse.SUPPRESS)
    p.add_argument("--summary_every_steps", type=int, default=2048, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _unknown(kind: str, chosen: list[str], choices: Sequence[str]) -> str | None:
    """An error message for the first of ``chosen`` not among ``choices``, or None."""
    for name in chosen:
        if name not in choices:
            return f"unknown {kind} '{name}' (choose from {', '.join(choices)})"
    return None


def _validate(args: argparse.Namespace) -> str | None:
    """An error message for bad flags, or None."""
    error = (_unknown("env", args.envs, list(ENVS)) or _unknown("algorithm", args.algos, ALGOS)
             or _unknown("framework", args.frameworks, FRAMEWORKS))
    if error:
        return error
    if not args.seeds:
        return "no seeds"
    if args.threads < 1:
        return "--threads must be >= 1"
    if args.num_env_steps is not None and args.num_env_steps < 1:
        return "--num_env_steps must be >= 1"
    if "sb3" in args.frameworks and package_version("stable-baselines3") is None:
        return ("stable-baselines3 is not installed (it is not an ALF dependency): "
                "`pip install stable-baselines3`, or pass --frameworks alf")
    return None


# --------------------------------------------------------------------------- planning
def plan_combination(args: argparse.Namespace, algo: str, env_id: str) -> dict[str, Any]:
    """Budget, cadence and config check of one (algo, env) combination."""
    num_env_steps = args.num_env_steps or DEFAULT_NUM_ENV_STEPS[algo]
    combo: dict[str, Any] = {"algo": algo, "env": env_id, "num_env_steps": num_env_steps,
                             "name": run_name(algo, env_id), "runs": []}
    conf = config_path(algo, env_id)
    bindings = read_config_bindings(conf) if os.path.isfile(conf) else None
    if bindings is None and "alf" in args.frameworks:
        combo["skipped"] = f"no ALF config {os.path.relpath(conf, REPO_ROOT)}"
    cad = cadence(algo, bindings)
    combo["alf_eval_interval"] = None
    if args.eval_every_steps is not None:
        per_iteration = cad["steps_per_iteration"]
        if args.eval_every_steps % per_iteration or args.eval_every_steps < per_iteration:
            combo["skipped"] = (f"--eval_every_steps {args.eval_every_steps} is not a multiple "
                                f"of the ALF iteration ({per_iteration} env steps)")
        cad["eval_every_steps"] = args.eval_every_steps
        combo["alf_eval_interval"] = args.eval_every_steps // per_iteration
    combo["cadence"] = cad
    combo["config"] = os.path.relpath(conf, REPO_ROOT)
    combo["default_num_env_steps"] = (
        int(binding_number(bindings, "TrainerConfig.num_env_steps", 0)) if bindings else None)
    combo["config_differences"] = check_alf_config(algo, bindings) if bindings else []
    return combo


def _obstacle(framework: str, combo: dict[str, Any], run_dir: str,
              status: dict[str, Any] | None) -> str | None:
    """Why a run cannot (re)start in ``run_dir`` (whose status is ``status``), or None."""
    if status and status.get("state") == layout.RunStatus.RUNNING:  # its pid is alive
        return f"another process (pid {status.get('pid')}) is training in {run_dir}"
    if (framework == "alf" and status
            and status.get("num_env_steps") not in (None, combo["num_env_steps"])):
        # Resuming would continue a run whose schedules were set for another budget.
        return (f"{run_dir} holds a run with a budget of {status['num_env_steps']:,} env "
                f"steps, not {combo['num_env_steps']:,}: use another --root_dir or remove "
                "that directory")
    return None


def _run_command(args: argparse.Namespace, combo: dict[str, Any], framework: str, seed: int,
                 run_dir: str) -> list[str]:
    """The command line of one run; an SB3 run's old files are removed (it starts over)."""
    algo, env_id = combo["algo"], combo["env"]
    if framework == "alf":
        return alf_command(algo, env_id, run_dir, seed, combo["num_env_steps"],
                           combo["default_num_env_steps"], args.threads,
                           combo["alf_eval_interval"])
    for name in (layout.PROGRESS_FILE, layout.STATUS_FILE, layout.METADATA_FILE):
        path = os.path.join(run_dir, name)
        if os.path.exists(path):  # an unfinished or different-budget run starts over
            os.remove(path)
    return sb3_command(algo, env_id, run_dir, seed, combo["num_env_steps"], combo["cadence"],
                       args.threads)


def run_one(args: argparse.Namespace, combo: dict[str, Any], framework: str,
            seed: int) -> dict[str, Any]:
    """Trains (or skips, if finished) one run and returns its summary."""
    run_dir = os.path.join(args.root_dir, framework, combo["name"], f"seed-{seed}")
    run: dict[str, Any] = {"framework": framework, "seed": seed, "run_dir": run_dir}
    label = f"{framework} {combo['algo']} {combo['env']} seed {seed}"
    if _is_finished(run_dir, combo["num_env_steps"]):
        print(f"{label}: finished earlier, skipped ({run_dir})", flush=True)
        run["outcome"] = "skipped (finished)"
        return {**run, **summarize_run(run_dir)}
    obstacle = _obstacle(framework, combo, run_dir, layout.read_status(run_dir))
    if obstacle:
        print(f"{label}: FAILED: {obstacle}", flush=True)
        return {**run, **summarize_run(run_dir), "outcome": "failed"}
    cmd = _run_command(args, combo, framework, seed, run_dir)
    run["load_1min_at_start"] = round(os.getloadavg()[0], 2)
    print(f"{label}: running ...", end=" ", flush=True)
    tick = time.monotonic()
    process = _launch(cmd, run_dir, args.threads, args.verbose)
    code = _wait(process, args.worker_timeout_s, label)
    run["process_s"] = round(time.monotonic() - tick, 1)
    run.update(summarize_run(run_dir))
    if code != 0 or run["state"] != layout.RunStatus.FINISHED:
        run["outcome"] = "failed"
        print(f"FAILED (exit status {code}, state {run['state']}); log {run_dir}/train.log\n"
              f"{_log_tail(run_dir)}", flush=True)
    else:
        run["outcome"] = "trained"
        print(f"{run['process_s']:.0f}s, final eval {fmt_or_dash(run['final_eval_return'], 1)}, "
              f"{fmt_or_dash(run['steps_per_s_train'])} steps/s", flush=True)
    return run


def _run_all(args: argparse.Namespace, results: dict[str, Any]) -> int:
    """Plans every combination into ``results`` and trains its runs, the frameworks
    alternating per seed; returns the number of failed runs (Ctrl-C counts as one)."""
    failures = 0
    try:
        for algo in args.algos:
            for env_id in args.envs:
                combo = plan_combination(args, algo, env_id)
                results["combinations"].append(combo)
                if combo.get("skipped"):
                    print(f"{algo} {env_id}: skipped: {combo['skipped']}", flush=True)
                    continue
                for problem in combo["config_differences"]:
                    print(f"WARNING {algo} {env_id}: ALF config differs: {problem}", flush=True)
                for position, seed in enumerate(args.seeds):
                    order = args.frameworks if position % 2 == 0 else args.frameworks[::-1]
                    for framework in order:
                        run = run_one(args, combo, framework, seed)
                        failures += run["outcome"] == "failed"
                        combo["runs"].append(run)
    except KeyboardInterrupt:
        print("\ninterrupted: the report covers the runs so far; run the same command again "
              "to continue", flush=True)
        failures += 1
    return failures


def _resolve(args: argparse.Namespace) -> None:
    """Turns the comma-separated flags into lists and applies ``--short`` and the
    default ``--root_dir``."""
    args.envs, args.algos = _split(args.envs), _split(args.algos)
    args.frameworks = _split(args.frameworks)
    args.seeds = [int(s) for s in _split(args.seeds)]
    if args.short:
        args.envs, args.algos, args.seeds = ["Hopper-v5"], ["ppo"], args.seeds[:1]
        args.num_env_steps = args.num_env_steps or SHORT_NUM_ENV_STEPS
    if args.root_dir is None:
        # (a sibling, not a subdirectory: alf.bin.report on the full root must not mix
        # the short runs into its groups)
        args.root_dir = f"{DEFAULT_ROOT_DIR}_short" if args.short else DEFAULT_ROOT_DIR
    args.root_dir = os.path.abspath(os.path.expanduser(args.root_dir))


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark (or, with ``--worker``, one SB3 run); returns the exit status."""
    args = parse_args(argv)
    if args.worker:
        result = worker_sb3(args)
        print(json.dumps(result))
        return 0
    _resolve(args)
    error = _validate(args)
    if error:
        print(f"mujoco.py: error: {error}", file=sys.stderr)
        return 2

    results: dict[str, Any] = {
        "benchmark": "mujoco",
        "machine": machine_info(("torch", "gymnasium", "mujoco", "numpy", "alf",
                                 "stable-baselines3")),
        "uptime_start": uptime(),
        "settings": {"seeds": args.seeds, "frameworks": args.frameworks,
                     "threads": args.threads, "root_dir": args.root_dir,
                     "envs": args.envs, "algos": args.algos,
                     "hyperparameters": {a: HPARAMS[a] for a in args.algos}},
        "combinations": [],
    }
    print(f"uptime: {results['uptime_start']}", flush=True)
    failures = _run_all(args, results)
    for combo in results["combinations"]:
        if not combo.get("skipped"):
            summarize_combination(combo, args.frameworks)
    results["uptime_end"] = uptime()
    results["load_at_end"] = machine_info(())["load_average_1_5_15min"]
    print()
    print(report(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"raw numbers written to {args.json}")
    if not args.no_report:
        run_alf_report(args.root_dir)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
