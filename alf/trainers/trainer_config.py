"""``TrainerConfig``: everything about a run that is not the algorithm or the environment."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from alf.config import ConfigValueError, configurable, fit_config_value, invalid_value
from alf.trainers.callbacks import Callback
from alf.trainers.self_play import SelfPlay
from alf.utils.trackers import WANDB_MODES

__all__ = ["NONFINITE_DATA_POLICIES", "RESUMABLE_SETTINGS", "TrainerConfig"]

NONFINITE_DATA_POLICIES = ("stop", "drop_episode")
"""Values of ``TrainerConfig.nonfinite_data``."""

RESUMABLE_SETTINGS = tuple(
    f"TrainerConfig.{name}"
    for name in (
        "num_iterations",
        "num_env_steps",
        "summary_interval",
        "eval_interval",
        "num_eval_episodes",
        "num_eval_environments",
        "max_eval_episode_steps",
        "eval_exploring",
        "video_interval",
        "callbacks",
        "env_timeout_s",
        "evaluate",
        "checkpoint_interval",
        "num_checkpoints",
        "keep_checkpoint_every",
        "progress_interval_s",
        "torch_num_threads",
        "max_consecutive_skipped_iterations",
        "nonfinite_data",
        "allow_config_change",
        "stop_at_eval_return",
        "async_unroll",
        "device",
        "collect_on_device",
        "mixed_precision",
        "compile",
        "distributed_timeout_s",
        "find_unused_parameters",
        "wandb_project",
        "wandb_mode",
        "mlflow_tracking_uri",
        "mlflow_experiment",
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
        data_transformer_ctor: a list of data transformer constructors (see
            :mod:`alf.data_transformers`), e.g. ``[@ImageScale, @FrameStacker]``, each
            called as ``ctor(observation_spec=...)`` with the previous one's output spec.
            They preprocess observations and rewards for the policy and for training;
            the algorithm is built for their output spec, and their statistics are
            saved in checkpoints.
        unroll_length: environment steps per environment per training iteration. For
            off-policy algorithms it may be fractional: 0.25 steps the environments once
            every 4 iterations (so each step gets 4 training iterations of updates).
        num_iterations: stop after this many iterations (0 or None: no limit).
        num_env_steps: stop after this many training environment steps (0 or None: no
            limit). At least one of the two budgets must be set (> 0); whichever is
            reached first ends the run. None is stored as 0.
        random_seed: seeds torch and the environments (environment ``i`` gets
            ``random_seed + i``; evaluation environments use a separate range).
        summary_interval: iterations between summaries (TensorBoard and progress.jsonl).
        eval_interval: iterations between evaluations (0: only at the end).
        num_eval_episodes: episodes per evaluation.
        num_eval_environments: environments stepped together during evaluation.
        max_eval_episode_steps: the cap of an evaluation episode: one that has not ended
            after this many steps is cut there, counted with its partial return, and
            reported (a warning line and ``eval/cut_episodes`` in ``progress.jsonl``), so
            an environment that never ends an episode cannot hang evaluation. None (the
            default): the environment's own time limit if it has one (its spec's
            ``max_episode_steps``), else
            :data:`~alf.trainers.evaluator.DEFAULT_MAX_EVAL_EPISODE_STEPS` (100,000).
        eval_exploring: evaluate with the policy's exploring steps (``rollout_step``:
            actions sampled from a stochastic policy, epsilon-greedy for the DQN family,
            with exploration noise for DDPG/TD3) instead of its greedy ones
            (``predict_step``): SB3's ``deterministic=False``. The ``eval/`` summaries
            then measure the sampling policy (e.g. on MiniGrid, where PPO's sampling
            policy scores higher than its greedy one). Frozen policies are evaluated the
            same way; self-play's games against fixed opponents stay greedy.
        video_interval: every this many iterations, one greedy episode is played on an
            environment of its own and recorded to ``videos/iteration-<N>.mp4`` (headless;
            needs the ``[video]`` extra; 0, the default: no videos). A video that cannot
            be made is a warning, not an error.
        callbacks: objects called after every iteration and evaluation (see
            :mod:`alf.trainers.callbacks`), e.g. ``[@StopOnPlateau()]``; one can stop the
            run.
        frozen_policies: more policies the run holds besides the one it trains, by name:
            ``{"start": "/runs/ppo/checkpoints/ckpt-10.pt"}`` (a checkpoint file, or a run
            directory for its newest checkpoint) of a run of the same algorithm and
            environment. Their parameters never change; each is evaluated beside the
            trained policy (``eval/<name>/average_return``...) and saved in the run's
            checkpoints under its name, so a resumed run needs no source file.
        self_play: play a two-player turn-based game against a league of snapshots of
            the trained policy (``@SelfPlay()``, see :mod:`alf.trainers.self_play`);
            None: against the game's configured opponent (``turn_based_opponent``).
        env_timeout_s: seconds one ``reset`` or ``step`` of the learner's own
            environments (``sync`` and ``vector_entry_point`` backends, training and
            evaluation) may take before the run stops with one line naming the call and
            the environments (exit status 3, ``status.json`` ``failed``, a final
            checkpoint). A call hung in Python code is interrupted; one hung in C code
            cannot be, so after 5 more seconds the process ends itself the same way.
            None: no timeout. (Async actors have their own heartbeat,
            ``AsyncUnroller.heartbeat_timeout_s``.)
        evaluate: whether to evaluate at all.
        checkpoint_interval: iterations between checkpoints (one is also written at the
            end and on SIGINT/SIGTERM).
        num_checkpoints: how many of the newest checkpoints to keep.
        keep_checkpoint_every: also keep, forever, the checkpoint of every iteration
            that is a multiple of this (0: none). Checkpoints are named by iteration
            (``ckpt-<iteration>.pt``), so this is in iterations too (SAC with one
            environment and ``unroll_length=1``: one env step per iteration). Such
            checkpoints, and the ones pinned with ``alf.bin.dataset --pin=N``, are never
            removed by the rotation of ``num_checkpoints`` (e.g. the "medium" policy of a
            D4RL-style dataset; ``docs/offline.md``).
        progress_interval_s: seconds between progress lines on the console.
        torch_num_threads: threads for torch's CPU kernels, and for numpy's BLAS, which
            collection's numpy policy uses (``alf.utils.threads``); 0 or None: the
            libraries' defaults (one per core). The default, 1, is the fastest for the
            small networks of RL on a machine that does anything else: with 2 threads,
            one other busy process on a 2-core machine cut SAC Pendulum's updates/s by
            over 85%, while 1 thread kept most of its speed
            (``benchmarks/collection/contention.py``). Raise it for large networks (e.g. CNNs) on
            an otherwise idle machine.
        max_consecutive_skipped_iterations: stop the run (keeping the last good
            checkpoint) after this many iterations in a row whose every update was
            skipped for a non-finite loss.
        nonfinite_data: what to do when an environment returns a non-finite (NaN or
            infinite) observation or reward. ``"stop"`` (default): stop the run with one
            line naming the environment, its index, the step and the observation key
            (exit status 3; the checkpoints already written are kept). ``"drop_episode"``:
            end that environment's episode at its last finite step (as a time-limit
            truncation: the non-finite step is never seen by the algorithm), reset it,
            and count it in the ``dropped_nonfinite_episodes`` summary. Dropping needs
            environments built by ``suite_gym.load`` (the ``sync`` and ``subprocess``
            backends); EnvPool and custom backends only stop.
        allow_config_change: on resume, accept a config whose bindings differ from the
            ones the checkpoint was written with. Without it, only the settings listed in
            :data:`RESUMABLE_SETTINGS` (budget, intervals, threads...) may change.
        stop_at_eval_return: stop (with a checkpoint) once an evaluation's average return
            reaches this value (None: train to the end of the budget).
        initial_collect_steps: off-policy only: the first this many environment steps
            take uniformly random actions, and training starts once the replay buffer
            holds this many steps.
        offline_buffer_dir: off-policy only: the ``root_dir`` (or a list of them) of
            earlier runs trained with ``ReplayBuffer.enable_checkpoint=True``; the replay
            buffers in their newest checkpoints are loaded as offline data.
        offline_dataset: off-policy only: a dataset in Minari's format (a directory
            written by ``alf.bin.dataset``, or the id of a dataset in Minari's local
            datasets path), or a list of them, as offline data (with or without
            ``offline_buffer_dir``). Each is checked against the run's observation and
            action specs and held once in memory (``docs/offline.md``); several are
            sampled in proportion to their sizes, as if concatenated. Needs the
            ``[offline]`` extra.
        async_unroll: collect with actor processes (:class:`~alf.unrollers.AsyncUnroller`,
            configured as ``AsyncUnroller.num_actors = ...`` etc.) while the learner
            trains. ``create_environment.num_parallel_environments`` environments are
            split evenly over the actors; each training iteration takes
            ``AsyncUnroller.fragments_per_iteration`` fragments of ``unroll_length``
            steps (``unroll_length * num_parallel_environments / num_actors`` env steps
            per fragment: with one fragment per iteration, an off-policy algorithm makes
            ``num_actors`` times more updates per env step than the same config run
            synchronously; scale ``num_updates_per_train_iter`` or
            ``fragments_per_iteration`` to keep the replay ratio). On-policy algorithms
            train on the fragments directly, off-policy ones add them to the replay
            buffer. Async runs are not bit-for-bit reproducible.
        offline_fraction: the fraction of every mini-batch drawn from the offline data;
            1.0 trains on the offline data alone, without stepping the environments
            (then set the budget with ``num_iterations``; evaluation still plays the
            environment). None (the default): 1.0 with an ``offline_dataset`` (offline
            RL), 0.5 with only ``offline_buffer_dir`` (mixing an earlier run's buffer
            into online training).
        device: where the networks train: ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (also
            ``--device``). Training batches are copied to it through pinned memory with
            ``non_blocking=True``. Under ``torchrun`` with several ranks, ``"cuda"`` means
            each rank's ``cuda:LOCAL_RANK``.
        collect_on_device: run ``rollout_step`` (and evaluation) on ``device`` too, one
            batched step for all environments at a time (worth it for large networks,
            e.g. CNNs). Otherwise a CPU copy of the algorithm collects and is refreshed
            after every iteration. Ignored on the CPU; asynchronous actors always
            collect on the CPU.
        mixed_precision: ``"bfloat16"`` or ``"float16"``: compute losses under
            ``torch.autocast`` (float16 scales the loss with a ``GradScaler``; overflowed
            updates are skipped as non-finite ones); None: float32.
        compile: compile the updates (every loss and its backward pass) with
            ``torch.compile`` (opt in). On a CPU it paid about 1.2x per PPO CartPole
            update against a 40 s first compile; compiled code is cached on disk
            (``~/.cache/alf/torch_compile``, or ``TORCHINDUCTOR_CACHE_DIR``), so a resumed
            or repeated run compiles in seconds. On a GPU it also uses CUDA graphs
            (``mode="reduce-overhead"``); on an H200 that ran PPO and APPO Pong at
            0.6-0.85x eager (recompiling on summary iterations and on a short last
            mini-batch; ``benchmarks/README.md``, "GPU check"). Not in data-parallel
            runs. Collection (``rollout_step``) stays eager: compiled, it was no faster
            at 16 CartPole environments on a CPU and 1.1-1.3x at 64-256
            (``benchmarks/collection/compile_rollout.py``), on a part that is about a
            quarter of a PPO iteration.
        distributed_timeout_s: data-parallel runs: seconds a rank waits in a collective
            for a silent rank before failing (a rank that dies is noticed at once). It
            must exceed rank 0's longest evaluation, which the others wait for.
        find_unused_parameters: data-parallel runs: set it for algorithms whose updates
            leave some optimized parameters without a gradient (passed to
            ``DistributedDataParallel``; costs a graph traversal per update).
        wandb_project: log the run to this Weights & Biases project (None: no W&B; needs
            the ``[wandb]`` extra). The W&B run is named after the last two components of
            ``root_dir`` (e.g. ``ppo_hopper/seed-0``), gets the gin bindings as its config
            and every train/eval scalar against ``env_steps``; a resumed run continues
            the same W&B run (its id is kept in ``run_info.json``). W&B writes its files
            under ``root_dir/wandb/`` (``WANDB_DIR`` wins); the entity is W&B's default
            (``WANDB_ENTITY``).
        wandb_mode: ``"online"``, ``"offline"`` (files only, ``wandb sync`` them later)
            or ``"disabled"``. The ``WANDB_MODE`` environment variable wins when set.
        mlflow_tracking_uri: log the run to MLflow at this tracking URI (None: no
            MLflow; needs the ``[mlflow]`` extra): a server (``http://host:5000``), a
            database (``sqlite:////abs/path/mlflow.db``), or a ``file:`` URI or plain
            path for a local file store. Same run name, parameters (the gin bindings) and
            scalars as W&B, the scalars' step being the env steps; a resumed run
            continues the same MLflow run.
        mlflow_experiment: the MLflow experiment of the run (created if missing).
    """

    algorithm_ctor: Callable | None = None
    data_transformer_ctor: Sequence[Callable] = ()
    unroll_length: float = 8
    num_iterations: int | None = 0
    num_env_steps: int | None = 0
    random_seed: int = 0
    summary_interval: int = 10
    eval_interval: int = 0
    num_eval_episodes: int = 10
    num_eval_environments: int = 10
    max_eval_episode_steps: int | None = None
    eval_exploring: bool = False
    video_interval: int = 0
    callbacks: Sequence[Callback] = ()
    frozen_policies: dict[str, str] = dataclasses.field(default_factory=dict)
    self_play: SelfPlay | None = None
    env_timeout_s: float | None = 600.0
    evaluate: bool = True
    checkpoint_interval: int = 100
    num_checkpoints: int = 3
    keep_checkpoint_every: int = 0
    progress_interval_s: float = 5.0
    torch_num_threads: int | None = 1
    max_consecutive_skipped_iterations: int = 10
    nonfinite_data: str = "stop"
    allow_config_change: bool = False
    stop_at_eval_return: float | None = None
    initial_collect_steps: int = 0
    offline_buffer_dir: str | list[str] | None = None
    offline_dataset: str | list[str] | None = None
    offline_fraction: float | None = None
    async_unroll: bool = False
    device: str = "cpu"
    collect_on_device: bool = False
    mixed_precision: str | None = None
    compile: bool = False
    distributed_timeout_s: float = 1800.0
    find_unused_parameters: bool = False
    wandb_project: str | None = None
    wandb_mode: str = "online"
    mlflow_tracking_uri: str | None = None
    mlflow_experiment: str = "alf"

    def __post_init__(self) -> None:
        """Checks every setting's type (as :func:`alf.config.load_config` checks the
        bindings) and range.

        Raises:
            ConfigValueError: one line naming the setting, its value and what is allowed.
        """
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            fitted = fit_config_value(f"TrainerConfig.{field.name}", hints[field.name], value)
            if fitted is not value:
                setattr(self, field.name, fitted)
        if self.algorithm_ctor is None:
            raise ConfigValueError(
                "invalid configuration: TrainerConfig.algorithm_ctor is not set; bind it in "
                "the config, e.g. 'TrainerConfig.algorithm_ctor = @PPOAlgorithm'"
            )
        self._check_budget()
        self._check(self.unroll_length > 0, "unroll_length", "> 0")
        if self.offline_fraction is None:
            self.offline_fraction = 1.0 if self.offline_datasets else 0.5
        self._check(0.0 < self.offline_fraction <= 1.0, "offline_fraction", "in (0, 1]")
        self._check(
            self.keep_checkpoint_every >= 0,
            "keep_checkpoint_every",
            ">= 0 (0: keep only the newest num_checkpoints and the pinned ones)",
        )
        self._check(
            self.mixed_precision in (None, "bfloat16", "float16"),
            "mixed_precision",
            "'bfloat16', 'float16' or None",
        )
        self._check(self.distributed_timeout_s > 0, "distributed_timeout_s", "> 0")
        self._check(
            self.max_eval_episode_steps is None or self.max_eval_episode_steps >= 1,
            "max_eval_episode_steps",
            ">= 1 or None (the environment's own time limit)",
        )
        self._check(
            self.env_timeout_s is None or self.env_timeout_s > 0,
            "env_timeout_s",
            "> 0 or None (no timeout)",
        )
        self._check(self.initial_collect_steps >= 0, "initial_collect_steps", ">= 0")
        self._check(self.eval_interval >= 0, "eval_interval", ">= 0 (0: only at the end)")
        self._check(self.video_interval >= 0, "video_interval", ">= 0 (0: no videos)")
        self._check(
            self.torch_num_threads is None or self.torch_num_threads >= 0,
            "torch_num_threads",
            ">= 0 (0 or None: torch's default)",
        )
        for name in (
            "summary_interval",
            "checkpoint_interval",
            "num_checkpoints",
            "num_eval_episodes",
            "num_eval_environments",
        ):
            self._check(getattr(self, name) >= 1, name, ">= 1")
        self._check(
            self.nonfinite_data in NONFINITE_DATA_POLICIES,
            "nonfinite_data",
            "one of " + ", ".join(map(repr, NONFINITE_DATA_POLICIES)),
        )
        self._check_trackers()
        self._check_frozen_policies()

    def _check(self, ok: bool, name: str, allowed: str) -> None:
        if not ok:
            raise invalid_value(f"TrainerConfig.{name}", getattr(self, name), allowed)

    def _check_budget(self) -> None:
        """``num_iterations`` and ``num_env_steps``: ints >= 0, None meaning 0 (no
        limit); at least one of them > 0."""
        for name in ("num_iterations", "num_env_steps"):
            if getattr(self, name) is None:
                setattr(self, name, 0)
            self._check(getattr(self, name) >= 0, name, ">= 0 (0 or None: no limit)")
        if self.num_iterations == 0 and self.num_env_steps == 0:
            raise ConfigValueError(
                "invalid configuration: no training budget: set TrainerConfig.num_iterations "
                "or TrainerConfig.num_env_steps to a number > 0 (0 or None means no limit)"
            )

    def progress(self, *, iteration: int, env_steps: int) -> float:
        """Fraction of the budget (``num_env_steps``, ``num_iterations``: the first of
        them reached ends the run) used after ``iteration`` and ``env_steps``, in
        ``[0, 1]``."""
        fractions = []
        if self.num_env_steps > 0:
            fractions.append(env_steps / self.num_env_steps)
        if self.num_iterations > 0:
            fractions.append(iteration / self.num_iterations)
        return min(1.0, max(fractions))

    @property
    def drops_nonfinite_episodes(self) -> bool:
        """Whether non-finite environment data ends the episode rather than the run."""
        return self.nonfinite_data == "drop_episode"

    @property
    def offline_buffer_dirs(self) -> tuple[str, ...]:
        """``offline_buffer_dir`` as a tuple (empty without offline data)."""
        dirs = self.offline_buffer_dir
        if not dirs:
            return ()
        return (dirs,) if isinstance(dirs, str) else tuple(dirs)

    @property
    def offline_datasets(self) -> tuple[str, ...]:
        """``offline_dataset`` as a tuple (empty without datasets)."""
        names = self.offline_dataset
        if not names:
            return ()
        return (names,) if isinstance(names, str) else tuple(names)

    @property
    def offline_only(self) -> bool:
        """Whether training uses offline data alone (no environment steps)."""
        has_data = bool(self.offline_buffer_dirs or self.offline_datasets)
        return has_data and self.offline_fraction is not None and self.offline_fraction >= 1.0

    def _check_frozen_policies(self) -> None:
        for name, source in self.frozen_policies.items():
            if not isinstance(name, str) or not name or "/" in name or name == "policy":
                raise invalid_value(
                    "TrainerConfig.frozen_policies",
                    self.frozen_policies,
                    f"names without '/' other than 'policy' (the trained one); got {name!r}",
                )
            if not isinstance(source, str) or not source.strip():
                raise invalid_value(
                    f"TrainerConfig.frozen_policies[{name!r}]",
                    source,
                    "the path of a checkpoint file or of a run directory",
                )

    def _check_trackers(self) -> None:
        for name in ("wandb_project", "mlflow_tracking_uri"):
            value = getattr(self, name)
            self._check(value is None or bool(value.strip()), name, "a non-empty string or None")
        self._check(
            self.wandb_mode in WANDB_MODES,
            "wandb_mode",
            "one of " + ", ".join(map(repr, WANDB_MODES)),
        )
        self._check(bool(self.mlflow_experiment.strip()), "mlflow_experiment", "a non-empty string")
