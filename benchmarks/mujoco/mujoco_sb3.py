"""The Stable-Baselines3 side of ``mujoco.py``: one SB3 run (PPO, SAC or TD3 built from
:data:`mujoco_common.HPARAMS`) that writes an ALF-format run directory
(``progress.jsonl``, ``run_info.json``, ``status.json``), evaluated like ALF.

:func:`worker_sb3` runs in a fresh subprocess started as ``mujoco.py --worker sb3 ...``
(:func:`sb3_command`); torch, gymnasium and SB3 are imported only there, after the
``benchmarks/`` folder has left ``sys.path`` (its ``mujoco.py`` would shadow the
``mujoco`` package).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import IO, Any

from alf.run_dir import layout
from benchmarks.common import package_version
from benchmarks.mujoco.mujoco_common import (
    EVAL_SEED_OFFSET,
    HPARAMS,
    NUM_EVAL_EPISODES,
    SCRIPT,
    sb3_steps_per_iteration,
)


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


def _next_mark(mark: int, every: int, steps: int) -> int:
    """``mark`` advanced by ``every`` until it lies beyond ``steps``."""
    while mark <= steps:
        mark += every
    return mark


class _Progress:
    """Writes an SB3 run's ``progress.jsonl`` records (train summaries and evaluations)
    at ALF's points: after the update of the iteration that crossed the mark.

    Its clock starts at construction; ``train_time_s`` excludes the evaluations."""

    def __init__(self, file: IO[str], model: Any, eval_envs: list[Any], normalizer: Any,
                 algo: str, eval_every_steps: int, summary_every_steps: int) -> None:
        self.file, self.model = file, model
        self.eval_envs, self.normalizer = eval_envs, normalizer
        self.steps_per_iteration = sb3_steps_per_iteration(algo)
        self.eval_every_steps, self.summary_every_steps = eval_every_steps, summary_every_steps
        self.next_eval, self.next_summary = eval_every_steps, summary_every_steps
        self.eval_s = 0.0
        self.last_steps, self.last_train_s = 0, 0.0
        self.last_eval: float | None = None
        self.last_eval_steps = -1
        self.start = time.monotonic()

    def _write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def _base_record(self, now: float) -> dict[str, Any]:
        steps = int(self.model.num_timesteps)
        return {"iteration": steps // self.steps_per_iteration, "env_steps": steps,
                "elapsed_s": round(now - self.start, 3),
                "train_time_s": round(now - self.start - self.eval_s, 3)}

    def evaluate(self) -> None:
        """Evaluates the model and writes the evaluation record."""
        tick = time.monotonic()
        record = self._base_record(tick)
        average, length = _sb3_evaluate(self.model, self.eval_envs, self.normalizer)
        done = time.monotonic()
        self.eval_s += done - tick
        record["elapsed_s"] = round(done - self.start, 3)
        record["eval/average_return"] = average
        record["eval/average_episode_length"] = length
        self.last_eval, self.last_eval_steps = average, self.model.num_timesteps
        self._write(record)

    def summarize(self) -> None:
        """Writes a train summary: fps since the last one, and the last 100 episodes."""
        record = self._base_record(time.monotonic())
        train_s = record["train_time_s"]
        steps = int(self.model.num_timesteps)
        window_steps = steps - self.last_steps
        window_s = max(train_s - self.last_train_s, 1e-9)
        self.last_steps, self.last_train_s = steps, train_s
        record["fps"] = round(window_steps / window_s, 1)
        episodes = list(self.model.ep_info_buffer)  # the last 100 episodes, like ALF's
        if episodes:
            record["train/average_return"] = float(
                sum(e["r"] for e in episodes) / len(episodes))
            record["train/average_episode_length"] = float(
                sum(e["l"] for e in episodes) / len(episodes))
        self._write(record)

    def after_update(self) -> None:
        """After an iteration's update (ALF's summary / evaluation point)."""
        steps = self.model.num_timesteps
        if steps >= self.next_summary:
            self.summarize()
            self.next_summary = _next_mark(self.next_summary, self.summary_every_steps, steps)
        if self.eval_every_steps > 0 and steps >= self.next_eval:
            self.evaluate()
            self.next_eval = _next_mark(self.next_eval, self.eval_every_steps, steps)

    def finish(self) -> None:
        """The last iteration's summary / evaluation, and the end-of-budget evaluation
        (as ALF does) unless that one just ran."""
        self.after_update()
        if self.last_eval_steps != self.model.num_timesteps:
            self.evaluate()


def _write_run_info(args: argparse.Namespace, torch_num_threads: int) -> None:
    """The run's ``run_info.json``."""
    layout.write_json_atomic(os.path.join(args.run_dir, layout.METADATA_FILE), {
        "framework": "sb3",
        "env_name": args.env,
        "algorithm": args.algo.upper(),
        "seed": args.seed,
        "sb3_version": package_version("stable-baselines3"),
        "versions": {name: package_version(name)
                     for name in ("torch", "gymnasium", "mujoco", "numpy")},
        "hyperparameters": HPARAMS[args.algo],
        "num_env_steps": args.num_env_steps,
        "eval_every_steps": args.eval_every_steps,
        "summary_every_steps": args.summary_every_steps,
        "num_eval_episodes": NUM_EVAL_EPISODES,
        "torch_num_threads": torch_num_threads,
        "command": [sys.executable, *sys.argv],
        "host": os.uname().nodename,
        "start_time": time.time(),
    })


