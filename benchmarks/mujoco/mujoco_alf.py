"""The ALF side of ``mujoco.py``: reading the example configs (their ``include``s
resolved), checking them against the SB3 hyperparameters, their evaluation / summary
cadence, and the ``alf.bin.train`` command line of one run.

Nothing here imports torch or ALF beyond :mod:`alf.run_dir.layout` (which imports
nothing heavy), so the parent process stays light.
"""

from __future__ import annotations

import math
import os
import re
import sys

from alf.run_dir import layout
from benchmarks.mujoco.mujoco_common import EXAMPLES_DIR, config_path, sb3_steps_per_iteration

# The evaluation every config must have (10 deterministic episodes on 10 environments).
_EVAL_BINDINGS: dict[str, tuple[str, str | None]] = {
    "TrainerConfig.num_eval_episodes": ("10", "10"),
    "TrainerConfig.num_eval_environments": ("10", "10"),
}


def _off_policy_bindings(
    algorithm: str, actor: str, actor_activation_default: str | None,
    specific: dict[str, tuple[str, str | None]],
) -> dict[str, tuple[str, str | None]]:
    """The bindings SAC and TD3 share (:data:`mujoco_common.HPARAMS`' common part) for
    the ``algorithm`` class and its ``actor`` network, with ``specific`` ones after the
    algorithm's common bindings."""
    return {
        "create_environment.num_parallel_environments": ("1", None),
        "TrainerConfig.unroll_length": ("1", None),
        "TrainerConfig.initial_collect_steps": ("10000", None),
        f"{actor}.fc_layer_params": ("(256, 256)", None),
        f"{actor}.activation": ("relu", actor_activation_default),
        "CriticNetwork.fc_layer_params": ("(256, 256)", None),
        "CriticNetwork.activation": ("relu", None),
        f"{algorithm}.gamma": ("0.99", "0.99"),
        f"{algorithm}.learning_rate": ("3e-4", None),
        f"{algorithm}.mini_batch_size": ("256", "256"),
        f"{algorithm}.target_update_tau": ("0.005", "0.005"),
        **specific,
        "ReplayBuffer.max_length": ("1000000", None),
        **_EVAL_BINDINGS,
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
        **_EVAL_BINDINGS,
    },
    "sac": _off_policy_bindings("SacAlgorithm", "ActorDistributionNetwork", None, {
        "SacAlgorithm.initial_alpha": ("1.0", "1.0"),
    }),
    "td3": _off_policy_bindings("Td3Algorithm", "ActorNetwork", "relu", {
        "Td3Algorithm.exploration_std": ("0.1", "0.1"),
        "Td3Algorithm.target_policy_noise": ("0.2", "0.2"),
        "Td3Algorithm.target_policy_noise_clip": ("0.5", "0.5"),
        "Td3Algorithm.actor_update_period": ("2", "2"),
    }),
}

# Evaluation / summary cadence when the ALF config cannot be read (SB3-only runs of a
# combination without an ALF config): what the MuJoCo configs use.
FALLBACK_EVAL_EVERY = {"ppo": 20_480, "sac": 5_000, "td3": 5_000}
FALLBACK_SUMMARY_EVERY = {"ppo": 4_096, "sac": 1_000, "td3": 1_000}

_INCLUDE = re.compile(r"""^\s*include\s+['"]([^'"]+)['"]""")


def read_config_bindings(path: str, _depth: int = 0) -> dict[str, str]:
    """The bindings of the gin file ``path`` with its includes resolved (relative to the
    including file, then to ``alf/examples/``), later bindings winning, as ALF does.

    Values are the text of the binding (see :func:`alf.run_dir.layout.parse_bindings`).
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
    bindings.update(layout.parse_bindings(text))
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


def binding_number(bindings: dict[str, str], name: str, default: float) -> float:
    """The binding ``name`` as a number; ``default`` when it is unbound or not a number."""
    try:
        return float(bindings[name])
    except (KeyError, ValueError):
        return default


def cadence(algo: str, bindings: dict[str, str] | None) -> dict[str, int]:
    """Env steps per ALF iteration, between evaluations and between train summaries, as
    the ALF config has them (fallbacks when there is no config)."""
    if not bindings:
        return {
            "steps_per_iteration": sb3_steps_per_iteration(algo),
            "eval_every_steps": FALLBACK_EVAL_EVERY[algo],
            "summary_every_steps": FALLBACK_SUMMARY_EVERY[algo],
        }
    per_iteration = binding_number(bindings, "TrainerConfig.unroll_length", 8) * binding_number(
        bindings, "create_environment.num_parallel_environments", 1
    )
    eval_interval = binding_number(bindings, "TrainerConfig.eval_interval", 0)
    summary_interval = binding_number(bindings, "TrainerConfig.summary_interval", 10)
    return {
        "steps_per_iteration": max(1, round(per_iteration)),
        "eval_every_steps": round(eval_interval * per_iteration),
        "summary_every_steps": max(1, round(summary_interval * per_iteration)),
    }


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
