r"""Benchmark: ALF SAC vs. Stable-Baselines3 SAC on Pendulum-v1, same hyperparameters.

Both sides use the settings of ``alf/examples/sac_pendulum.gin`` (see :data:`HPARAMS`):
1 environment, Adam lr 1e-3, mini-batch 256, 2 x 256 ReLU actor and twin critics, replay
buffer 100k, tau 0.005, gamma 0.99, one gradient update per environment step, 1000
initial uniformly random steps (SB3 ``learning_starts=1000``), automatic entropy tuning
from alpha 1 towards target entropy -1. Each measurement runs in a fresh subprocess (the
script re-invoked with ``--worker``), so torch threads, gin state and imports cannot leak
between runs; per seed the frameworks alternate (ALF, then SB3) so that drifting machine
load hits both alike. Both use ``--threads`` torch threads.

Evaluation: every 1000 env steps (ALF ``TrainerConfig.eval_interval=1000`` iterations of
``unroll_length=1``; SB3 a callback at the start of the next rollout, i.e. after the
update of the step that crossed the mark), 10 deterministic episodes on 10 separate
environments stepped as one batch, seeded ``seed + 1_000_003 + i``. Both stop at the
first evaluation with average return >= -200 (ALF ``TrainerConfig.stop_at_eval_return``;
SB3 a callback returning False) or at the env-step budget (default 20k).

Reported per run and as medians over seeds:

* **updates/s**: gradient updates per second of the training phase after the random
  warm-up, evaluation excluded. The phase runs from the evaluation at env step 1000 (end
  of the warm-up; ALF has made 1 update, SB3 0) to the last evaluation; it has one env
  step and one update per step on both sides. ``updates/s`` = those updates / (wall time
  of the phase minus the evaluations in it): everything the training loop does is in it
  (ALF summaries and checkpoints too). ``ALF train-only updates/s`` uses
  ``RLTrainer.train_time_s`` (collect + update only) instead. Env steps/s of the phase
  equal updates/s.
* **time to -200**: wall seconds from the start of training (``trainer.train()`` /
  ``model.learn()``) to the end of the first evaluation with average return >= -200,
  evaluations and the warm-up included. Imports and construction (environments, model,
  replay buffer) are excluded on both sides and shown as ``setup s``.

Known differences left as each framework has them: ALF's Adam is one fused optimizer over
all losses with ``eps=1e-5``; SB3 steps three unfused Adams (actor, critics, alpha) with
``eps=1e-8``; network initialisation differs; ALF writes a checkpoint every 5000
iterations (as the example config) and a summary every 1000.

Usage::

    python benchmarks/offpolicy/sac_pendulum.py                          # seeds 0 1 2, 2 threads
    python benchmarks/offpolicy/sac_pendulum.py --threads 1 2 --json /tmp/sac_pendulum.json
    python benchmarks/offpolicy/sac_pendulum.py --seeds 0 --num_env_steps 3000    # smoke run

Stable-Baselines3 is not an ALF dependency: ``pip install stable-baselines3`` or pass
``--skip_sb3``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import (
    WorkerError,
    emit_result,
    first_reaching,
    fmt_num,
    fmt_seconds,
    format_table,
    machine_info,
    median,
    package_version,
    run_worker,
    write_report,
)

SCRIPT = os.path.abspath(__file__)
ENV_NAME = "Pendulum-v1"
TARGET_RETURN = -200.0
EVAL_SEED_OFFSET = 1_000_003  # same as alf.trainers.components.EVAL_SEED_OFFSET
EVAL_EVERY = 1000  # env steps (= ALF iterations: 1 env, unroll_length 1)

HPARAMS: dict[str, Any] = {
    "learning_rate": 1e-3, "batch_size": 256, "hidden": (256, 256),  # actor, 2 critics; ReLU
    "buffer_size": 100_000, "tau": 0.005, "gamma": 0.99, "initial_collect_steps": 1000,
    "initial_alpha": 1.0, "target_entropy": -1.0, "num_eval_episodes": 10,
}
WARMUP = HPARAMS["initial_collect_steps"]
NETS = ("ActorDistributionNetwork", "CriticNetwork")


# --------------------------------------------------------------------------- workers
def _phase(evals: list[dict[str, Any]], time_key: str) -> tuple[int, float] | None:
    """(updates, seconds excluding evaluations) from the warm-up's end to the last eval."""
    first = next((e for e in evals if e["env_steps"] == WARMUP), None)
    if first is None or evals[-1]["env_steps"] <= WARMUP:
        return None
    last = evals[-1]
    if time_key == "train_time_s":
        seconds = last["train_time_s"] - first["train_time_s"]
    else:
        in_phase = sum(e["eval_s"] for e in evals if e["env_steps"] >= WARMUP)
        seconds = last["t_end_s"] - (first["t_end_s"] - first["eval_s"]) - in_phase
    return last["env_steps"] - WARMUP, seconds


