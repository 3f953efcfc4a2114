"""``TrainerConfig``: everything about a run that is not the algorithm or the environment."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from alf.config import configurable

__all__ = ["RESUMABLE_SETTINGS", "TrainerConfig"]

RESUMABLE_SETTINGS = tuple(
    f"TrainerConfig.{name}"
    for name in (
        "num_iterations",
        "num_env_steps",
        "summary_interval",
        "eval_interval",
        "num_eval_episodes",
        "num_eval_environments",
        "evaluate",
        "checkpoint_interval",
        "num_checkpoints",
        "progress_interval_s",
        "torch_num_threads",
        "max_consecutive_skipped_iterations",
        "allow_config_change",
    )
)
"""Bindings that may differ between a run and its resumption."""


@configurable
@dataclass(kw_only=True)
class TrainerConfig:
    """Settings of a training run (bind them in gin as ``TrainerConfig.<name> = ...``).

    The environment is built by ``create_environment`` (bind its ``env_name`` and
    ``num_parallel_environments``); the algorithm by ``algorithm_ctor``.

    Attributes:
        algorithm_ctor: called as ``algorithm_ctor(observation_spec=..., action_spec=...)``,
            e.g. ``@PPOAlgorithm``.
        unroll_length: environment steps per environment per training iteration.
        num_iterations: stop after this many iterations (0: no limit).
        num_env_steps: stop after this many training environment steps (0: no limit).
            At least one of the two budgets must be set.
        random_seed: seeds torch and the environments (environment ``i`` gets
            ``random_seed + i``; evaluation environments use a separate range).
        summary_interval: iterations between summaries (TensorBoard and progress.jsonl).
        eval_interval: iterations between evaluations (0: only at the end).
        num_eval_episodes: episodes per evaluation.
        num_eval_environments: environments stepped together during evaluation.
        evaluate: whether to evaluate at all.
        checkpoint_interval: iterations between checkpoints (one is also written at the
            end and on SIGINT/SIGTERM).
        num_checkpoints: how many of the newest checkpoints to keep.
        progress_interval_s: seconds between progress lines on the console.
        torch_num_threads: threads for torch's CPU kernels (None: torch's default).
            Small networks often train fastest with 1.
        max_consecutive_skipped_iterations: stop the run (keeping the last good
            checkpoint) after this many iterations in a row whose every update was
            skipped for a non-finite loss.
        allow_config_change: on resume, accept a config whose bindings differ from the
            ones the checkpoint was written with. Without it, only the settings listed in
            :data:`RESUMABLE_SETTINGS` (budget, intervals, threads...) may change.
    """

    algorithm_ctor: Callable | None = None
    unroll_length: int = 8
    num_iterations: int = 0
    num_env_steps: int = 0
    random_seed: int = 0
    summary_interval: int = 10
    eval_interval: int = 0
    num_eval_episodes: int = 10
    num_eval_environments: int = 10
    evaluate: bool = True
    checkpoint_interval: int = 100
    num_checkpoints: int = 3
    progress_interval_s: float = 5.0
    torch_num_threads: int | None = None
    max_consecutive_skipped_iterations: int = 10
    allow_config_change: bool = False

    def __post_init__(self) -> None:
        if self.algorithm_ctor is None:
            raise ValueError(
                "TrainerConfig.algorithm_ctor is not set; bind it in the config, e.g. "
                "'TrainerConfig.algorithm_ctor = @PPOAlgorithm'"
            )
        if self.num_iterations <= 0 and self.num_env_steps <= 0:
            raise ValueError(
                "Set a budget: TrainerConfig.num_iterations or TrainerConfig.num_env_steps"
            )
        for name in (
            "unroll_length",
            "summary_interval",
            "checkpoint_interval",
            "num_checkpoints",
            "num_eval_episodes",
            "num_eval_environments",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainerConfig.{name} must be >= 1, got {getattr(self, name)}")
