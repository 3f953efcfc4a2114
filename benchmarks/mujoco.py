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

    python benchmarks/mujoco.py --short                 # Hopper PPO, 1 seed, 50k steps
    python benchmarks/mujoco.py --envs Hopper-v5,HalfCheetah-v5 --algos ppo --seeds 0,1,2
    python benchmarks/mujoco.py --algos sac,td3 --envs Hopper-v5 --json /tmp/mujoco.json

Stable-Baselines3 is not an ALF dependency: ``pip install stable-baselines3`` (or pass
``--frameworks alf``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# alf.utils.run_files imports nothing heavy (no torch): the parent process stays light.
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import (
    fmt_num,
    fmt_seconds,
    format_table,
    machine_info,
    median,
    package_version,
)

from alf.utils import run_files

SCRIPT = os.path.abspath(__file__)
REPO_ROOT = os.path.dirname(os.path.dirname(SCRIPT))
EXAMPLES_DIR = os.path.join(REPO_ROOT, "alf", "examples")
EVAL_SEED_OFFSET = 1_000_003  # same as alf.trainers.rl_trainer.EVAL_SEED_OFFSET
NUM_EVAL_EPISODES = 10

ENVS: dict[str, str] = {
    "Hopper-v5": "hopper",
    "HalfCheetah-v5": "half_cheetah",
    "Walker2d-v5": "walker2d",
    "Ant-v5": "ant",
}
"""Environment id -> the name used in the example configs (``ppo_<name>.gin``)."""
ALGOS = ("ppo", "sac", "td3")
FRAMEWORKS = ("alf", "sb3")
DEFAULT_NUM_ENV_STEPS = {"ppo": 1_000_000, "sac": 100_000, "td3": 100_000}
SHORT_NUM_ENV_STEPS = 50_000
DEFAULT_ROOT_DIR = "/tmp/alf_mujoco_bench"

# The hyperparameters both frameworks use (SB3 is built from these; ALF's configs are
# checked against them, see ALF_BINDINGS).
HPARAMS: dict[str, dict[str, Any]] = {
    "ppo": {
        "num_envs": 8,
        "n_steps": 256,
        "batch_size": 64,
        "n_epochs": 10,
        "learning_rate": 3e-4,  # linearly decayed to 0 over the budget
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "clip_range": 0.2,
        "ent_coef": 0.0,
        "vf_coef": 0.5,
        "max_grad_norm": 0.5,
        "normalize_advantage": True,
        "hidden": [64, 64],  # separate actor and critic MLPs, tanh
        "activation": "tanh",
        "ortho_init": True,
        "log_std_init": 0.0,
        "norm_obs": True,
        "norm_reward": True,
        "clip_obs": 10.0,
        "clip_reward": 10.0,
    },
    "sac": {
        "num_envs": 1,
        "hidden": [256, 256],
        "activation": "relu",
        "learning_rate": 3e-4,
        "batch_size": 256,
        "tau": 0.005,
        "gamma": 0.99,
        "buffer_size": 1_000_000,
        "learning_starts": 10_000,
        "train_freq": 1,
        "gradient_steps": 1,
        "ent_coef": "auto_1.0",
        "target_entropy": "auto",
    },
    "td3": {
        "num_envs": 1,
        "hidden": [256, 256],
        "activation": "relu",
        "learning_rate": 3e-4,
        "batch_size": 256,
        "tau": 0.005,
        "gamma": 0.99,
        "buffer_size": 1_000_000,
        "learning_starts": 10_000,
        "train_freq": 1,
        "gradient_steps": 1,
        "action_noise_std": 0.1,
        "target_policy_noise": 0.2,
        "target_noise_clip": 0.5,
        "policy_delay": 2,
    },
}

# ALF binding -> (expected value, ALF's default when the config does not bind it).
ALF_BINDINGS: dict[str, dict[str, tuple[str, str | None]]] = {
    "ppo": {
        "create_environment.num_parallel_environments": ("8", None),
        "TrainerConfig.unroll_length": ("256", None),
        "PPOAlgorithm.num_epochs": ("10", "10"),
        "PPOAlgorithm.mini_batch_size": ("64", "64"),
        "PPOAlgorithm.learning_rate": ("@lr/LinearSchedule()", None),
        "lr/LinearSchedule.start": ("3e-4", None),
        "PPOAlgorithm.gamma": ("0.99", None),
        "PPOAlgorithm.gae_lambda": ("0.95", None),
        "PPOAlgorithm.clip": ("0.2", "0.2"),
        "PPOAlgorithm.entropy_coef": ("0.0", None),
        "PPOAlgorithm.value_loss_coef": ("0.5", None),
        "PPOAlgorithm.max_grad_norm": ("0.5", None),
        "ObservationNormalizer.clip_value": ("10.0", "5.0"),
        "RewardNormalizer.return_based": ("True", "False"),
        "RewardNormalizer.gamma": ("0.99", "0.99"),
        "RewardNormalizer.clip_value": ("10.0", "10.0"),
        "ActorDistributionNetwork.fc_layer_params": ("(64, 64)", "(64, 64)"),
        "ActorDistributionNetwork.activation": ("tanh", "tanh"),
        "ActorDistributionNetwork.init_std": ("1.0", "1.0"),
        "ValueNetwork.fc_layer_params": ("(64, 64)", None),
        "ValueNetwork.activation": ("tanh", None),
        "TrainerConfig.num_eval_episodes": ("10", "10"),
        "TrainerConfig.num_eval_environments": ("10", "10"),
    },
    "sac": {
        "create_environment.num_parallel_environments": ("1", None),
        "TrainerConfig.unroll_length": ("1", None),
        "TrainerConfig.initial_collect_steps": ("10000", None),
        "ActorDistributionNetwork.fc_layer_params": ("(256, 256)", None),
        "ActorDistributionNetwork.activation": ("relu", None),
        "CriticNetwork.fc_layer_params": ("(256, 256)", None),
        "CriticNetwork.activation": ("relu", None),
        "SacAlgorithm.gamma": ("0.99", "0.99"),
        "SacAlgorithm.learning_rate": ("3e-4", None),
        "SacAlgorithm.mini_batch_size": ("256", "256"),
        "SacAlgorithm.target_update_tau": ("0.005", "0.005"),
        "SacAlgorithm.initial_alpha": ("1.0", "1.0"),
        "ReplayBuffer.max_length": ("1000000", None),
        "TrainerConfig.num_eval_episodes": ("10", "10"),
        "TrainerConfig.num_eval_environments": ("10", "10"),
    },
    "td3": {
        "create_environment.num_parallel_environments": ("1", None),
        "TrainerConfig.unroll_length": ("1", None),
        "TrainerConfig.initial_collect_steps": ("10000", None),
        "ActorNetwork.fc_layer_params": ("(256, 256)", None),
        "ActorNetwork.activation": ("relu", "relu"),
        "CriticNetwork.fc_layer_params": ("(256, 256)", None),
        "CriticNetwork.activation": ("relu", None),
        "Td3Algorithm.gamma": ("0.99", "0.99"),
        "Td3Algorithm.learning_rate": ("3e-4", None),
        "Td3Algorithm.mini_batch_size": ("256", "256"),
        "Td3Algorithm.target_update_tau": ("0.005", "0.005"),
        "Td3Algorithm.exploration_std": ("0.1", "0.1"),
        "Td3Algorithm.target_policy_noise": ("0.2", "0.2"),
        "Td3Algorithm.target_policy_noise_clip": ("0.5", "0.5"),
        "Td3Algorithm.actor_update_period": ("2", "2"),
        "ReplayBuffer.max_length": ("1000000", None),
        "TrainerConfig.num_eval_episodes": ("10", "10"),
        "TrainerConfig.num_eval_environments": ("10", "10"),
    },
}

# Evaluation / summary cadence when the ALF config cannot be read (SB3-only runs of a
# combination without an ALF config): what the MuJoCo configs use.
FALLBACK_EVAL_EVERY = {"ppo": 20_480, "sac": 5_000, "td3": 5_000}
FALLBACK_SUMMARY_EVERY = {"ppo": 4_096, "sac": 1_000, "td3": 1_000}


# ----------------------------------------------------------------------- ALF configs
def config_path(algo: str, env_id: str) -> str:
    """The example config of ``algo`` on ``env_id``."""
    return os.path.join(EXAMPLES_DIR, f"{algo}_{ENVS[env_id]}.gin")


def run_name(algo: str, env_id: str) -> str:
    """``<algo>_<env>``: the directory of a combination's runs (the config's name)."""
    return f"{algo}_{ENVS[env_id]}"


_INCLUDE = re.compile(r"""^\s*include\s+['"]([^'"]+)['"]""")


def read_config_bindings(path: str, _depth: int = 0) -> dict[str, str]:
    """The bindings of the gin file ``path`` with its includes resolved (relative to the
    including file, then to ``alf/examples/``), later bindings winning, as ALF does.

    Values are the text of the binding (see :func:`alf.utils.run_files.parse_bindings`).
    """
    if _depth > 10:
        raise ValueError(f"include nesting too deep at {path}")
    with open(path) as f:
        text = f.read()
    bindings: dict[str, str] = {}
    for line in text.splitlines():
        match = _INCLUDE.match(line)
        if not match:
            continue
        name = match.group(1)
        candidates = [os.path.join(os.path.dirname(path), name), os.path.join(EXAMPLES_DIR, name)]
        found = next((c for c in candidates if os.path.isfile(c)), None)
        if found is None:
            raise FileNotFoundError(f"{path}: included file '{name}' not found")
        bindings.update(read_config_bindings(found, _depth + 1))
    bindings.update(run_files.parse_bindings(text))
    return bindings


def _normalize_value(text: str) -> str:
    text = text.strip().strip("'\"")
    return re.sub(r"\s+", "", text).replace("[", "(").replace("]", ")")


def same_value(a: str, b: str) -> bool:
    """Whether two gin value texts mean the same number, string or tuple."""
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    except ValueError:
        return _normalize_value(a) == _normalize_value(b)


def check_alf_config(algo: str, bindings: dict[str, str]) -> list[str]:
    """Differences between the ALF config's bindings and the SB3 hyperparameters."""
    problems = []
    for name, (expected, default) in ALF_BINDINGS[algo].items():
        if name in bindings:
            if not same_value(bindings[name], expected):
                problems.append(f"{name} = {bindings[name]} (SB3 side uses {expected})")
        elif default is None or not same_value(default, expected):
            problems.append(f"{name} not bound (ALF default {default}; SB3 side uses {expected})")
    return problems


def _as_number(bindings: dict[str, str], name: str, default: float) -> float:
    try:
        return float(bindings[name])
    except (KeyError, ValueError):
        return default


def cadence(algo: str, bindings: dict[str, str] | None) -> dict[str, int]:
    """Env steps per ALF iteration, between evaluations and between train summaries, as
    the ALF config has them (fallbacks when there is no config)."""
    if not bindings:
        per_iteration = HPARAMS[algo]["num_envs"] * HPARAMS[algo].get("n_steps", 1)
        return {
            "steps_per_iteration": per_iteration,
            "eval_every_steps": FALLBACK_EVAL_EVERY[algo],
            "summary_every_steps": FALLBACK_SUMMARY_EVERY[algo],
        }
    per_iteration = _as_number(bindings, "TrainerConfig.unroll_length", 8) * _as_number(
        bindings, "create_environment.num_parallel_environments", 1
    )
    eval_interval = _as_number(bindings, "TrainerConfig.eval_interval", 0)
    summary_interval = _as_number(bindings, "TrainerConfig.summary_interval", 10)
    return {
        "steps_per_iteration": max(1, round(per_iteration)),
        "eval_every_steps": round(eval_interval * per_iteration),
        "summary_every_steps": max(1, round(summary_interval * per_iteration)),
    }


# ------------------------------------------------------------------------ SB3 worker
class _StopRequestedError(Exception):
    """SIGTERM in an SB3 worker."""


def _make_sb3_model(algo: str, env_id: str, seed: int, num_env_steps: int) -> tuple[Any, Any]:
    """The SB3 model and its training VecEnv (a VecNormalize for PPO)."""
    import numpy as np
    import torch
    from stable_baselines3 import PPO, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    hp = HPARAMS[algo]
    activation = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[hp["activation"]]
    venv = make_vec_env(env_id, n_envs=hp["num_envs"], seed=seed, vec_env_cls=DummyVecEnv)
    if algo == "ppo":
        venv = VecNormalize(venv, norm_obs=hp["norm_obs"], norm_reward=hp["norm_reward"],
                            clip_obs=hp["clip_obs"], clip_reward=hp["clip_reward"],
                            gamma=hp["gamma"])
        start_lr = hp["learning_rate"]
        model = PPO(
            "MlpPolicy", venv, n_steps=hp["n_steps"], batch_size=hp["batch_size"],
            n_epochs=hp["n_epochs"],
            # progress_remaining goes 1 -> 0 (a little below 0 on the last rollout)
            learning_rate=lambda progress_remaining: start_lr * max(progress_remaining, 0.0),
            gamma=hp["gamma"], gae_lambda=hp["gae_lambda"], clip_range=hp["clip_range"],
            ent_coef=hp["ent_coef"], vf_coef=hp["vf_coef"], max_grad_norm=hp["max_grad_norm"],
            normalize_advantage=hp["normalize_advantage"],
            policy_kwargs={"net_arch": {"pi": list(hp["hidden"]), "vf": list(hp["hidden"])},
                           "activation_fn": activation, "ortho_init": hp["ortho_init"],
                           "log_std_init": hp["log_std_init"]},
            seed=seed, device="cpu", verbose=0,
        )
        return model, venv
    common = {
        "learning_rate": hp["learning_rate"], "buffer_size": hp["buffer_size"],
        "learning_starts": hp["learning_starts"], "batch_size": hp["batch_size"],
        "tau": hp["tau"], "gamma": hp["gamma"], "train_freq": hp["train_freq"],
        "gradient_steps": hp["gradient_steps"],
        "policy_kwargs": {"net_arch": list(hp["hidden"]), "activation_fn": activation},
        "seed": seed, "device": "cpu", "verbose": 0,
    }
    if algo == "sac":
        model = SAC("MlpPolicy", venv, ent_coef=hp["ent_coef"],
                    target_entropy=hp["target_entropy"], **common)
    else:
        dim = venv.action_space.shape[-1]
        noise = NormalActionNoise(mean=np.zeros(dim), sigma=hp["action_noise_std"] * np.ones(dim))
        model = TD3("MlpPolicy", venv, action_noise=noise,
                    target_policy_noise=hp["target_policy_noise"],
                    target_noise_clip=hp["target_noise_clip"], policy_delay=hp["policy_delay"],
                    **common)
    return model, venv


def _sb3_evaluate(model: Any, envs: list[Any], normalizer: Any) -> tuple[float, float]:
    """One deterministic episode on each env, stepped as one batch; mean return and
    length. ``normalizer`` (a VecNormalize or None) scales observations with its current
    statistics, which this does not update."""
    import numpy as np

    obs = np.stack([env.reset()[0] for env in envs])
    returns = np.zeros(len(envs))
    lengths = np.zeros(len(envs), dtype=np.int64)
    active = np.ones(len(envs), dtype=bool)
    while active.any():
        idx = np.flatnonzero(active)
        batch = obs[idx] if normalizer is None else normalizer.normalize_obs(obs[idx])
        actions, _ = model.predict(batch, deterministic=True)
        for i, action in zip(idx, actions, strict=True):
            o, reward, terminated, truncated, _ = envs[i].step(action)
            returns[i] += reward
            lengths[i] += 1
            obs[i] = o
            if terminated or truncated:
                active[i] = False
    return float(returns.mean()), float(lengths.mean())


def worker_sb3(args: argparse.Namespace) -> dict[str, Any]:
    """One SB3 run that writes an ALF-format run directory; returns its summary."""
    # This script is named mujoco.py: its directory must not shadow the mujoco package.
    bench_dir = os.path.dirname(SCRIPT)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != bench_dir]
    import gymnasium as gym
    import torch

    torch.set_num_threads(args.threads)
    from stable_baselines3.common.callbacks import BaseCallback

    algo, env_id, run_dir = args.algo, args.env, args.run_dir
    os.makedirs(run_dir, exist_ok=True)
    run_files.write_json_atomic(os.path.join(run_dir, run_files.METADATA_FILE), {
        "framework": "sb3",
        "env_name": env_id,
        "algorithm": algo.upper(),
        "seed": args.seed,
        "sb3_version": package_version("stable-baselines3"),
        "versions": {name: package_version(name)
                     for name in ("torch", "gymnasium", "mujoco", "numpy")},
        "hyperparameters": HPARAMS[algo],
        "num_env_steps": args.num_env_steps,
        "eval_every_steps": args.eval_every_steps,
        "summary_every_steps": args.summary_every_steps,
        "num_eval_episodes": NUM_EVAL_EPISODES,
        "torch_num_threads": torch.get_num_threads(),
        "command": [sys.executable, *sys.argv],
        "host": os.uname().nodename,
        "start_time": time.time(),
    })
    run_files.write_status(run_dir, run_files.RunStatus.RUNNING,
                           num_env_steps=args.num_env_steps)

    def on_sigterm(signum: int, frame: Any) -> None:
        raise _StopRequestedError()

    signal.signal(signal.SIGTERM, on_sigterm)
    progress = open(os.path.join(run_dir, run_files.PROGRESS_FILE), "w")  # noqa: SIM115
    try:
        model, venv = _make_sb3_model(algo, env_id, args.seed, args.num_env_steps)
        eval_envs = [gym.make(env_id) for _ in range(NUM_EVAL_EPISODES)]
        for i, eval_env in enumerate(eval_envs):  # seeded once; later resets continue
            eval_env.reset(seed=args.seed + EVAL_SEED_OFFSET + i)
            eval_env.action_space.seed(args.seed + EVAL_SEED_OFFSET + i)
        normalizer = venv if algo == "ppo" else None
        steps_per_iteration = HPARAMS[algo]["num_envs"] * HPARAMS[algo].get("n_steps", 1)
        state = {"eval_s": 0.0, "next_eval": args.eval_every_steps,
                 "next_summary": args.summary_every_steps, "window_steps": 0,
                 "window_train_s": 0.0, "last_steps": 0, "last_train_s": 0.0,
                 "last_eval": None, "last_eval_steps": -1}
        start = time.monotonic()

        def write(record: dict[str, Any]) -> None:
            progress.write(json.dumps(record) + "\n")
            progress.flush()

        def base_record(now: float) -> dict[str, Any]:
            steps = int(model.num_timesteps)
            return {"iteration": steps // steps_per_iteration, "env_steps": steps,
                    "elapsed_s": round(now - start, 3),
                    "train_time_s": round(now - start - state["eval_s"], 3)}

        def evaluate() -> None:
            tick = time.monotonic()
            record = base_record(tick)
            average, length = _sb3_evaluate(model, eval_envs, normalizer)
            done = time.monotonic()
            state["eval_s"] += done - tick
            record["elapsed_s"] = round(done - start, 3)
            record["eval/average_return"] = average
            record["eval/average_episode_length"] = length
            state["last_eval"], state["last_eval_steps"] = average, model.num_timesteps
            write(record)

        def summarize() -> None:
            now = time.monotonic()
            record = base_record(now)
            train_s = record["train_time_s"]
            steps = int(model.num_timesteps)
            window_steps = steps - state["last_steps"]
            window_s = max(train_s - state["last_train_s"], 1e-9)
            state["last_steps"], state["last_train_s"] = steps, train_s
            record["fps"] = round(window_steps / window_s, 1)
            episodes = list(model.ep_info_buffer)  # the last 100 episodes, like ALF's
            if episodes:
                record["train/average_return"] = float(
                    sum(e["r"] for e in episodes) / len(episodes))
                record["train/average_episode_length"] = float(
                    sum(e["l"] for e in episodes) / len(episodes))
            write(record)

        def after_update() -> None:
            """After an iteration's update (ALF's summary / evaluation point)."""
            steps = model.num_timesteps
            if steps >= state["next_summary"]:
                summarize()
                while state["next_summary"] <= steps:
                    state["next_summary"] += args.summary_every_steps
            if args.eval_every_steps > 0 and steps >= state["next_eval"]:
                evaluate()
                while state["next_eval"] <= steps:
                    state["next_eval"] += args.eval_every_steps

        class Recorder(BaseCallback):
            """``on_rollout_start`` runs after the previous rollout's ``train()``."""

            def _on_rollout_start(self) -> None:
                after_update()

            def _on_step(self) -> bool:
                return True

        model.learn(total_timesteps=args.num_env_steps, callback=Recorder())
        after_update()  # the last iteration's summary / evaluation
        if state["last_eval_steps"] != model.num_timesteps:
            evaluate()  # the end-of-budget evaluation, as ALF does
        wall_s = time.monotonic() - start
    except (_StopRequestedError, KeyboardInterrupt):
        progress.close()
        run_files.write_status(run_dir, run_files.RunStatus.STOPPED,
                               num_env_steps=args.num_env_steps)
        raise SystemExit(130) from None
    except BaseException as err:
        progress.close()
        run_files.write_status(run_dir, run_files.RunStatus.FAILED, error=repr(err),
                               num_env_steps=args.num_env_steps)
        raise
    progress.close()
    for eval_env in eval_envs:
        eval_env.close()
    venv.close()
    run_files.write_status(run_dir, run_files.RunStatus.FINISHED,
                           iteration=int(model.num_timesteps) // steps_per_iteration,
                           env_steps=int(model.num_timesteps),
                           num_env_steps=args.num_env_steps,
                           eval_average_return=state["last_eval"], wall_s=round(wall_s, 3))
    return {"run_dir": run_dir, "env_steps": int(model.num_timesteps), "wall_s": wall_s,
            "eval_average_return": state["last_eval"]}