def worker_sb3(args: argparse.Namespace) -> dict[str, Any]:
    """One SB3 run that writes an ALF-format run directory; returns its summary."""
    import gymnasium as gym
    import torch

    torch.set_num_threads(args.threads)
    from stable_baselines3.common.callbacks import BaseCallback

    algo, env_id, run_dir = args.algo, args.env, args.run_dir
    os.makedirs(run_dir, exist_ok=True)
    _write_run_info(args, torch.get_num_threads())
    layout.write_status(run_dir, layout.RunStatus.RUNNING,
                           num_env_steps=args.num_env_steps)

    def on_sigterm(signum: int, frame: Any) -> None:
        raise _StopRequestedError()

    signal.signal(signal.SIGTERM, on_sigterm)
    progress_file = open(os.path.join(run_dir, layout.PROGRESS_FILE), "w")  # noqa: SIM115
    try:
        model, venv = _make_sb3_model(algo, env_id, args.seed, args.num_env_steps)
        eval_envs = [gym.make(env_id) for _ in range(NUM_EVAL_EPISODES)]
        for i, eval_env in enumerate(eval_envs):  # seeded once; later resets continue
            eval_env.reset(seed=args.seed + EVAL_SEED_OFFSET + i)
            eval_env.action_space.seed(args.seed + EVAL_SEED_OFFSET + i)
        progress = _Progress(progress_file, model, eval_envs,
                             normalizer=venv if algo == "ppo" else None, algo=algo,
                             eval_every_steps=args.eval_every_steps,
                             summary_every_steps=args.summary_every_steps)

        class Recorder(BaseCallback):
            """``on_rollout_start`` runs after the previous rollout's ``train()``."""

            def _on_rollout_start(self) -> None:
                progress.after_update()

            def _on_step(self) -> bool:
                return True

        model.learn(total_timesteps=args.num_env_steps, callback=Recorder())
        progress.finish()
        wall_s = time.monotonic() - progress.start
    except (_StopRequestedError, KeyboardInterrupt):
        progress_file.close()
        layout.write_status(run_dir, layout.RunStatus.STOPPED,
                               num_env_steps=args.num_env_steps)
        raise SystemExit(130) from None
    except BaseException as err:
        progress_file.close()
        layout.write_status(run_dir, layout.RunStatus.FAILED, error=repr(err),
                               num_env_steps=args.num_env_steps)
        raise
    progress_file.close()
    for eval_env in eval_envs:
        eval_env.close()
    venv.close()
    env_steps = int(model.num_timesteps)
    layout.write_status(run_dir, layout.RunStatus.FINISHED,
                           iteration=env_steps // progress.steps_per_iteration,
                           env_steps=env_steps, num_env_steps=args.num_env_steps,
                           eval_average_return=progress.last_eval, wall_s=round(wall_s, 3))
    return {"run_dir": run_dir, "env_steps": env_steps, "wall_s": wall_s,
            "eval_average_return": progress.last_eval}


def sb3_command(algo: str, env_id: str, run_dir: str, seed: int, num_env_steps: int,
                cad: dict[str, int], threads: int) -> list[str]:
    """The worker command line of one SB3 run."""
    return [sys.executable, SCRIPT, "--worker", "sb3", "--algo", algo, "--env", env_id,
            "--seed", str(seed), "--run_dir", run_dir, "--num_env_steps", str(num_env_steps),
            "--eval_every_steps", str(cad["eval_every_steps"]),
            "--summary_every_steps", str(cad["summary_every_steps"]),
            "--threads", str(threads)]