def _alf_conf_params(args: argparse.Namespace, stop_supported: bool) -> list[str]:
    hp = HPARAMS
    params = [
        f'create_environment.env_name="{ENV_NAME}"',
        "create_environment.num_parallel_environments=1",
        *(f"{net}.fc_layer_params={tuple(hp['hidden'])}" for net in NETS),
        *(f'{net}.activation="relu"' for net in NETS),
        *(f"SacAlgorithm.{k}={v}" for k, v in (
            ("gamma", hp["gamma"]), ("learning_rate", hp["learning_rate"]),
            ("mini_batch_size", hp["batch_size"]), ("mini_batch_length", 2),
            ("num_updates_per_train_iter", 1), ("target_update_tau", hp["tau"]),
            ("initial_alpha", hp["initial_alpha"]), ("target_entropy", hp["target_entropy"]))),
        f"ReplayBuffer.max_length={hp['buffer_size']}",
        *(f"TrainerConfig.{k}={v}" for k, v in (
            ("unroll_length", 1), ("initial_collect_steps", WARMUP),
            ("num_env_steps", args.num_env_steps), ("summary_interval", 1000),
            ("eval_interval", EVAL_EVERY), ("num_eval_episodes", hp["num_eval_episodes"]),
            ("num_eval_environments", hp["num_eval_episodes"]), ("random_seed", args.seed),
            ("torch_num_threads", args.threads[0]), ("compile", args.compile))),
    ]
    if stop_supported:
        params.append(f"TrainerConfig.stop_at_eval_return={TARGET_RETURN}")
    return params


def worker_alf(args: argparse.Namespace) -> dict[str, Any]:
    """One ALF run, built in-process from ``alf/examples/sac_pendulum.gin``."""
    import inspect

    import torch
    from absl import logging as absl_logging

    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.trainers import RLTrainer, TrainerConfig

    absl_logging.set_verbosity(absl_logging.WARNING)
    stop_supported = "stop_at_eval_return" in inspect.signature(TrainerConfig).parameters
    setup_start = time.monotonic()
    conf_file = os.path.join(alf_config.EXAMPLES_DIR, "sac_pendulum.gin")
    import_configurables()
    alf_config.load_config(conf_file, _alf_conf_params(args, stop_supported))
    with tempfile.TemporaryDirectory(prefix="alf_bench_") as root_dir:
        trainer = RLTrainer(config=TrainerConfig(), root_dir=root_dir)
        setup_s = time.monotonic() - setup_start
        evals: list[dict[str, Any]] = []
        original_evaluate = trainer.evaluate
        start = 0.0

        def timed_evaluate():  # shadows the bound method on this instance only
            tick = time.monotonic()
            result = original_evaluate()
            done = time.monotonic()
            if result is not None:
                evals.append({"env_steps": trainer.env_steps, "average_return":
                              result.average_return, "eval_s": done - tick,
                              "t_end_s": done - start, "train_time_s": trainer.train_time_s})
                if not stop_supported and result.average_return >= TARGET_RETURN:
                    trainer.request_stop()
            return result

        trainer.evaluate = timed_evaluate
        try:
            start = time.monotonic()
            trainer.train()
            wall_s = time.monotonic() - start
        finally:
            trainer.close()
    return {
        "framework": "alf-compiled" if args.compile else "alf", "seed": args.seed,
        "torch_num_threads": torch.get_num_threads(),
        "env_steps": trainer.env_steps, "iterations": trainer.iteration,
        "train_time_s": trainer.train_time_s, "wall_s": wall_s, "setup_s": setup_s,
        "phase": _phase(evals, "t_end_s"), "phase_train_only": _phase(evals, "train_time_s"),
        "stop_via": "stop_at_eval_return" if stop_supported else "request_stop",
        "load_1min_at_end": os.getloadavg()[0], "evals": evals,
        "versions": {"torch": torch.__version__, "alf": package_version("alf")},
    }