# ------------------------------------------------------------------------ launching
def _is_finished(run_dir: str, num_env_steps: int) -> bool:
    status = run_files.read_status(run_dir)
    return bool(status and status.get("state") == run_files.RunStatus.FINISHED
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
    log_path = os.path.join(run_dir, run_files.LOG_FILE)
    with open(log_path, "a") as log:
        log.write(f"\n$ {' '.join(cmd)}\n")
        log.flush()
        return subprocess.Popen(cmd, stdout=None if verbose else log,
                                stderr=None if verbose else subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=REPO_ROOT,
                                start_new_session=True)


def _log_tail(run_dir: str, lines: int = 25) -> str:
    try:
        with open(os.path.join(run_dir, run_files.LOG_FILE), errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def alf_command(algo: str, env_id: str, run_dir: str, seed: int, num_env_steps: int,
                default_num_env_steps: int | None, threads: int,
                eval_interval: int | None) -> list[str]:
    """The ``alf.bin.train`` command line of one ALF run."""
    cmd = [sys.executable, "-m", "alf.bin.train", f"--conf={config_path(algo, env_id)}",
           f"--root_dir={run_dir}", f"--conf_param=TrainerConfig.random_seed={seed}",
           f"--conf_param=TrainerConfig.torch_num_threads={threads}"]
    if num_env_steps != default_num_env_steps:
        cmd.append(f"--conf_param=TrainerConfig.num_env_steps={num_env_steps}")
    if eval_interval is not None:
        cmd.append(f"--conf_param=TrainerConfig.eval_interval={eval_interval}")
    return cmd


def sb3_command(algo: str, env_id: str, run_dir: str, seed: int, num_env_steps: int,
                cad: dict[str, int], threads: int) -> list[str]:
    """The worker command line of one SB3 run."""
    return [sys.executable, SCRIPT, "--worker", "sb3", "--algo", algo, "--env", env_id,
            "--seed", str(seed), "--run_dir", run_dir, "--num_env_steps", str(num_env_steps),
            "--eval_every_steps", str(cad["eval_every_steps"]),
            "--summary_every_steps", str(cad["summary_every_steps"]),
            "--threads", str(threads)]


# ------------------------------------------------------------------------- reporting
def summarize_run(run_dir: str) -> dict[str, Any]:
    """What a run directory says: its evaluations, final and best return, times."""
    records = run_files.read_progress(run_dir)
    evals = [{"env_steps": r.get("env_steps"), "elapsed_s": r.get("elapsed_s"),
              "train_time_s": r.get("train_time_s"),
              "average_return": r["eval/average_return"]}
             for r in records if "eval/average_return" in r]
    env_steps = max((int(r.get("env_steps", 0)) for r in records), default=0)
    elapsed = max((float(r["elapsed_s"]) for r in records if "elapsed_s" in r), default=None)
    train = max((float(r["train_time_s"]) for r in records if "train_time_s" in r),
                default=None)
    status = run_files.read_status(run_dir) or {}
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


def aggregate(runs: list[dict[str, Any]], threshold: float | None,
              sb3_wall: float | None) -> dict[str, Any]:
    """One framework's runs of one combination, over seeds."""
    finals = [r["final_eval_return"] for r in runs if r["final_eval_return"] is not None]
    bests = [r["best_eval_return"] for r in runs if r["best_eval_return"] is not None]
    times = [time_to_return(r["evals"], threshold) if threshold is not None else None
             for r in runs]
    reached = [t for t in times if t is not None]
    med_time = median([t if t is not None else math.inf for t in times]) if runs else None
    if med_time is not None and (math.isinf(med_time) or math.isnan(med_time)):
        med_time = None
    walls = [r["elapsed_s"] for r in runs if r["elapsed_s"] is not None]
    return {
        "seeds": [r["seed"] for r in runs],
        "final_mean": _mean(finals),
        "final_per_seed": [r["final_eval_return"] for r in runs],
        "best_mean": _mean(bests),
        "median_wall_s": median(walls) if walls else None,
        "median_steps_per_s_train": median([r["steps_per_s_train"] for r in runs
                                            if r["steps_per_s_train"]]) if runs else None,
        "median_steps_per_s_wall": median([r["steps_per_s_wall"] for r in runs
                                           if r["steps_per_s_wall"]]) if runs else None,
        "time_to_sb3_final_per_seed": times,
        "median_time_to_sb3_final_s": med_time,
        "reached_sb3_final": f"{len(reached)}/{len(runs)}",
        "time_ratio_to_sb3_wall": (med_time / sb3_wall
                                   if med_time is not None and sb3_wall else None),
    }


def _fmt(value: float | None, digits: int = 0) -> str:
    return fmt_num(value, digits) if value is not None else "-"


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
        threshold = combo.get("sb3_final_mean")
        thr = f"{threshold:,.0f}" if threshold is not None else "n/a"
        header = ["framework", "seeds", "final eval (mean)", "final per seed", "best (mean)",
                  "wall s (median)", "steps/s train", "steps/s wall",
                  f"time to SB3 final {thr} (s)", "reached", "/ SB3 wall"]
        rows = []
        for fw, agg in combo["summary"].items():
            per_seed = " / ".join(_fmt(v, 0) for v in agg["final_per_seed"])
            rows.append([fw.upper(), ",".join(map(str, agg["seeds"])), _fmt(agg["final_mean"], 1),
                         per_seed, _fmt(agg["best_mean"], 1), fmt_seconds(agg["median_wall_s"]),
                         _fmt(agg["median_steps_per_s_train"]),
                         _fmt(agg["median_steps_per_s_wall"]),
                         fmt_seconds(agg["median_time_to_sb3_final_s"]),
                         agg["reached_sb3_final"],
                         _fmt(agg["time_ratio_to_sb3_wall"], 2)])
        out.append(format_table(header, rows))
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


def _uptime() -> str:
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


# ------------------------------------------------------------------------------ main
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
    p.add_argument("--summary_every_steps", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _validate(args: argparse.Namespace) -> str | None:
    """An error message for bad flags, or None."""
    for env_id in args.envs:
        if env_id not in ENVS:
            return f"unknown env '{env_id}' (choose from {', '.join(ENVS)})"
    for algo in args.algos:
        if algo not in ALGOS:
            return f"unknown algorithm '{algo}' (choose from {', '.join(ALGOS)})"
    for fw in args.frameworks:
        if fw not in FRAMEWORKS:
            return f"unknown framework '{fw}' (choose from alf, sb3)"
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
    combo["default_num_env_steps"] = (int(_as_number(bindings, "TrainerConfig.num_env_steps", 0))
                                      if bindings else None)
    combo["config_differences"] = check_alf_config(algo, bindings) if bindings else []
    return combo


def run_one(args: argparse.Namespace, combo: dict[str, Any], framework: str,
            seed: int) -> dict[str, Any]:
    """Trains (or skips, if finished) one run and returns its summary."""
    algo, env_id = combo["algo"], combo["env"]
    run_dir = os.path.join(args.root_dir, framework, combo["name"], f"seed-{seed}")
    run: dict[str, Any] = {"framework": framework, "seed": seed, "run_dir": run_dir}
    label = f"{framework} {algo} {env_id} seed {seed}"
    if _is_finished(run_dir, combo["num_env_steps"]):
        print(f"{label}: finished earlier, skipped ({run_dir})", flush=True)
        run["outcome"] = "skipped (finished)"
        return {**run, **summarize_run(run_dir)}
    status = run_files.read_status(run_dir)
    if status and status.get("state") == run_files.RunStatus.RUNNING:  # its pid is alive
        print(f"{label}: FAILED: another process (pid {status.get('pid')}) is training in "
              f"{run_dir}", flush=True)
        return {**run, **summarize_run(run_dir), "outcome": "failed"}
    if framework == "alf":
        if status and status.get("num_env_steps") not in (None, combo["num_env_steps"]):
            # Resuming would continue a run whose schedules were set for another budget.
            print(f"{label}: FAILED: {run_dir} holds a run with a budget of "
                  f"{status['num_env_steps']:,} env steps, not {combo['num_env_steps']:,}: "
                  "use another --root_dir or remove that directory", flush=True)
            return {**run, **summarize_run(run_dir), "outcome": "failed"}
        cmd = alf_command(algo, env_id, run_dir, seed, combo["num_env_steps"],
                          combo["default_num_env_steps"], args.threads,
                          combo["alf_eval_interval"])
    else:
        for name in (run_files.PROGRESS_FILE, run_files.STATUS_FILE, run_files.METADATA_FILE):
            path = os.path.join(run_dir, name)
            if os.path.exists(path):  # an unfinished or different-budget run starts over
                os.remove(path)
        cmd = sb3_command(algo, env_id, run_dir, seed, combo["num_env_steps"],
                          combo["cadence"], args.threads)
    run["load_1min_at_start"] = round(os.getloadavg()[0], 2)
    print(f"{label}: running ...", end=" ", flush=True)
    tick = time.monotonic()
    process = _launch(cmd, run_dir, args.threads, args.verbose)
    code = _wait(process, args.worker_timeout_s, label)
    run["process_s"] = round(time.monotonic() - tick, 1)
    run.update(summarize_run(run_dir))
    if code != 0 or run["state"] != run_files.RunStatus.FINISHED:
        run["outcome"] = "failed"
        print(f"FAILED (exit status {code}, state {run['state']}); log {run_dir}/train.log\n"
              f"{_log_tail(run_dir)}", flush=True)
    else:
        run["outcome"] = "trained"
        print(f"{run['process_s']:.0f}s, final eval {_fmt(run['final_eval_return'], 1)}, "
              f"{_fmt(run['steps_per_s_train'])} steps/s", flush=True)
    return run


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark (or, with ``--worker``, one SB3 run); returns the exit status."""
    args = parse_args(argv)
    if args.worker:
        result = worker_sb3(args)
        print(json.dumps(result))
        return 0
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
    error = _validate(args)
    if error:
        print(f"mujoco.py: error: {error}", file=sys.stderr)
        return 2

    results: dict[str, Any] = {
        "benchmark": "mujoco",
        "machine": machine_info(("torch", "gymnasium", "mujoco", "numpy", "alf",
                                 "stable-baselines3")),
        "uptime_start": _uptime(),
        "settings": {"seeds": args.seeds, "frameworks": args.frameworks,
                     "threads": args.threads, "root_dir": args.root_dir,
                     "envs": args.envs, "algos": args.algos,
                     "hyperparameters": {a: HPARAMS[a] for a in args.algos}},
        "combinations": [],
    }
    print(f"uptime: {results['uptime_start']}", flush=True)
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
    for combo in results["combinations"]:
        if combo.get("skipped"):
            continue
        by_fw = {fw: sorted([r for r in combo["runs"] if r["framework"] == fw],
                            key=lambda r: r["seed"]) for fw in args.frameworks}
        sb3_runs = by_fw.get("sb3") or []
        sb3_finals = [r["final_eval_return"] for r in sb3_runs
                      if r["final_eval_return"] is not None]
        threshold = _mean(sb3_finals)
        sb3_walls = [r["elapsed_s"] for r in sb3_runs if r["elapsed_s"] is not None]
        sb3_wall = median(sb3_walls) if sb3_walls else None
        combo["sb3_final_mean"] = threshold
        combo["summary"] = {fw: aggregate(runs, threshold, sb3_wall)
                            for fw, runs in by_fw.items() if runs}
    results["uptime_end"] = _uptime()
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
