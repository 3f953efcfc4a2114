"""``RLTrainer``: builds a run from its config and trains it, resumably."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch
from absl import logging

from alf import config as alf_config
from alf import nest
from alf.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf.data_structures import StepType
from alf.environments import AlfEnvironment, create_environment
from alf.replay_buffers.offline import load_offline_buffers
from alf.trainers.algorithm_builder import algorithm_factory, build_algorithm, load_into
from alf.trainers.checkpointer import Checkpointer
from alf.trainers.data_parallel import (
    RANK_SEED_STRIDE,
    divide_mini_batch,
    enable_data_parallel,
)
from alf.trainers.evaluator import EvalResult, Evaluator
from alf.trainers.resume import (
    check_resumed_config,
    gather_rng_states,
    read_resume_state,
    restore_rng_states,
)
from alf.trainers.run_lock import RunDirLock
from alf.trainers.train_report import TrainingReport
from alf.trainers.trainer_config import TrainerConfig
from alf.unrollers.async_unroller import AsyncUnroller
from alf.unrollers.sync_unroller import SyncUnroller
from alf.utils import run_files
from alf.utils.device import to_device
from alf.utils.distributed import DistributedContext, resolve_device
from alf.utils.summary import SummaryLogger, start_run_logging, truncate_progress_log

__all__ = [
    "CHECKPOINT_KEYS",
    "RLTrainer",
    "TrainingDivergedError",
    "build_algorithm",
    "EVAL_SEED_OFFSET",
]

CHECKPOINT_KEYS = ("iteration", "env_steps", "algorithm")
"""Top-level keys of every checkpoint the trainer writes."""

EVAL_SEED_OFFSET = 1_000_003
"""Evaluation environments are seeded from ``random_seed + EVAL_SEED_OFFSET``."""


class TrainingDivergedError(RuntimeError):
    """Too many consecutive iterations had every update skipped for a non-finite loss."""


class RLTrainer:
    """Trains ``config.algorithm_ctor`` in ``create_environment()`` until the budget.

    On schedule it writes summaries, evaluates with separate environments through
    ``predict_step`` and checkpoints. If ``root_dir`` already holds a checkpoint, the run
    resumes from the newest one (iteration and environment-step counts continue).

    Networks train on ``config.device``; collection runs on a CPU copy of the algorithm
    (refreshed after every iteration) unless ``config.collect_on_device``.

    In a data-parallel run (``distributed``, one trainer per rank under ``torchrun``)
    each rank collects with its share of the environments and trains a replica (see
    :mod:`alf.trainers.data_parallel` for how the config is divided); rank 0 alone
    evaluates and reads and writes ``root_dir``, and the ranks agree after every
    iteration on whether to stop.

    Args:
        config: the run's settings.
        root_dir: directory of the run's files.
        distributed: this rank's context (None: a single-process run).
    """

    def __init__(
        self,
        *,
        config: TrainerConfig,
        root_dir: str,
        distributed: DistributedContext | None = None,
    ) -> None:
        self.config = config
        self.root_dir = root_dir
        self.distributed = distributed
        self.is_main = distributed is None or distributed.is_main
        self._world_size = 1 if distributed is None else distributed.world_size
        self._closed = False
        self.iteration = 0
        self.env_steps = 0
        self.train_time_s = 0.0
        self.wall_time_s = 0.0
        self._stop_requested = False  # this process was asked to stop
        self._stopping = False  # ... and the ranks agreed on it (see _agree_on_stop)
        self.reached_target = False
        self.last_eval: EvalResult | None = None
        self.env: AlfEnvironment | None = None
        self.eval_env: AlfEnvironment | None = None
        self.summary: SummaryLogger | None = None
        self.unroller: SyncUnroller | AsyncUnroller | None = None
        self._lock = RunDirLock(root_dir=root_dir) if self.is_main else None
        try:
            self._build(config, root_dir)
        except BaseException:
            self.close()
            raise

    def _build(self, config: TrainerConfig, root_dir: str) -> None:
        self.checkpointer = Checkpointer(
            directory=os.path.join(root_dir, run_files.CHECKPOINT_DIR),
            num_to_keep=config.num_checkpoints,
        )
        # Read and check the checkpoint before building anything, so a bad one fails fast
        # and nothing in root_dir is touched.
        resume_path, resume_state = read_resume_state(
            self.checkpointer, CHECKPOINT_KEYS, self.distributed
        )
        context = self.distributed
        rank = 0 if context is None else context.rank
        local_rank = 0 if context is None else context.local_rank
        self.device = resolve_device(
            config.device, local_rank=local_rank, world_size=self._world_size
        )
        if config.torch_num_threads:
            torch.set_num_threads(config.torch_num_threads)
        seed = config.random_seed
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        if resume_state is not None:
            # Fresh episodes after a resume must not replay the first run's seeds.
            seed += int(resume_state["env_steps"])
        if context is None:
            self.env = create_environment(seed=seed)
        else:  # this rank's share of the environments
            self.env = create_environment(seed=seed, num_ranks=self._world_size, rank=rank)
            seed += rank * self.env.batch_size  # its first environment's seed
        self.algorithm = build_algorithm(config, self.env).to(self.device)
        self.rollout_algorithm = self.algorithm
        if self.device.type != "cpu" and not config.collect_on_device:
            self.rollout_algorithm = algorithm_factory(config)(
                observation_spec=self.env.observation_spec(), action_spec=self.env.action_spec()
            )
        if rank:
            torch.manual_seed(config.random_seed + rank * RANK_SEED_STRIDE)
            np.random.seed((config.random_seed + rank * RANK_SEED_STRIDE) % 2**32)
        self._num_envs = self.env.batch_size
        if config.async_unroll:
            # The actors build their own environments: this one only told the specs.
            self.env.close()
            self.env = None
        self.evaluator = None
        if config.evaluate and self.is_main:
            self.eval_env = create_environment(
                num_parallel_environments=config.num_eval_environments,
                for_evaluation=True,
                seed=config.random_seed + EVAL_SEED_OFFSET,
            )
            self.evaluator = Evaluator(
                env=self.eval_env,
                algorithm=self.rollout_algorithm,
                num_episodes=config.num_eval_episodes,
                device=self._collect_device,
            )
        self.off_policy = isinstance(self.algorithm, OffPolicyAlgorithm)
        self._setup_unroll_and_replay(config, seed)
        if resume_state is not None:
            # After the environments are built (a bad env id is the clearer error), and
            # before anything in root_dir is written.
            if not config.allow_config_change:
                check_resumed_config(resume_state, resume_path, root_dir)
            self._restore(resume_state, resume_path)
        if context is not None:
            divide_mini_batch(self.algorithm, context)
            enable_data_parallel(
                self.algorithm,
                context,
                find_unused_parameters=config.find_unused_parameters,
                mixed_precision=config.mixed_precision,
            )
        else:
            self.algorithm.configure_training(mixed_precision=config.mixed_precision)
        self._refresh_rollout_algorithm()
        if config.async_unroll:
            # Started last: the actors get the restored parameters and step counts.
            self.unroller = self._build_async_unroller(config, seed)
        if not self.is_main:
            return
        self.checkpointer.remove_stale_temporaries()
        truncate_progress_log(os.path.join(root_dir, run_files.PROGRESS_FILE), self.iteration)
        # Events after the resumed step (or all of them, for a fresh start) belong to a
        # run that is being redone: drop them. Trackers start; run_info.json is written.
        self.summary = start_run_logging(
            root_dir,
            config=config,
            purge_step=self._summary_step() + 1,
            resumed_from=(self.iteration, self.env_steps) if resume_state else None,
            device=self.device,
            world_size=self._world_size,
        )
        run_files.write_config(self.root_dir, alf_config.config_str())

    def _summary_step(self) -> int:
        """Summaries' x-axis: env steps (iterations if training on offline data alone)."""
        return self.iteration if self.offline_only else self.env_steps

    @property
    def _collect_device(self) -> torch.device | None:
        """Where ``rollout_step`` runs when it is not the CPU (None: the CPU)."""
        if self.rollout_algorithm is self.algorithm and self.device.type != "cpu":
            return self.device
        return None

    def _refresh_rollout_algorithm(self) -> None:
        """Copies the trained parameters and statistics into the CPU collection copy."""
        if self.rollout_algorithm is not self.algorithm:
            self.rollout_algorithm.load_state_dict(self.algorithm.state_dict())

    def _setup_unroll_and_replay(self, config: TrainerConfig, seed: int) -> None:
        if not self.off_policy:
            if config.unroll_length != int(config.unroll_length):
                raise ValueError(
                    f"TrainerConfig.unroll_length={config.unroll_length}: fractional unroll "
                    "lengths need an off-policy algorithm"
                )
            for name in ("initial_collect_steps", "offline_buffer_dir"):
                if getattr(config, name):
                    raise ValueError(f"TrainerConfig.{name} needs an off-policy algorithm")
        if not config.async_unroll:
            self.unroller = SyncUnroller(
                env=self.env,
                algorithm=self.rollout_algorithm,
                unroll_length=max(1, int(config.unroll_length)),
                device=self._collect_device,
            )
        if not self.off_policy:
            return
        self.algorithm.build_replay_buffer(num_envs=self._num_envs)
        if self.distributed is not None and self.algorithm.replay_buffer.enable_checkpoint:
            raise ValueError(
                "ReplayBuffer.enable_checkpoint is not supported in data-parallel runs "
                "(each rank has its own replay buffer and only rank 0 writes checkpoints)"
            )
        if config.offline_buffer_dir:
            dirs = config.offline_buffer_dir
            dirs = [dirs] if isinstance(dirs, str) else list(dirs)
            buffers = load_offline_buffers(dirs, self.algorithm.replay_buffer.data_spec)
            self.algorithm.set_offline_buffers(buffers, config.offline_fraction)
        elif config.offline_fraction >= 1.0:
            raise ValueError("TrainerConfig.offline_fraction=1.0 needs offline_buffer_dir")

    def _build_async_unroller(self, config: TrainerConfig, seed: int) -> AsyncUnroller:
        if config.unroll_length != int(config.unroll_length):
            raise ValueError(
                f"TrainerConfig.unroll_length={config.unroll_length}: async_unroll needs "
                "a whole number of steps per fragment"
            )
        if config.offline_fraction >= 1.0 and config.offline_buffer_dir:
            raise ValueError(
                "TrainerConfig.async_unroll with offline_fraction=1.0 collects nothing"
            )
        return AsyncUnroller(
            env_factory=create_environment,
            algorithm=self.algorithm,
            algorithm_factory=algorithm_factory(config),
            num_envs=self._num_envs,
            unroll_length=int(config.unroll_length),
            seed=seed,
            config_text=alf_config.config_str(),
            initial_random_steps=self._rank_share(
                max(0, config.initial_collect_steps - self.env_steps)
            ),
            keep_every_fragment=self.off_policy,
        )

    @property
    def offline_only(self) -> bool:
        """Whether training uses offline data alone (no environment steps)."""
        return self.off_policy and self.config.offline_fraction >= 1.0 and bool(
            self.config.offline_buffer_dir
        )

    def _rank_share(self, steps: int) -> int:
        """This rank's part of a run-wide number of environment steps (rounded up)."""
        return -(-steps // self._world_size)

    def _steps_this_iteration(self) -> int:
        """Environment steps per environment of the coming iteration (a fractional
        ``unroll_length`` spreads steps evenly over iterations)."""
        if self.offline_only:
            return 0
        length = self.config.unroll_length
        if length == int(length):
            return int(length)
        i = self.iteration
        return int((i + 1) * length) - int(i * length)

    def _train_iteration(self) -> tuple[dict[str, float], int]:
        """Collects and trains once; returns the statistics and this rank's env steps."""
        try:
            if isinstance(self.unroller, AsyncUnroller):
                return self._train_iteration_async()
            return self._train_iteration_sync()
        finally:
            # The CPU copy collects (sync) and evaluates (both).
            self._refresh_rollout_algorithm()

    def _train_iteration_sync(self) -> tuple[dict[str, float], int]:
        num_steps = self._steps_this_iteration()
        if not self.off_policy:
            experience = self.unroller.unroll()
            return self.algorithm.train_from_unroll(experience), self.unroller.steps_per_unroll
        algorithm: OffPolicyAlgorithm = self.algorithm
        if num_steps:
            self.unroller.num_random_steps = self._rank_share(
                self.config.initial_collect_steps - self.env_steps
            )
            experience = self.unroller.unroll(num_steps)
            algorithm.observe_for_replay(self.unroller.new_rows(experience))
        env_steps = num_steps * self.env.batch_size
        stored = algorithm.replay_buffer.total_size
        ready = self.offline_only or stored >= self._rank_share(self.config.initial_collect_steps)
        if ready and algorithm.can_train():
            return algorithm.train_from_replay(), env_steps
        return {}, env_steps

    def _train_iteration_async(self) -> tuple[dict[str, float], int]:
        """Trains on the next fragments of the actors, then publishes the parameters."""
        unroller: AsyncUnroller = self.unroller
        steps_before = unroller.env_steps_taken
        fragments = unroller.collect()
        stats: dict[str, float] = {}
        if not self.off_policy:
            exps = [fragment.exp for fragment in fragments]
            exp = exps[0]
            if len(exps) > 1:
                exp = nest.map_structure(lambda *xs: torch.cat(xs, dim=1), *exps)
            stats = self.algorithm.train_from_unroll(exp)
        else:
            algorithm: OffPolicyAlgorithm = self.algorithm
            for fragment in fragments:
                algorithm.observe_for_replay(fragment.new_rows())
            stored = algorithm.replay_buffer.total_size
            ready = stored >= self._rank_share(self.config.initial_collect_steps)
            ready = ready and algorithm.can_train()
            if self.distributed is not None:
                # What the actors delivered so far differs by rank: train only when all
                # ranks can (all of them join every update).
                (not_ready,) = self.distributed.all_reduce_sum(
                    [not ready], what="the replay-readiness check"
                )
                ready = not_ready == 0
            if ready:
                stats = algorithm.train_from_replay()
        unroller.publish(self.algorithm)
        return stats, unroller.env_steps_taken - steps_before

    # ----------------------------------------------------------------- state
    def _restore(self, state: dict[str, Any], path: str) -> None:
        load_into(self.algorithm, state, path)
        self.iteration = int(state["iteration"])
        self.env_steps = int(state["env_steps"])
        self.train_time_s = float(state.get("train_time_s", 0.0))
        self.wall_time_s = float(state.get("wall_time_s", self.train_time_s))
        restore_rng_states(
            state,
            device=self.device,
            distributed=self.distributed,
            random_seed=self.config.random_seed,
        )
        if self.off_policy and "replay_buffer" in state and self.distributed is None:
            buffer = self.algorithm.replay_buffer
            if buffer.enable_checkpoint:
                buffer.load_checkpoint_state(state["replay_buffer"])
                # The environments restart with new episodes: end the stored ones there
                # (as truncations, so their last transitions still bootstrap).
                buffer.overwrite_newest("step_type", StepType.LAST)
        logging.info(
            "Resumed from %s (iteration %d, %d env steps)", path, self.iteration, self.env_steps
        )

    def save_checkpoint(self) -> str | None:
        """Writes a checkpoint of the current iteration; returns its path (None on ranks
        other than 0, which only contribute their random-number state).

        In a data-parallel run, this is a collective that also checks that every rank
        holds the same parameters (:class:`~alf.utils.distributed.DistributedError` if
        not)."""
        what = f"the checkpoint of iteration {self.iteration}"
        rng_states = gather_rng_states(self.device, self.distributed, what=what)
        if self.distributed is not None:
            self.distributed.check_identical(self.algorithm, what=what)
            if not self.is_main:
                return None
        state = {
            "format_version": 1,
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "train_time_s": self.train_time_s,
            "wall_time_s": self._wall_time(),
            **rng_states,
            "bindings": alf_config.current_bindings(),
            "algorithm": to_device(self.algorithm.checkpoint_state(), "cpu"),
        }
        if self.off_policy and self.algorithm.replay_buffer.enable_checkpoint:  # single process
            state["replay_buffer"] = self.algorithm.replay_buffer.checkpoint_state()
        return self.checkpointer.save(self.iteration, state)

    # ------------------------------------------------------------------ loop
    def request_stop(self) -> None:
        """Asks the loop to checkpoint and return after the current iteration."""
        self._stop_requested = True

    def progress(self) -> float:
        """Fraction of the budget used, in ``[0, 1]``."""
        fractions = []
        if self.config.num_env_steps > 0:
            fractions.append(self.env_steps / self.config.num_env_steps)
        if self.config.num_iterations > 0:
            fractions.append(self.iteration / self.config.num_iterations)
        return min(1.0, max(fractions))

    def _finished(self) -> bool:
        return self.progress() >= 1.0 or self.reached_target

    def evaluate(self) -> EvalResult | None:
        """Evaluates now, writes the eval summary, and returns the result."""
        if self.evaluator is None:
            return None
        result = self.evaluator.evaluate()
        self.last_eval = result
        target = self.config.stop_at_eval_return
        if target is not None and result.average_return >= target:
            self.reached_target = True
        self.summary.write(
            "eval",
            {
                "average_return": result.average_return,
                "average_episode_length": result.average_episode_length,
            },
            {
                "iteration": self.iteration,
                "env_steps": self.env_steps,
                "elapsed_s": round(self._wall_time(), 3),
                "train_time_s": round(self.train_time_s, 3),
            },
            env_steps=self._summary_step(),
            iteration=self.iteration,
        )
        logging.info(
            "Evaluation at iteration %d (%d env steps): average return %.2f over %d episodes",
            self.iteration,
            self.env_steps,
            result.average_return,
            len(result.returns),
        )
        return result

    def train(self) -> dict[str, Any]:
        """Runs the loop until the budget is used or a stop is requested.

        Returns:
            ``iteration``, ``env_steps``, ``stopped_early``, ``reached_target`` and,
            when evaluated, ``eval_average_return``.
        """
        if self._closed:
            raise RuntimeError("RLTrainer.train() after close()")
        config = self.config
        start_iteration = self.iteration
        report = TrainingReport(
            summary=self.summary,
            distributed=self.distributed,
            start_iteration=start_iteration,
            start_env_steps=self.env_steps,
        )
        first_iteration = self.is_main
        skipped_in_a_row = 0
        self._session_start = time.monotonic()
        self._wall_base = self.wall_time_s
        try:
            self._agree_on_stop()
            while not self._finished() and not self._stopping:
                self.algorithm.set_progress(self.progress())
                if self.rollout_algorithm is not self.algorithm:
                    self.rollout_algorithm.set_progress(self.progress())
                tick = time.perf_counter()
                stats, steps = self._train_iteration()
                elapsed = time.perf_counter() - tick
                self.iteration += 1
                self.env_steps += self._run_steps(steps)
                self.train_time_s += elapsed
                report.add_iteration(
                    steps, elapsed, *self.unroller.episodes.pop_completed(), trained=bool(stats)
                )

                skipped_in_a_row = skipped_in_a_row + 1 if stats.get("skipped") == 1.0 else 0
                if skipped_in_a_row >= config.max_consecutive_skipped_iterations:
                    raise TrainingDivergedError(
                        f"Every update of the last {skipped_in_a_row} iterations had a "
                        f"non-finite loss; stopping. The last good checkpoint is kept in "
                        f"{self.checkpointer.directory}."
                    )
                if first_iteration:
                    first_iteration = False
                    self._record_operative_config()
                if self.iteration % config.summary_interval == 0:
                    self._write_train_summary(report, stats)
                if config.eval_interval and self.iteration % config.eval_interval == 0:
                    self.evaluate()
                if self.iteration % config.checkpoint_interval == 0:
                    self.save_checkpoint()
                self._agree_on_stop()
                if self.is_main:
                    report.print_progress(
                        self.iteration,
                        self.env_steps,
                        elapsed_s=self._wall_time(),
                        interval_s=config.progress_interval_s,
                        num_env_steps=config.num_env_steps,
                        num_iterations=config.num_iterations,
                    )
            if self.iteration > start_iteration:  # nothing to add if no iteration ran
                if (
                    self._finished()
                    and not self.reached_target
                    and config.evaluate
                    and (not config.eval_interval or self.iteration % config.eval_interval)
                ):
                    self.evaluate()
                self.save_checkpoint()
        except BaseException:
            if self.summary is not None:
                self.summary.mark_failed()  # the trackers' runs end as failed
            raise
        finally:
            self.wall_time_s = self._wall_time()
            self._session_start = None
            if self.summary is not None:
                self.summary.flush()
        result: dict[str, Any] = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "stopped_early": self._stopping and not self._finished(),
            "reached_target": self.reached_target,
        }
        if self.last_eval is not None:
            result["eval_average_return"] = self.last_eval.average_return
        return result

    def _run_steps(self, steps: int) -> int:
        """The run's env steps of an iteration in which this rank took ``steps``."""
        if self.distributed is None:
            return steps
        if not isinstance(self.unroller, AsyncUnroller):
            return steps * self._world_size  # every rank steps as many environments
        # Actors' fragments (some dropped as too old) arrive at each rank's own pace.
        (total,) = self.distributed.all_reduce_sum([steps], what="counting env steps")
        return int(total)

    def _agree_on_stop(self) -> None:
        """Ranks stop together: if any was asked to stop or reached the target (rank 0's
        evaluation), all are."""
        if self.distributed is None:
            self._stopping = self._stop_requested
            return
        # The loop reads only the agreed flags: a signal that arrives on one rank after
        # this point is acted on by all of them at the next agreement.
        stop, target = self.distributed.all_reduce_sum(
            [self._stop_requested, self.reached_target],
            what=f"the end of iteration {self.iteration}",
        )
        self._stopping, self.reached_target = stop > 0, target > 0

    def _record_operative_config(self) -> None:
        """After the first iteration: the operative config to ``config.gin`` and
        TensorBoard, and a warning naming the bindings nothing used."""
        operative = alf_config.operative_config_str()
        run_files.write_config(self.root_dir, operative)
        self.summary.text("config", operative)
        unused = alf_config.inoperative_bindings()
        if unused:
            logging.warning(
                "These config bindings were never used by the run: %s", ", ".join(unused)
            )

    def _write_train_summary(self, report: TrainingReport, stats: dict[str, Any]) -> None:
        async_stats = {}
        if isinstance(self.unroller, AsyncUnroller):
            async_stats = self.unroller.pop_stats()
        report.write_summary(
            self.iteration,
            {**stats, "learning_rate": self.algorithm.learning_rate, **async_stats},
            {
                "iteration": self.iteration,
                "env_steps": self.env_steps,
                "elapsed_s": round(self._wall_time(), 3),
                "train_time_s": round(self.train_time_s, 3),
            },
            env_steps=self._summary_step(),
            clipped_actions=self._num_clipped_actions(),
        )

    def _num_clipped_actions(self) -> int:
        source = self.unroller if isinstance(self.unroller, AsyncUnroller) else self.env
        return int(getattr(source, "num_clipped_actions", 0))

    def _wall_time(self) -> float:
        """Wall-clock seconds of training so far, over all sessions of the run."""
        if getattr(self, "_session_start", None) is None:
            return self.wall_time_s
        return self._wall_base + time.monotonic() - self._session_start

    def close(self) -> None:
        """Closes the environments and summary files and releases ``root_dir``
        (idempotent)."""
        if isinstance(self.unroller, AsyncUnroller):
            self.unroller.close()
        for resource in (self.env, self.eval_env):
            if resource is not None:
                resource.close()
        self.env = self.eval_env = None
        if self.summary is not None:
            self.summary.close()
            self.summary = None
        if self._lock is not None:
            self._lock.release()
        self._closed = True