def worker_sb3(args: argparse.Namespace) -> dict[str, Any]:
    """One Stable-Baselines3 SAC run with the same hyperparameters."""
    import gymnasium as gym
    import numpy as np
    import torch

    torch.set_num_threads(args.threads[0])
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    hp = HPARAMS
    setup_start = time.monotonic()
    eval_envs = [gym.make(ENV_NAME) for _ in range(hp["num_eval_episodes"])]
    for i, eval_env in enumerate(eval_envs):  # seed once; later resets continue the streams
        eval_env.reset(seed=args.seed + EVAL_SEED_OFFSET + i)
    model = SAC(
        "MlpPolicy", gym.make(ENV_NAME),
        learning_rate=hp["learning_rate"], buffer_size=hp["buffer_size"],
        learning_starts=WARMUP, batch_size=hp["batch_size"], tau=hp["tau"],
        gamma=hp["gamma"], train_freq=1, gradient_steps=1,
        ent_coef=f"auto_{hp['initial_alpha']}", target_entropy=hp["target_entropy"],
        policy_kwargs={"net_arch": list(hp["hidden"]), "activation_fn": torch.nn.ReLU},
        seed=args.seed, device="cpu", verbose=0,
    )
    setup_s = time.monotonic() - setup_start
    evals: list[dict[str, Any]] = []
    start = 0.0

    def run_eval() -> float:
        tick = time.monotonic()
        obs = np.stack([env.reset()[0] for env in eval_envs])
        returns = np.zeros(len(eval_envs))
        for _ in range(eval_envs[0].spec.max_episode_steps):  # Pendulum: fixed 200 steps
            actions, _ = model.predict(obs, deterministic=True)
            for i, (env, action) in enumerate(zip(eval_envs, actions, strict=True)):
                obs[i], reward, _, _, _ = env.step(action)
                returns[i] += reward
        average = float(returns.mean())
        done = time.monotonic()
        evals.append({"env_steps": model.num_timesteps, "average_return": average,
                      "eval_s": done - tick, "t_end_s": done - start})
        return average

    class EvalAndStop(BaseCallback):
        """Evaluates at the start of a rollout (after the previous step's update) every
        EVAL_EVERY steps; the next step's callback stops learn() once the target is met."""

        def __init__(self) -> None:
            super().__init__()
            self.reached = False

        def _on_rollout_start(self) -> None:
            if self.num_timesteps and self.num_timesteps % EVAL_EVERY == 0:
                self.reached = run_eval() >= TARGET_RETURN

        def _on_step(self) -> bool:
            return not self.reached

    callback = EvalAndStop()
    start = time.monotonic()
    model.learn(total_timesteps=args.num_env_steps, callback=callback)
    if not callback.reached and (not evals or evals[-1]["env_steps"] != model.num_timesteps):
        run_eval()  # the end-of-budget evaluation, as ALF does
    wall_s = time.monotonic() - start
    return {
        "framework": "sb3", "seed": args.seed, "torch_num_threads": torch.get_num_threads(),
        "env_steps": model.num_timesteps, "iterations": model.num_timesteps,
        "train_time_s": None, "wall_s": wall_s, "setup_s": setup_s,
        "phase": _phase(evals, "t_end_s"), "phase_train_only": None,
        "stop_via": "callback", "load_1min_at_end": os.getloadavg()[0], "evals": evals,
        "versions": {"torch": torch.__version__,
                     "stable_baselines3": package_version("stable-baselines3")},
    }


# ------------------------------------------------------------------------- reporting
def _rate(phase: list | None) -> float | None:
    return phase[0] / phase[1] if phase and phase[1] > 0 else None


def _summarize_run(run: dict[str, Any]) -> dict[str, Any]:
    reached = first_reaching(run["evals"], TARGET_RETURN)
    run["updates_per_s"] = _rate(run["phase"])
    run["train_only_updates_per_s"] = _rate(run["phase_train_only"])
    run["time_to_target_s"] = reached["t_end_s"] if reached else None
    run["env_steps_to_target"] = reached["env_steps"] if reached else None
    run["eval_time_s"] = sum(e["eval_s"] for e in run["evals"])
    run["final_eval_return"] = run["evals"][-1]["average_return"] if run["evals"] else None
    return run


