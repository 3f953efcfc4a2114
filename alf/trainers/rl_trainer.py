"""``RLTrainer``: builds a run from its config and trains it, resumably."""

from __future__ import annotations

import os
import time
from typing import Any

from alf import config as alf_config
from alf.datasets import read_info
from alf.environments import AlfEnvironment
from alf.errors import AlfError
from alf.run_dir import layout
from alf.run_dir.checkpoints import (
    Checkpointer,
    RunCheckpoint,
    checkpoint_dir,
)
from alf.run_dir.layout import check_writable
from alf.run_dir.metadata import record_offline_data
from alf.trainers.agent_groups import eval_group_scalars, summary_groups
from alf.trainers.algorithm_builder import algorithm_factory, build_algorithm
from alf.trainers.callbacks import TrainingContext, run_hook
from alf.trainers.collection import build_collector, learning_setup, steps_this_iteration
from alf.trainers.components import EVAL_SEED_OFFSET, build_components
from alf.trainers.data_parallel import Ranks, configure_training
from alf.trainers.env_faults import (
    COLLECTION_FAILURES,
    checkpoint_after_write_failure,
    checkpoint_healthy_learner,
    start_env_watchdog,
)
from alf.trainers.evaluator import EvalResult
from alf.trainers.frozen_policies import frozen_policy_states, load_frozen_policies
from alf.trainers.league import SelfPlayRun, frozen_policy_maker
from alf.trainers.resume import (
    check_resumed_config,
    make_checkpoint,
    read_resume_checkpoint,
    restore_run,
)
from alf.trainers.run_lock import RunDirLock
from alf.trainers.train_report import (
    DivergenceGuard,
    SessionClock,
    TrainingDivergedError,
    TrainingReport,
    write_eval_summary,
)
from alf.trainers.trainer_config import TrainerConfig
from alf.trainers.training_video import TrainingVideos
from alf.unrollers.collector import Collector
from alf.utils.distributed import DataParallelLoss, DistributedContext
from alf.utils.summary import (
    SummaryLogger,
    record_operative_config,
    start_run_logging,
    truncate_progress_log,
)

