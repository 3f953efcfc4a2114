r"""Benchmark: ALF PPO vs. Stable-Baselines3 PPO and a plain-PyTorch PPO loop
(``bare_ppo.py``) on CartPole-v1, same hyperparameters.

The plain loop is the limit an eager framework can approach: the report gives ALF's
throughput as a percentage of it (``--skip_bare`` leaves it out).

For every seed, each framework trains in a fresh subprocess (so torch thread settings,
gin state and imports cannot leak between runs); the frameworks alternate per seed so
that a drifting machine load affects both alike. Each run reports:

* **training throughput**: env steps / time spent collecting and training, evaluation
  excluded. ALF: ``RLTrainer.train_time_s`` (unroll + update only). SB3: wall time of
  ``learn()`` minus the time spent in evaluations. For reference the ALF line also has
  the whole-loop throughput (``train()`` wall time minus evaluations, i.e. including
  summaries and checkpoints), which is the closer analogue of the SB3 number.
* **time to 475**: wall time from the start of training to the end of the first
  evaluation whose 10-episode deterministic average return is >= 475, everything
  included (evaluations, summaries, checkpoints), or "not reached".

Evaluations run every ``--eval_every_steps`` env steps on both sides, after the update
of the rollout that crossed the mark (ALF: ``TrainerConfig.eval_interval`` in iterations;
SB3: a small callback that evaluates at the start of the next rollout), plus once at
the end of the budget. Both evaluate 10 deterministic episodes on 10 separate
environments stepped as one batch (seeded ``seed + 1_000_003``), one episode each.

Usage::

    python benchmarks/ppo/ppo_cart_pole.py                       # 3 seeds, 100k steps each
    python benchmarks/ppo/ppo_cart_pole.py --seeds 0 --num_env_steps 20000   # quick smoke run
    python benchmarks/ppo/ppo_cart_pole.py --json /tmp/ppo_cart_pole.json

Stable-Baselines3 is not an ALF dependency: install it (``pip install stable-baselines3``)
or pass ``--skip_sb3``.
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
ENV_NAME = "CartPole-v1"
SOLVED_RETURN = 475.0
EVAL_SEED_OFFSET = 1_000_003  # same as alf.trainers.components.EVAL_SEED_OFFSET

# The hyperparameters both frameworks are configured from.
HPARAMS: dict[str, Any] = {
    "num_envs": 8,
    "n_steps": 32,  # ALF: TrainerConfig.unroll_length
    "n_epochs": 20,
    "batch_size": 256,  # ALF: PPOAlgorithm.mini_batch_size
    "learning_rate": 1e-3,  # linearly decayed to 0 over the budget
    "clip_range": 0.2,  # linearly decayed to 0 over the budget
    "gae_lambda": 0.8,
    "gamma": 0.98,
    "hidden": (64, 64),  # actor and critic, separate networks, tanh
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "normalize_advantage": True,
    "num_eval_episodes": 10,
}
STEPS_PER_ITERATION = HPARAMS["num_envs"] * HPARAMS["n_steps"]


# --------------------------------------------------------------------------- workers
def _alf_conf_params(seed: int, num_env_steps: int, eval_interval: int,
                     threads: int | None) -> list[str]:
    """Bindings pinning every benchmarked hyperparameter (they win over the .gin file)."""
    hp = HPARAMS
    params = [
        f'create_environment.env_name="{ENV_NAME}"',
        f"create_environment.num_parallel_environments={hp['num_envs']}",
        f"ActorDistributionNetwork.fc_layer_params={tuple(hp['hidden'])}",
        'ActorDistributionNetwork.activation="tanh"',
        f"ValueNetwork.fc_layer_params={tuple(hp['hidden'])}",
        'ValueNetwork.activation="tanh"',
        f"PPOAlgorithm.gamma={hp['gamma']}",
        f"PPOAlgorithm.gae_lambda={hp['gae_lambda']}",
        f"PPOAlgorithm.num_epochs={hp['n_epochs']}",
        f"PPOAlgorithm.mini_batch_size={hp['batch_size']}",
        "PPOAlgorithm.learning_rate=@lr/LinearSchedule()",
        f"lr/LinearSchedule.start={hp['learning_rate']}",
        "lr/LinearSchedule.end=0.0",
        "PPOAlgorithm.clip=@clip/LinearSchedule()",
        f"clip/LinearSchedule.start={hp['clip_range']}",
        "clip/LinearSchedule.end=0.0",
        f"PPOAlgorithm.entropy_coef={hp['ent_coef']}",
        f"PPOAlgorithm.value_loss_coef={hp['vf_coef']}",
        f"PPOAlgorithm.max_grad_norm={hp['max_grad_norm']}",
        f"PPOAlgorithm.normalize_advantages={hp['normalize_advantage']}",
        f"TrainerConfig.unroll_length={hp['n_steps']}",
        f"TrainerConfig.num_env_steps={num_env_steps}",
        f"TrainerConfig.eval_interval={eval_interval}",
        f"TrainerConfig.num_eval_episodes={hp['num_eval_episodes']}",
        f"TrainerConfig.num_eval_environments={hp['num_eval_episodes']}",
        f"TrainerConfig.random_seed={seed}",
    ]
    if threads is not None:
        params.append(f"TrainerConfig.torch_num_threads={threads}")
    return params


def worker_alf(args: argparse.Namespace) -> dict[str, Any]:
    """One ALF run, built in-process from ``alf/examples/ppo_cart_pole.gin``."""
    import torch
    from absl import logging as absl_logging

    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.trainers import RLTrainer, TrainerConfig

    absl_logging.set_verbosity(absl_logging.WARNING)
    setup_start = time.monotonic()
    conf_file = os.path.join(alf_config.EXAMPLES_DIR, "ppo_cart_pole.gin")
    eval_interval = args.eval_every_steps // STEPS_PER_ITERATION
    import_configurables()
    alf_config.load_config(
        conf_file,
        _alf_conf_params(args.seed, args.num_env_steps, eval_interval, args.alf_threads)
        + list(args.alf_conf_param),
    )
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
                evals.append({"env_steps": trainer.env_steps, "iteration": trainer.iteration,
                              "average_return": result.average_return,
                              "eval_s": done - tick, "t_end_s": done - start})
            return result

        trainer.evaluate = timed_evaluate
        try:
            start = time.monotonic()
            trainer.train()
            wall_s = time.monotonic() - start
        finally:
            trainer.close()
        eval_s = sum(e["eval_s"] for e in evals)
        return {
            "framework": "alf",
            "seed": args.seed,
            "torch_num_threads": torch.get_num_threads(),
            "torch_num_threads_source": ("--alf_threads" if args.alf_threads is not None
                                         else "TrainerConfig.torch_num_threads (gin)"),
            "configured_torch_num_threads": trainer.config.torch_num_threads,
            "env_steps": trainer.env_steps,
            "iterations": trainer.iteration,
            "train_time_s": trainer.train_time_s,
            "loop_time_excl_eval_s": wall_s - eval_s,
            "eval_time_s": eval_s,
            "wall_s": wall_s,
            "setup_s": setup_s,
            "eval_interval_iterations": eval_interval,
            "evals": evals,
            "versions": {"torch": torch.__version__, "alf": package_version("alf")},
        }


def _sb3_evaluate(model: Any, envs: list[Any]) -> float:
    """One deterministic episode on each env, all stepped as one batch; mean return."""
    import numpy as np

    obs = np.stack([env.reset()[0] for env in envs])
    returns = np.zeros(len(envs))
    active = np.ones(len(envs), dtype=bool)
    while active.any():
        idx = np.flatnonzero(active)
        actions, _ = model.predict(obs[idx], deterministic=True)
        for i, action in zip(idx, actions, strict=True):
            o, reward, terminated, truncated, _ = envs[i].step(int(action))
            returns[i] += reward
            obs[i] = o
            if terminated or truncated:
                active[i] = False
    return float(returns.mean())


def worker_sb3(args: argparse.Namespace) -> dict[str, Any]:
    """One Stable-Baselines3 run with the same hyperparameters."""
    import gymnasium as gym
    import torch

    torch.set_num_threads(args.threads)
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    hp = HPARAMS
    eval_every = (args.eval_every_steps // STEPS_PER_ITERATION) * STEPS_PER_ITERATION
    setup_start = time.monotonic()
    env = make_vec_env(ENV_NAME, n_envs=hp["num_envs"], seed=args.seed)
    eval_envs = [gym.make(ENV_NAME) for _ in range(hp["num_eval_episodes"])]
    for i, eval_env in enumerate(eval_envs):  # seed once; later resets continue the streams
        eval_env.reset(seed=args.seed + EVAL_SEED_OFFSET + i)
        eval_env.action_space.seed(args.seed + EVAL_SEED_OFFSET + i)

    def linear(start: float):
        # progress_remaining goes 1 -> 0 (slightly below 0 on the last rollout); clamp.
        return lambda progress_remaining: start * max(progress_remaining, 0.0)

    model = PPO(
        "MlpPolicy",
        env,
        n_steps=hp["n_steps"],
        batch_size=hp["batch_size"],
        n_epochs=hp["n_epochs"],
        learning_rate=linear(hp["learning_rate"]),
        clip_range=linear(hp["clip_range"]),
        gamma=hp["gamma"],
        gae_lambda=hp["gae_lambda"],
        ent_coef=hp["ent_coef"],
        vf_coef=hp["vf_coef"],
        max_grad_norm=hp["max_grad_norm"],
        normalize_advantage=hp["normalize_advantage"],
        policy_kwargs={"net_arch": {"pi": list(hp["hidden"]), "vf": list(hp["hidden"])},
                       "activation_fn": torch.nn.Tanh},
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    setup_s = time.monotonic() - setup_start
    evals: list[dict[str, Any]] = []
    start = 0.0

    def run_eval() -> None:
        tick = time.monotonic()
        average = _sb3_evaluate(model, eval_envs)
        done = time.monotonic()
        evals.append({"env_steps": model.num_timesteps, "average_return": average,
                      "eval_s": done - tick, "t_end_s": done - start})

    class PeriodicEval(BaseCallback):
        """Evaluates once the policy has been updated on ``eval_every`` more steps.

        ``on_rollout_start`` runs after the previous rollout's ``train()``, which is
        where ALF evaluates too (after the iteration's update).
        """

        def __init__(self) -> None:
            super().__init__()
            self.next_eval = eval_every

        def _on_rollout_start(self) -> None:
            if eval_every > 0 and self.num_timesteps >= self.next_eval:
                run_eval()
                while self.next_eval <= self.num_timesteps:
                    self.next_eval += eval_every

        def _on_step(self) -> bool:
            return True

    start = time.monotonic()
    model.learn(total_timesteps=args.num_env_steps, callback=PeriodicEval())
    learn_s = time.monotonic() - start
    eval_in_learn_s = sum(e["eval_s"] for e in evals)
    if not evals or evals[-1]["env_steps"] != model.num_timesteps:
        run_eval()  # the end-of-budget evaluation, as ALF does
    wall_s = time.monotonic() - start
    env.close()
    for eval_env in eval_envs:
        eval_env.close()
    return {
        "framework": "sb3",
        "seed": args.seed,
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_threads_source": "--threads",
        "env_steps": model.num_timesteps,
        "iterations": model.num_timesteps // STEPS_PER_ITERATION,
        "train_time_s": learn_s - eval_in_learn_s,
        "loop_time_excl_eval_s": learn_s - eval_in_learn_s,
        "eval_time_s": sum(e["eval_s"] for e in evals),
        "wall_s": wall_s,
        "setup_s": setup_s,
        "eval_every_steps": eval_every,
        "evals": evals,
        "versions": {"torch": torch.__version__,
                     "stable_baselines3": package_version("stable-baselines3")},
    }


def worker_bare(args: argparse.Namespace) -> dict[str, Any]:
    """One run of the plain-PyTorch loop in ``bare_ppo.py`` (same hyperparameters; one
    thread unless ``--alf_threads`` says otherwise, as ALF's config)."""
    import bare_ppo

    assert bare_ppo.HPARAMS.items() >= {k: v for k, v in HPARAMS.items()
                                        if k != "normalize_advantage"}.items()
    result = bare_ppo.train(seed=args.seed, num_env_steps=args.num_env_steps,
                            eval_every_steps=args.eval_every_steps,
                            threads=args.alf_threads or 1)
    result["torch_num_threads_source"] = "--alf_threads (default 1)"
    return result


def _paired_percent(runs: list[dict[str, Any]]) -> list[float]:
    """ALF's throughput as a percentage of the bare loop's, per seed (the two ran back to
    back)."""
    by_seed: dict[int, dict[str, float]] = {}
    for run in runs:
        by_seed.setdefault(run["seed"], {})[run["framework"]] = run["throughput"]
    return [100 * r["alf"] / r["bare"] for r in by_seed.values() if "alf" in r and "bare" in r]


# ------------------------------------------------------------------------- reporting
def _summarize_run(run: dict[str, Any], solved_return: float) -> dict[str, Any]:
    reached = first_reaching(run["evals"], solved_return)
    run["throughput"] = run["env_steps"] / run["train_time_s"]
    run["loop_throughput"] = run["env_steps"] / run["loop_time_excl_eval_s"]
    run["time_to_solved_s"] = reached["t_end_s"] if reached else None
    run["env_steps_to_solved"] = reached["env_steps"] if reached else None
    run["final_eval_return"] = run["evals"][-1]["average_return"] if run["evals"] else None
    return run


def _aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["time_to_solved_s"] if r["time_to_solved_s"] is not None else math.inf for r in runs]
    median_time = median(times)
    return {
        "median_throughput": median([r["throughput"] for r in runs]),
        "median_loop_throughput": median([r["loop_throughput"] for r in runs]),
        "median_time_to_solved_s": None if math.isinf(median_time) else median_time,
        "reached_solved": sum(1 for t in times if not math.isinf(t)),
        "num_runs": len(runs),
        "torch_num_threads": sorted({r["torch_num_threads"] for r in runs}),
    }


def _report(results: dict[str, Any]) -> str:
    out: list[str] = []
    m = results["machine"]
    s = results["settings"]
    thr = f"{s['solved_return']:g}"
    out.append("== PPO CartPole-v1 benchmark: ALF vs Stable-Baselines3 ==")
    out.append(f"machine: nproc={m['nproc']} (available to this process: "
               f"{m['cpus_available']}), cpu={m['cpu_model']}")
    out.append(f"         {m['platform']}, python {m['python']}, "
               f"load average (1/5/15 min) at start {m['load_average_1_5_15min']}, "
               f"at end {m['load_average_at_end']}, "
               f"OMP_NUM_THREADS={m['omp_num_threads_env']}")
    out.append("versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()))
    out.append(f"settings: seeds={s['seeds']}, num_env_steps={s['num_env_steps']}, "
               f"eval every {s['eval_every_steps_effective']} env steps "
               f"(ALF eval_interval={s['alf_eval_interval']} iterations), "
               f"{HPARAMS['num_eval_episodes']} deterministic eval episodes, "
               f"solved at average return >= {thr}")
    out.append("hyperparameters: " + ", ".join(f"{k}={v}" for k, v in HPARAMS.items()))
    out.append("")

    header = ["framework", "seed", "threads", "env steps", "setup s", "train s", "steps/s",
              "loop steps/s", "eval s", "wall s", f"time to {thr} s", f"steps to {thr}",
              "final return"]
    rows = []
    for r in results["runs"]:
        rows.append([r["framework"], r["seed"], r["torch_num_threads"], fmt_num(r["env_steps"]),
                     f"{r['setup_s']:.1f}", f"{r['train_time_s']:.1f}", fmt_num(r["throughput"]),
                     fmt_num(r["loop_throughput"]), f"{r['eval_time_s']:.1f}",
                     f"{r['wall_s']:.1f}", fmt_seconds(r["time_to_solved_s"]),
                     fmt_num(r["env_steps_to_solved"]), fmt_num(r["final_eval_return"], 1)])
    out.append("per run:")
    out.append(format_table(header, rows))
    out.append("")

    header = ["framework", "threads", "median steps/s", "median loop steps/s",
              f"median time to {thr} s", f"reached {thr}"]
    rows = []
    for name, agg in results["summary"].items():
        rows.append([name, ",".join(map(str, agg["torch_num_threads"])),
                     fmt_num(agg["median_throughput"]), fmt_num(agg["median_loop_throughput"]),
                     fmt_seconds(agg["median_time_to_solved_s"]),
                     f"{agg['reached_solved']}/{agg['num_runs']}"])
    out.append("summary (medians over seeds):")
    out.append(format_table(header, rows))
    if "alf_percent_of_bare" in results:
        per_seed = ", ".join(f"{p:.0f}%" for p in results["alf_percent_of_bare_per_seed"])
        out.append("")
        out.append(f"ALF throughput = {results['alf_percent_of_bare']:.0f}% of the plain-PyTorch "
                   f"loop (bare_ppo.py; per seed, runs side by side: {per_seed})")
    ratios = results.get("ratios")
    if ratios:
        out.append("")
        out.append(f"throughput ALF/SB3          = {ratios['throughput_alf_over_sb3']:.2f}x"
                   "  (steps/s; >1 means ALF trains faster)")
        out.append(f"loop throughput ALF/SB3     = "
                   f"{ratios['loop_throughput_alf_over_sb3']:.2f}x"
                   "  (ALF incl. summaries/checkpoints)")
        t = ratios["time_to_solved_sb3_over_alf"]
        out.append(f"time to {thr} SB3/ALF         = "
                   + (f"{t:.2f}x  (>1 means ALF gets there sooner)" if t is not None else
                      "n/a (a median was 'not reached')"))
    out.append("")
    out.append("steps/s: env steps / (collect + train time), evaluation excluded "
               "(ALF: RLTrainer.train_time_s; SB3: learn() minus evaluations).")
    out.append("loop steps/s: env steps / (training-loop wall time minus evaluations); ALF's "
               "loop also writes summaries and checkpoints.")
    out.append(f"time to {thr}: wall time from the start of training to the end of the first "
               f"evaluation with average return >= {thr}, evaluations included.")
    out.append("setup s: building environments, model and optimizer before training starts "
               "(not in any other column).")
    out.extend(_warnings(results))
    return "\n".join(out)


def _warnings(results: dict[str, Any]) -> list[str]:
    """Caveats that change how the numbers should be read."""
    notes = []
    threads = {name: agg["torch_num_threads"] for name, agg in results["summary"].items()}
    if "alf" in threads and "sb3" in threads and threads["alf"] != threads["sb3"]:
        notes.append(
            f"WARNING: the frameworks used different torch thread counts (ALF "
            f"{threads.get('alf')}, SB3 {threads.get('sb3')}); for these tiny networks the "
            "thread count can dominate the result, especially on a busy machine. Compare "
            "with equal counts too (e.g. --threads 1).")
    m = results["machine"]
    nproc = m.get("cpus_available") or m.get("nproc") or 1
    loads = [m.get("load_average_1_5_15min"), m.get("load_average_at_end")]
    busiest = max((load[0] for load in loads if load), default=0.0)
    if busiest > 0.5 * nproc:
        notes.append(
            f"WARNING: the machine was busy (1-min load average up to {busiest:.2f} on "
            f"{nproc} CPUs) - timings are not representative; rerun on an idle machine.")
    return [""] + notes if notes else []


# ------------------------------------------------------------------------------ main
def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--num_env_steps", type=int, default=100_000,
                   help="training env steps per run (default 100000)")
    p.add_argument("--eval_every_steps", type=int, default=10_240,
                   help="env steps between evaluations; rounded down to a multiple of "
                        f"{STEPS_PER_ITERATION} (default 10240 = 40 iterations)")
    p.add_argument("--threads", type=int, default=2,
                   help="torch threads for SB3 (default 2, as the reference measurement)")
    p.add_argument("--alf_threads", type=int, default=None,
                   help="torch threads for ALF (default: the config's "
                        "TrainerConfig.torch_num_threads, 1)")
    p.add_argument("--alf_conf_param", action="append", default=[],
                   help="an extra gin binding for ALF (repeatable), e.g. "
                        "'ActorCriticAlgorithm.numpy_rollout=False'")
    p.add_argument("--solved_return", type=float, default=SOLVED_RETURN,
                   help="evaluation average return that counts as solved (default 475)")
    p.add_argument("--skip_sb3", action="store_true", help="benchmark ALF only")
    p.add_argument("--skip_alf", action="store_true", help="do not run ALF")
    p.add_argument("--skip_bare", action="store_true",
                   help="do not run the plain-PyTorch reference loop (bare_ppo.py)")
    p.add_argument("--json", default=None, help="also write the raw numbers to this file")
    p.add_argument("--worker_timeout_s", type=float, default=3600.0,
                   help="kill a run after this many seconds (default 3600)")
    p.add_argument("--verbose", action="store_true", help="show the workers' logs")
    # Internal: run one measurement and print its JSON result line.
    p.add_argument("--worker", choices=["alf", "sb3", "bare"], help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _worker_main(args: argparse.Namespace) -> None:
    if args.worker == "alf":
        emit_result(worker_alf(args))
    elif args.worker == "bare":
        emit_result(worker_bare(args))
    else:
        emit_result(worker_sb3(args))


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.worker:
        _worker_main(args)
        return 0

    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.eval_every_steps < STEPS_PER_ITERATION:
        print(f"--eval_every_steps must be >= {STEPS_PER_ITERATION}", file=sys.stderr)
        return 2
    frameworks = [f for f, skip in (("alf", args.skip_alf), ("sb3", args.skip_sb3),
                                    ("bare", args.skip_bare)) if not skip]
    if not frameworks:
        print("nothing to run (--skip_alf, --skip_sb3 and --skip_bare)", file=sys.stderr)
        return 2
    if "sb3" in frameworks and package_version("stable-baselines3") is None:
        print("stable-baselines3 is not installed (it is not an ALF dependency): "
              "`pip install stable-baselines3`, or pass --skip_sb3", file=sys.stderr)
        return 2

    eval_interval = args.eval_every_steps // STEPS_PER_ITERATION
    results: dict[str, Any] = {
        "benchmark": "ppo_cart_pole",
        "machine": machine_info(("torch", "gymnasium", "numpy", "alf", "stable-baselines3")),
        "settings": {
            "seeds": seeds,
            "num_env_steps": args.num_env_steps,
            "eval_every_steps_requested": args.eval_every_steps,
            "eval_every_steps_effective": eval_interval * STEPS_PER_ITERATION,
            "alf_eval_interval": eval_interval,
            "sb3_threads": args.threads,
            "alf_threads": args.alf_threads if args.alf_threads is not None else "config",
            "solved_return": args.solved_return,
            "hyperparameters": {**HPARAMS, "hidden": list(HPARAMS["hidden"])},
        },
        "runs": [],
    }
    if eval_interval * STEPS_PER_ITERATION != args.eval_every_steps:
        print(f"note: evaluating every {eval_interval * STEPS_PER_ITERATION} env steps "
              f"({eval_interval} iterations of {STEPS_PER_ITERATION})", flush=True)

    failures = 0
    for seed in seeds:
        for framework in frameworks:  # alternate frameworks so load drift hits both
            worker_argv = [SCRIPT, "--worker", framework, "--seed", str(seed),
                           "--num_env_steps", str(args.num_env_steps),
                           "--eval_every_steps", str(args.eval_every_steps),
                           "--threads", str(args.threads)]
            if args.alf_threads is not None:
                worker_argv += ["--alf_threads", str(args.alf_threads)]
            for binding in args.alf_conf_param:
                worker_argv += ["--alf_conf_param", binding]
            print(f"running {framework} seed {seed} ...", end=" ", flush=True)
            tick = time.monotonic()
            try:
                run = run_worker(worker_argv, timeout_s=args.worker_timeout_s,
                                 verbose=args.verbose)
            except WorkerError as err:
                failures += 1
                print(f"FAILED\n{err}", flush=True)
                continue
            run = _summarize_run(run, args.solved_return)
            results["runs"].append(run)
            print(f"{time.monotonic() - tick:.0f}s (steps/s {run['throughput']:.0f}, "
                  f"time to {args.solved_return:g}: {fmt_seconds(run['time_to_solved_s'])})",
                  flush=True)

    results["summary"] = {
        name: _aggregate([r for r in results["runs"] if r["framework"] == name])
        for name in frameworks if any(r["framework"] == name for r in results["runs"])
    }
    alf, sb3 = results["summary"].get("alf"), results["summary"].get("sb3")
    bare = results["summary"].get("bare")
    if alf and bare:
        results["alf_percent_of_bare"] = 100 * alf["median_throughput"] / bare["median_throughput"]
        results["alf_percent_of_bare_per_seed"] = _paired_percent(results["runs"])
    if alf and sb3:
        t_alf, t_sb3 = alf["median_time_to_solved_s"], sb3["median_time_to_solved_s"]
        results["ratios"] = {
            "throughput_alf_over_sb3": alf["median_throughput"] / sb3["median_throughput"],
            "loop_throughput_alf_over_sb3": (alf["median_loop_throughput"]
                                             / sb3["median_loop_throughput"]),
            "time_to_solved_sb3_over_alf": (t_sb3 / t_alf if t_alf is not None
                                         and t_sb3 is not None else None),
        }
    results["machine"]["load_average_at_end"] = machine_info(())["load_average_1_5_15min"]
    write_report(results, _report(results), args.json)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