def _med(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return median(values) if values else None


def _aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    times = [math.inf if r["time_to_target_s"] is None else r["time_to_target_s"] for r in runs]
    median_time = median(times)
    return {
        "median_updates_per_s": _med([r["updates_per_s"] for r in runs]),
        "median_train_only_updates_per_s": _med([r["train_only_updates_per_s"] for r in runs]),
        "median_time_to_target_s": None if math.isinf(median_time) else median_time,
        "median_env_steps_to_target": _med([r["env_steps_to_target"] for r in runs]),
        "reached": sum(1 for t in times if not math.isinf(t)),
        "num_runs": len(runs),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _report(results: dict[str, Any]) -> str:
    m, s = results["machine"], results["settings"]
    out = [
        "== SAC Pendulum-v1 benchmark: ALF vs Stable-Baselines3 ==",
        f"machine: nproc={m['nproc']} (available: {m['cpus_available']}), cpu={m['cpu_model']}",
        f"         {m['platform']}, python {m['python']}, load average (1/5/15 min) at "
        f"start {m['load_average_1_5_15min']}, at end {m['load_average_at_end']}, "
        f"OMP_NUM_THREADS={m['omp_num_threads_env']}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"settings: seeds={s['seeds']}, threads={s['threads']}, num_env_steps="
        f"{s['num_env_steps']}, eval every {EVAL_EVERY} env steps (10 deterministic "
        f"episodes), stop at average return >= {TARGET_RETURN:g}",
        "hyperparameters: " + ", ".join(f"{k}={v}" for k, v in HPARAMS.items()),
        "",
    ]
    header = ["framework", "thr", "seed", "env steps", "setup s", "wall s", "eval s",
              "updates/s", "ALF train-only upd/s", "time to -200 s", "steps to -200",
              "final return", "load"]
    rows = [[r["framework"], r["torch_num_threads"], r["seed"], fmt_num(r["env_steps"]),
             f"{r['setup_s']:.1f}", f"{r['wall_s']:.1f}", f"{r['eval_time_s']:.1f}",
             fmt_num(r["updates_per_s"], 1), fmt_num(r["train_only_updates_per_s"], 1),
             fmt_seconds(r["time_to_target_s"]), fmt_num(r["env_steps_to_target"]),
             fmt_num(r["final_eval_return"], 1), f"{r['load_1min_at_end']:.1f}"]
            for r in results["runs"]]
    out += ["per run:", format_table(header, rows), ""]
    header = ["framework", "thr", "median updates/s", "median ALF train-only upd/s",
              "median time to -200 s", "median steps to -200", "reached"]
    rows = [[name, thr, fmt_num(a["median_updates_per_s"], 1),
             fmt_num(a["median_train_only_updates_per_s"], 1),
             fmt_seconds(a["median_time_to_target_s"]), fmt_num(a["median_env_steps_to_target"]),
             f"{a['reached']}/{a['num_runs']}"]
            for (name, thr), a in ((tuple(k.split("@")), v)
                                   for k, v in results["summary"].items())]
    out += ["summary (medians over seeds):", format_table(header, rows)]
    for thr, ratio in results.get("ratios", {}).items():
        def fmt(v: float | None, target: str) -> str:
            return f"{v:.2f}  (target {target})" if v is not None else "n/a (not reached)"
        out += ["", f"threads {thr}:",
                "  ALF updates/s / SB3 updates/s             = "
                + fmt(ratio["updates_alf_over_sb3"], ">= 1.3"),
                "  ALF train-only updates/s / SB3 updates/s  = "
                + fmt(ratio["train_only_updates_alf_over_sb3"], ">= 1.3"),
                "  ALF time to -200 / SB3 time to -200       = "
                + fmt(ratio["time_to_target_alf_over_sb3"], "<= 0.6")]
    out += [
        "",
        "updates/s: gradient updates / (wall time from the eval at env step 1000 to the last "
        "eval, minus evaluations); 1 env step per update, so also env steps/s.",
        "ALF train-only upd/s: the same updates / RLTrainer.train_time_s of that phase "
        "(collect + update; no summaries/checkpoints).",
        "time to -200: wall time from train()/learn() start to the end of the first eval "
        "with average return >= -200 (warm-up and evals included; setup excluded).",
        "load: 1-min load average when the run ended (all processes, this run's "
        "threads included).",
    ]
    nproc = m.get("cpus_available") or m.get("nproc") or 1
    # A run's own threads add up to ~threads to the load it sees; count only the rest.
    start_load = (m["load_average_1_5_15min"] or [0.0])[0]
    other = max([start_load] + [r["load_1min_at_end"] - r["torch_num_threads"]
                                for r in results["runs"]])
    if other > 0.5 * nproc:
        out.append(f"WARNING: other processes kept the machine busy (1-min load average up to "
                   f"{other:.2f} beyond the benchmark's own threads, on {nproc} CPUs); "
                   "timings are not representative.")
    return "\n".join(out)


# ------------------------------------------------------------------------------ main
def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                   help="seeds (default 0 1 2)")
    p.add_argument("--threads", type=int, nargs="+", default=[2],
                   help="torch thread count(s) for both frameworks, e.g. '1 2' (default 2)")
    p.add_argument("--num_env_steps", type=int, default=20_000,
                   help="env-step budget per run (default 20000)")
    p.add_argument("--skip_sb3", action="store_true", help="benchmark ALF only")
    p.add_argument("--compile", action="store_true",
                   help="also run ALF with TrainerConfig.compile=True (a third contender, "
                        "alternating with the others; its compile time is in its time to "
                        "-200, not in updates/s)")
    p.add_argument("--json", default=None, help="also write the raw numbers to this file")
    p.add_argument("--worker_timeout_s", type=float, default=3600.0)
    p.add_argument("--verbose", action="store_true", help="show the workers' logs")
    p.add_argument("--worker", choices=["alf", "sb3"], help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.worker:
        emit_result((worker_alf if args.worker == "alf" else worker_sb3)(args))
        return 0
    frameworks = ["alf", *(["alf-compiled"] if args.compile else []),
                  *([] if args.skip_sb3 else ["sb3"])]
    if "sb3" in frameworks and package_version("stable-baselines3") is None:
        print("stable-baselines3 is not installed: `pip install stable-baselines3`, or pass "
              "--skip_sb3", file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        "benchmark": "sac_pendulum",
        "machine": machine_info(("torch", "gymnasium", "numpy", "alf", "stable-baselines3")),
        "settings": {"seeds": args.seeds, "threads": args.threads,
                     "num_env_steps": args.num_env_steps, "eval_every_steps": EVAL_EVERY,
                     "target_return": TARGET_RETURN,
                     "hyperparameters": {**HPARAMS, "hidden": list(HPARAMS["hidden"])}},
        "runs": [],
    }
    failures = 0
    for threads in args.threads:
        for seed in args.seeds:
            for framework in frameworks:  # alternate so load drift hits both alike
                worker = "alf" if framework == "alf-compiled" else framework
                argv_w = [SCRIPT, "--worker", worker, "--seed", str(seed), "--threads",
                          str(threads), "--num_env_steps", str(args.num_env_steps),
                          *(["--compile"] if framework == "alf-compiled" else [])]
                print(f"running {framework} threads {threads} seed {seed} ...", end=" ",
                      flush=True)
                tick = time.monotonic()
                try:
                    run = run_worker(argv_w, timeout_s=args.worker_timeout_s,
                                     verbose=args.verbose)
                except WorkerError as err:
                    failures += 1
                    print(f"FAILED\n{err}", flush=True)
                    continue
                run = _summarize_run(run)
                results["runs"].append(run)
                print(f"{time.monotonic() - tick:.0f}s (updates/s "
                      f"{fmt_num(run['updates_per_s'], 1)}, time to {TARGET_RETURN:g}: "
                      f"{fmt_seconds(run['time_to_target_s'])})", flush=True)
    summary: dict[str, Any] = {}
    ratios: dict[str, Any] = {}
    for threads in args.threads:
        for name in frameworks:
            runs = [r for r in results["runs"]
                    if r["framework"] == name and r["torch_num_threads"] == threads]
            if runs:
                summary[f"{name}@{threads}"] = _aggregate(runs)
        sb3 = summary.get(f"sb3@{threads}")
        for name in ("alf", "alf-compiled"):
            alf = summary.get(f"{name}@{threads}")
            if not (alf and sb3):
                continue
            key = str(threads) if name == "alf" else f"{threads} compiled"
            ratios[key] = {
                "updates_alf_over_sb3": _ratio(alf["median_updates_per_s"],
                                               sb3["median_updates_per_s"]),
                "train_only_updates_alf_over_sb3": _ratio(
                    alf["median_train_only_updates_per_s"], sb3["median_updates_per_s"]),
                "time_to_target_alf_over_sb3": _ratio(alf["median_time_to_target_s"],
                                                      sb3["median_time_to_target_s"]),
            }
    results["summary"], results["ratios"] = summary, ratios
    results["machine"]["load_average_at_end"] = machine_info(())["load_average_1_5_15min"]
    write_report(results, _report(results), args.json)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
