"""Shared by the modules of ``mujoco_bench.py``: the environments, algorithms and the
hyperparameters both frameworks use, and where the runs and the example configs live.

Nothing here imports torch, ALF or any environment package, so the parent process
(which imports this module through ``mujoco_bench.py``) stays light. The modules import
each other as ``benchmarks.mujoco.*`` (the repository root on ``sys.path``), so
``import mujoco`` is always the MuJoCo package; the entry script is not named
``mujoco.py``, which used to shadow it (and made an import circle).
"""

from __future__ import annotations

import os
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
"""``benchmarks/mujoco/``: this benchmark's folder (first on ``sys.path`` when its entry
script runs; it holds no ``mujoco.py``, so it no longer shadows the ``mujoco`` package)."""
SCRIPT = os.path.join(BENCH_DIR, "mujoco_bench.py")
"""The entry script (also the SB3 worker: ``SCRIPT --worker sb3 ...``)."""
REPO_ROOT = os.path.dirname(os.path.dirname(BENCH_DIR))


EXAMPLES_DIR = os.path.join(REPO_ROOT, "alf", "examples")
EVAL_SEED_OFFSET = 1_000_003  # same as alf.trainers.components.EVAL_SEED_OFFSET
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

# What SAC and TD3 share (see HPARAMS).
_OFF_POLICY_HPARAMS: dict[str, Any] = {
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
}

# The hyperparameters both frameworks use (SB3 is built from these; ALF's configs are
# checked against them, see mujoco_alf.ALF_BINDINGS).
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
        **_OFF_POLICY_HPARAMS,
        "ent_coef": "auto_1.0",
        "target_entropy": "auto",
    },
    "td3": {
        **_OFF_POLICY_HPARAMS,
        "action_noise_std": 0.1,
        "target_policy_noise": 0.2,
        "target_noise_clip": 0.5,
        "policy_delay": 2,
    },
}


def sb3_steps_per_iteration(algo: str) -> int:
    """Env steps per ALF iteration as :data:`HPARAMS` has them (SB3's rollout size)."""
    return HPARAMS[algo]["num_envs"] * HPARAMS[algo].get("n_steps", 1)


def run_name(algo: str, env_id: str) -> str:
    """``<algo>_<env>``: the directory of a combination's runs (the config's name)."""
    return f"{algo}_{ENVS[env_id]}"


def config_path(algo: str, env_id: str) -> str:
    """The example config of ``algo`` on ``env_id``."""
    return os.path.join(EXAMPLES_DIR, f"{run_name(algo, env_id)}.gin")