__all__ = ["RLTrainer", "TrainingDivergedError", "build_algorithm"]


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
        self._ranks = Ranks(context=distributed, async_collection=config.async_unroll)
        self._world_size = self._ranks.world_size
        self._closed = False
        self.iteration = 0
        self.env_steps = 0
        self.train_time_s = 0.0
        self.clock = SessionClock()
        """Wall-clock seconds of training, over all sessions of the run."""
        self._stop_requested = False  # this process was asked to stop
        self._stopping = False  # ... and the ranks agreed on it (see _agree_on_stop)
        self.reached_target = False
        self._videos: TrainingVideos | None = None
        self.stop_reason: str | None = None
        """Why a callback stopped the run (None: it was not stopped by one)."""
        self.finished_before = False
        """The run had used its budget before this session: nothing is built, trained
        or written (:meth:`train` returns at once)."""
        self.last_eval: EvalResult | None = None
        self.env: AlfEnvironment | None = None
        self.eval_env: AlfEnvironment | None = None
        self.self_play: SelfPlayRun | None = None
        """The league and fixed-opponent evaluation of a self-play run."""
        self._agent_groups: tuple[str, ...] | None = None
        self.summary: SummaryLogger | None = None
        self.unroller: Collector | None = None
        """The run's collector (sync or async; named for the unrollers it was)."""
        self._watchdog = None  # times the environments' calls (TrainerConfig.env_timeout_s)
        self._data_parallel_losses: list[DataParallelLoss] = []  # released by close()
        self._lock = RunDirLock(root_dir=root_dir) if self.is_main else None
        try:
            self._build(config, root_dir)
        except BaseException:
            # A failed start leaves root_dir as it found it (or no root_dir at all).
            lock, self._lock = self._lock, None
            try:
                self.close()
            finally:
                if lock is not None:
                    lock.release(undo_start=True)
            raise

    def _build(self, config: TrainerConfig, root_dir: str) -> None:
        self.checkpointer = Checkpointer(
            directory=checkpoint_dir(root_dir),
            num_to_keep=config.num_checkpoints,
            keep_every=config.keep_checkpoint_every,
        )
        # Read and check the checkpoint before building anything, so a bad one fails fast
        # and nothing in root_dir is touched.
        resume = read_resume_checkpoint(self.checkpointer, self.distributed)
        if self._used_its_budget(resume):
            return
        if self.is_main:
            check_writable(root_dir)
        context = self.distributed
        parts = build_components(
            config,
            distributed=context,
            resumed_env_steps=None if resume is None else resume.env_steps,
            evaluate=config.evaluate and self.is_main,
        )
        self.device, self.algorithm = parts.device, parts.algorithm
        self.env, self.eval_env, self.evaluator = parts.env, parts.eval_env, parts.evaluator
        self.policy = parts.policy
        """What acts in this process (collection and evaluation): a policy of the
        algorithm, or of its CPU copy when training on another device."""
        self.frozen_policies = load_frozen_policies(
            config,
            observation_spec=self.policy.observation_spec,
            action_spec=self.policy.action_spec,
            resume=resume,
        )
        """The run's other policies (``TrainerConfig.frozen_policies``), by name."""
        self._frozen_evaluators = {
            name: self.evaluator.with_policy(policy)
            for name, policy in self.frozen_policies.items()
            if self.evaluator is not None
        }
        self.self_play = self._start_self_play(config, resume)
        self._agent_groups = summary_groups()
        num_envs = parts.num_envs
        self.algorithm.prepare_learning(
            learning_setup(config, num_envs=num_envs, ranks=self._ranks)
        )
        if resume is not None:
            # After the environments are built (a bad env id is the clearer error), and
            # before anything in root_dir is written.
            if not config.allow_config_change:
                check_resumed_config(resume, root_dir)
            self._restore(resume)
        self._data_parallel_losses = configure_training(
            self.algorithm,
            context,
            find_unused_parameters=config.find_unused_parameters,
            mixed_precision=config.mixed_precision,
            compile=config.compile,
        )
        self.policy.load_parameters(self.algorithm)
        # Built last: async actors get the restored parameters and step counts.
        self.unroller = build_collector(
            config=config,
            env=self.env,
            algorithm=self.algorithm,
            policy=self.policy,
            num_envs=num_envs,
            seed=parts.seed,
            config_text=alf_config.config_str(),
            initial_collect_steps=self._ranks.share(
                max(0, config.initial_collect_steps - self.env_steps)
            ),
        )
        self._watchdog = start_env_watchdog(self)
        if self.is_main:
            self._start_run_dir(resume is not None)

    def _start_self_play(
        self, config: TrainerConfig, resume: RunCheckpoint | None
    ) -> SelfPlayRun | None:
        """The run's league and fixed-opponent evaluation (``TrainerConfig.self_play``)."""
        if config.self_play is None:
            return None
        return SelfPlayRun(
            settings=config.self_play,
            env=self.env,
            policy=self.policy,
            make_policy=frozen_policy_maker(
                algorithm_factory(config),
                observation_spec=self.policy.observation_spec,
                action_spec=self.policy.action_spec,
            ),
            learner=self.algorithm,
            saved={} if resume is None else resume.policies,
            iteration=0 if resume is None else resume.iteration,
            num_eval_envs=config.num_eval_environments if self.evaluator is not None else 0,
            seed=config.random_seed + EVAL_SEED_OFFSET,
        )

    def _used_its_budget(self, resume: RunCheckpoint | None) -> bool:
        """Whether the resumed run had already used its budget: then nothing is built
        and the run's files stay as they are, byte for byte (:attr:`finished_before`)."""
        config = self.config
        if (
            resume is None
            or config.progress(iteration=resume.iteration, env_steps=resume.env_steps) < 1.0
        ):
            return False
        if not config.allow_config_change:
            check_resumed_config(resume, self.root_dir)
        self.iteration, self.env_steps = resume.iteration, resume.env_steps
        self.finished_before = True
        return True

    def _start_run_dir(self, resumed: bool) -> None:
        """Rank 0's start in ``root_dir``: stale temporaries removed, the logs cut back to
        the resumed iteration, summaries, trackers and ``run_info.json`` started, the
        config written; videos set up when asked for."""
        config, root_dir = self.config, self.root_dir
        self.checkpointer.remove_stale_temporaries()
        layout.remove_stale_temporaries(root_dir)
        if config.video_interval:
            self._videos = TrainingVideos(
                root_dir=root_dir,
                policy=self.policy,
                interval=config.video_interval,
                seed=config.random_seed,
                max_episode_steps=config.max_eval_episode_steps,
            )
        for log in (layout.PROGRESS_FILE, layout.EVALUATIONS_FILE):
            truncate_progress_log(os.path.join(root_dir, log), self.iteration)
        # Events after the resumed step (or all of them, for a fresh start) belong to a
        # run that is being redone: drop them. Trackers start; run_info.json is written.
        self.summary = start_run_logging(
            root_dir,
            config=config,
            purge_step=self._summary_step() + 1,
            resumed_from=(self.iteration, self.env_steps) if resumed else None,
            device=self.device,
            world_size=self._world_size,
        )
        if config.offline_datasets:
            record_offline_data(root_dir, [read_info(n).summary() for n in config.offline_datasets])
        layout.write_config(root_dir, alf_config.config_str())

    def _summary_step(self) -> int:
        """Summaries' x-axis: env steps (iterations if training on offline data alone)."""
        return self.iteration if self.offline_only else self.env_steps

    @property
    def offline_only(self) -> bool:
        """Whether training uses offline data alone (no environment steps)."""
        return self.config.offline_only

    def _train_iteration(self) -> tuple[dict[str, float], int]:
        """Collects and learns once, then publishes the parameters to the collector;
        returns the statistics and this rank's env steps."""
        try:
            try:
                trajectory = self.unroller.collect(
                    steps_this_iteration(self.config, self.iteration)
                )
            except COLLECTION_FAILURES:
                checkpoint_healthy_learner(self)  # the learner is fine: keep what it learned
                raise
            stats = self.algorithm.learn(trajectory)
        finally:
            # The policy collects (sync) and evaluates (both).
            self.policy.load_parameters(self.algorithm)
        self.unroller.publish(self.policy)
        return stats, trajectory.env_steps

    # ----------------------------------------------------------------- state
    def _restore(self, checkpoint: RunCheckpoint) -> None:
        restore_run(
            checkpoint,
            algorithm=self.algorithm,
            device=self.device,
            distributed=self.distributed,
            random_seed=self.config.random_seed,
        )
        self.iteration, self.env_steps = checkpoint.iteration, checkpoint.env_steps
        self.train_time_s = checkpoint.train_time_s
        self.clock = SessionClock(earlier_s=checkpoint.wall_time_s)

    def save_checkpoint(self) -> str | None:
        """Writes a checkpoint of the current iteration; returns its path (None on ranks
        other than 0, which only contribute their random-number state).

        In a data-parallel run, this is a collective that also checks that every rank
        holds the same parameters (:class:`~alf.utils.distributed.DistributedError` if
        not)."""
        checkpoint = make_checkpoint(
            algorithm=self.algorithm,
            device=self.device,
            distributed=self.distributed,
            iteration=self.iteration,
            env_steps=self.env_steps,
            train_time_s=self.train_time_s,
            wall_time_s=self.clock.seconds,
            policies={
                **frozen_policy_states(self.frozen_policies),
                **(self.self_play.league.states() if self.self_play is not None else {}),
            },
        )
        if checkpoint is None:
            return None
        return self.checkpointer.save(self.iteration, checkpoint.to_state())

    # ------------------------------------------------------------------ loop
    def request_stop(self) -> None:
        """Asks the loop to checkpoint and return after the current iteration."""
        self._stop_requested = True

    def progress(self) -> float:
        """Fraction of the budget used, in ``[0, 1]``."""
        return self.config.progress(iteration=self.iteration, env_steps=self.env_steps)

    def _finished(self) -> bool:
        return self.progress() >= 1.0 or self.reached_target

    def evaluate(self) -> EvalResult | None:
        """Evaluates now, writes the eval summary, and returns the result."""
        if self.evaluator is None:
            return None
        try:
            result = self.evaluator.evaluate()
            others = {name: ev.evaluate() for name, ev in self._frozen_evaluators.items()}
            games = self.self_play.eval_scalars() if self.self_play is not None else {}
            games.update(eval_group_scalars(self._agent_groups, result))
        except COLLECTION_FAILURES:
            checkpoint_healthy_learner(self)
            raise
        self.last_eval = result
        if self.is_main and self.config.callbacks:
            self._call_back("on_evaluation", {}, tuple(result.returns))
        target = self.config.stop_at_eval_return
        if target is not None and result.average_return >= target:
            self.reached_target = True
        write_eval_summary(
            self.summary,
            result,
            self._counters(),
            summary_step=self._summary_step(),
            others=others,
            extra_scalars=games,
        )
        return result

    def train(self) -> dict[str, Any]:
        """Runs the loop until the budget is used or a stop is requested, recording the
        run's state in ``status.json`` (rank 0): ``running``, then ``finished``,
        ``stopped`` or ``failed`` with the error. A run that had used its budget before
        (:attr:`finished_before`) returns at once and writes nothing.

        Returns:
            ``iteration``, ``env_steps``, ``stopped_early``, ``reached_target``,
            ``finished_before`` and, when evaluated, ``eval_average_return``.
        """
        if self._closed:
            raise RuntimeError("RLTrainer.train() after close()")
        if self.finished_before:
            return self._result()
        if self.is_main:
            layout.write_status(
                self.root_dir,
                layout.RunStatus.RUNNING,
                num_env_steps=self.config.num_env_steps,
                num_iterations=self.config.num_iterations,
            )
        try:
            self._run_loop()
        except BaseException as err:
            checkpoint_after_write_failure(self, err)  # e.g. progress.jsonl: disk full
            if self.summary is not None:
                self.summary.mark_failed()  # the trackers' runs end as failed
            if self.is_main:
                self._record_failure(err)
            raise
        finally:
            self.clock.stop()
            if self.summary is not None:
                self.summary.flush()
        result = self._result()
        if self.is_main:
            layout.write_status(
                self.root_dir,
                layout.RunStatus.STOPPED if result["stopped_early"] else layout.RunStatus.FINISHED,
                iteration=self.iteration,
                env_steps=self.env_steps,
                num_env_steps=self.config.num_env_steps,
                eval_average_return=result.get("eval_average_return"),
                **({"stop_reason": self.stop_reason} if self.stop_reason else {}),
            )
        return result

    def _record_failure(self, err: BaseException) -> None:
        """``status.json``: ``failed`` with the error's one line (an ALF error) or its
        repr (anything else), never masking ``err`` with a second failure."""
        fields: dict[str, Any] = {"error": repr(err)}
        if isinstance(err, AlfError):
            fields = {"error": str(err), "exit_code": err.exit_code}
        try:
            layout.write_status(self.root_dir, layout.RunStatus.FAILED, **fields)
        except OSError:
            pass  # (the disk is full: err says so)

    def _result(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "stopped_early": self._stopping and not self._finished(),
            "reached_target": self.reached_target,
            "finished_before": self.finished_before,
            "stop_reason": self.stop_reason,
        }
        if self.last_eval is not None:
            result["eval_average_return"] = self.last_eval.average_return
        return result

    def _run_loop(self) -> None:
        config = self.config
        start_iteration = self.iteration
        report = TrainingReport(
            summary=self.summary,
            distributed=self.distributed,
            start_iteration=start_iteration,
            start_env_steps=self.env_steps,
            groups=self._agent_groups,
        )
        first_iteration = self.is_main
        divergence = DivergenceGuard(
            limit=config.max_consecutive_skipped_iterations,
            checkpoint_dir=self.checkpointer.directory,
        )
        self.clock.start()
        self._agree_on_stop()
        while not self._finished() and not self._stopping:
            self.algorithm.set_progress(self.progress())
            if self.policy.algorithm is not self.algorithm:
                self.policy.set_progress(self.progress())
            self.algorithm.record_statistics = (self.iteration + 1) % config.summary_interval == 0
            tick = time.perf_counter()
            stats, steps = self._train_iteration()
            elapsed = time.perf_counter() - tick
            self.iteration += 1
            self.env_steps += self._ranks.run_steps(steps)
            self.train_time_s += elapsed
            report.add_iteration(steps, elapsed, self.unroller.pop_episodes(), trained=bool(stats))

            divergence.check(stats)
            if self.self_play is not None:
                self.self_play.after_iteration(self.iteration, self.algorithm)
            if first_iteration:
                first_iteration = False
                record_operative_config(self.root_dir, self.summary)
            if self.iteration % config.summary_interval == 0:
                self._write_train_summary(report, stats)
            if config.eval_interval and self.iteration % config.eval_interval == 0:
                self.evaluate()
            if self._videos is not None and self._videos.due(self.iteration):
                self._videos.record(self.iteration)
            if self.iteration % config.checkpoint_interval == 0:
                self.save_checkpoint()
            if self.is_main and config.callbacks:
                self._call_back("on_iteration", stats)
            self._agree_on_stop()
            if self.is_main:
                report.print_progress(
                    self.iteration,
                    self.env_steps,
                    elapsed_s=self.clock.seconds,
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

    def _call_back(
        self, hook: str, stats: dict[str, Any], eval_returns: tuple[float, ...] = ()
    ) -> None:
        """Runs ``hook`` of ``TrainerConfig.callbacks``; one that asks to stop the run
        gets it stopped (after this iteration, with a checkpoint)."""
        context = TrainingContext(
            root_dir=self.root_dir,
            iteration=self.iteration,
            env_steps=self.env_steps,
            progress=self.progress(),
            elapsed_s=self.clock.seconds,
            stats={k: float(v) for k, v in stats.items() if _is_number(v)},
            eval_returns=eval_returns,
        )
        reason = run_hook(self.config.callbacks, hook, context)
        if reason is not None and self.stop_reason is None:
            self.stop_reason = reason
            self.request_stop()

    def _agree_on_stop(self) -> None:
        # The loop reads only the agreed flags: a signal that arrives on one rank after
        # this point is acted on by all of them at the next agreement.
        self._stopping, self.reached_target = self._ranks.agree_on_stop(
            self._stop_requested, self.reached_target, iteration=self.iteration
        )

    def _write_train_summary(self, report: TrainingReport, stats: dict[str, Any]) -> None:
        report.write_summary(
            self.iteration,
            {**stats, "learning_rate": self.algorithm.learning_rate, **self.unroller.stats()},
            self._counters(),
            env_steps=self._summary_step(),
            clipped_actions=self.unroller.num_clipped_actions,
            dropped_episodes=(
                self.unroller.num_dropped_episodes if self.config.drops_nonfinite_episodes else None
            ),
        )

    def _counters(self) -> dict[str, Any]:
        """The run's counters, recorded with every summary in ``progress.jsonl``."""
        return {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "elapsed_s": round(self.clock.seconds, 3),
            "train_time_s": round(self.train_time_s, 3),
        }

    def close(self) -> None:
        """Closes the environments and summary files and releases ``root_dir``
        (idempotent)."""
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None
        if self.unroller is not None:
            self.unroller.close()
            self.unroller = None
            self.env = None  # (a sync collector closes the environments it steps)
        for resource in (self.env, self.eval_env, self.self_play):
            if resource is not None:
                resource.close()
        self.env = self.eval_env = self.self_play = None
        if self.summary is not None:
            self.summary.close()
            self.summary = None
        for loss in self._data_parallel_losses:
            loss.release()
        if self._lock is not None:
            # A finished run's session gives the lock file its earlier contents back.
            self._lock.release(undo_start=self.finished_before)
        self._closed = True


def _is_number(value: Any) -> bool:
    """Whether a statistic is a number (a float, an int or a 0-d tensor)."""
    return isinstance(value, int | float) or getattr(value, "ndim", None) == 0
