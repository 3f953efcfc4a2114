"""How a data-parallel run divides its config over the ranks and wires the algorithm's
gradient all-reduce (used by :class:`~alf.trainers.RLTrainer` under ``torchrun``).

The config describes the whole run, whatever the number of ranks ``N``:

* ``create_environment.num_parallel_environments`` is the total: each rank steps
  ``num_parallel_environments / N`` environments (rank ``r``'s environment ``i`` is the
  run's environment ``r * num_parallel_environments / N + i`` and gets that seed), so the
  environment steps of one iteration are the same for any ``N``;
* ``mini_batch_size`` is the total: each rank's mini-batches hold ``mini_batch_size / N``
  steps (or sequences) and DDP averages the ranks' gradients, so an update sees the same
  amount of data as a single-process update;
* ``TrainerConfig.num_env_steps`` and ``initial_collect_steps`` count all ranks' steps;
  ``unroll_length``, ``num_epochs``, ``num_updates_per_train_iter``, the learning rate
  and the replay buffer's ``max_length`` (per environment) mean what they mean in a
  single process.

Each total must be divisible by ``N``; otherwise the run stops with an error before
training.
"""

from __future__ import annotations

from absl import logging

from alf.algorithms.multi_policy import MultiPolicyAlgorithm
from alf.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf.algorithms.on_policy_algorithm import OnPolicyAlgorithm
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.config import invalid_value
from alf.utils.distributed import DataParallelLoss, DistributedContext

__all__ = [
    "RANK_SEED_STRIDE",
    "Ranks",
    "configure_training",
    "divide_mini_batch",
    "enable_data_parallel",
]

RANK_SEED_STRIDE = 7_919
"""Rank ``r > 0`` reseeds torch with ``random_seed + r * RANK_SEED_STRIDE`` after the
(identical) algorithm is built, so its action sampling and mini-batch shuffles differ."""


class Ranks:
    """What the trainer's loop needs the ranks to agree on; for a single process
    (``context`` None) every answer is local and nothing is communicated.

    Args:
        context: this rank's context (None: a single-process run).
        async_collection: whether collection is async: then the ranks' actors deliver
            at their own pace, so env-step counts and replay readiness differ by rank.
    """

    def __init__(self, *, context: DistributedContext | None, async_collection: bool) -> None:
        self.context = context
        self.world_size = 1 if context is None else context.world_size
        self._async = async_collection

    def share(self, steps: int) -> int:
        """This rank's part of a run-wide number of environment steps (rounded up)."""
        return -(-steps // self.world_size)

    def run_steps(self, steps: int) -> int:
        """The run's env steps of an iteration in which this rank took ``steps``."""
        if self.context is None:
            return steps
        if not self._async:
            return steps * self.world_size  # every rank steps as many environments
        # Actors' fragments (some dropped as too old) arrive at each rank's own pace.
        (total,) = self.context.all_reduce_sum([steps], what="counting env steps")
        return int(total)

    def all_ready(self, ready: bool) -> bool:
        """Whether every rank is ready to train from replay (a collective in async
        data-parallel runs only: sync ranks store the same number of steps)."""
        if self.context is None or not self._async:
            return ready
        (not_ready,) = self.context.all_reduce_sum([not ready], what="the replay-readiness check")
        return not_ready == 0

    def agree_on_stop(self, stop: bool, target: bool, *, iteration: int) -> tuple[bool, bool]:
        """Ranks stop together: whether any rank was asked to stop, and whether any
        reached the target (rank 0's evaluation)."""
        if self.context is None:
            return stop, target
        total_stop, total_target = self.context.all_reduce_sum(
            [stop, target], what=f"the end of iteration {iteration}"
        )
        return total_stop > 0, total_target > 0


def _learners(algorithm: RLAlgorithm) -> list[RLAlgorithm]:
    """The algorithms that make updates: each learning policy of a run with several
    policies, else ``algorithm`` itself."""
    if isinstance(algorithm, MultiPolicyAlgorithm):
        return list(algorithm.learning_policies.values())
    return [algorithm]


def divide_mini_batch(algorithm: RLAlgorithm, context: DistributedContext) -> None:
    """Gives ``algorithm`` (each learning policy of a run with several) this rank's share
    of its ``mini_batch_size``.

    An on-policy algorithm divides its own
    (:meth:`~alf.algorithms.OnPolicyAlgorithm.share_mini_batch`); an off-policy one gets
    the share of the batch it samples. Other algorithms have no mini-batch to divide.

    Raises:
        ValueError: a ``mini_batch_size`` not divisible by the number of ranks.
    """
    for learner in _learners(algorithm):
        if isinstance(learner, OnPolicyAlgorithm):
            learner.share_mini_batch(context.world_size)
        elif isinstance(learner, OffPolicyAlgorithm):
            learner.mini_batch_size = context.share(
                learner.mini_batch_size, f"{type(learner).__name__}.mini_batch_size"
            )


def enable_data_parallel(
    algorithm: RLAlgorithm,
    context: DistributedContext,
    *,
    find_unused_parameters: bool,
    mixed_precision: str | None,
) -> list[DataParallelLoss]:
    """Makes ``algorithm`` train as one replica of a data-parallel run.

    Every rank gets rank 0's parameters and buffers; the data transformers' statistics
    combine all ranks' batches; and losses run inside DDP, so gradients are averaged: in a
    run with several policies, each learning policy's over the ranks separately (its own
    DDP over its own parameters; every rank updates the policies in the same order).
    Call it on every rank, after the algorithm is on its device and restored.

    Returns:
        The learning policies' :class:`DataParallelLoss` objects, to be released when
        the run closes (:meth:`DataParallelLoss.release`).
    """
    context.broadcast_module(algorithm)
    algorithm.data_transformer.set_sum_over_ranks(
        lambda t: context.sum_tensor(t, what="the data transformers' statistics update")
    )
    learners = _learners(algorithm)
    if learners != [algorithm]:  # the frozen policies too
        algorithm.configure_training(mixed_precision=mixed_precision)
    losses = []
    for learner in learners:
        data_parallel = DataParallelLoss(
            parameters=learner.optimized_parameters,
            context=context,
            find_unused_parameters=find_unused_parameters,
        )
        learner.configure_training(data_parallel=data_parallel, mixed_precision=mixed_precision)
        losses.append(data_parallel)
    if context.is_main:
        logging.info("Data-parallel training on %d ranks (%s)", context.world_size, context.backend)
    return losses


def configure_training(
    algorithm: RLAlgorithm,
    context: DistributedContext | None,
    *,
    find_unused_parameters: bool,
    mixed_precision: str | None,
    compile: bool = False,  # noqa: A002 - TrainerConfig.compile
) -> list[DataParallelLoss]:
    """Configures how ``algorithm`` trains: as one replica of a data-parallel run
    (:func:`divide_mini_batch` and :func:`enable_data_parallel`) when ``context`` is
    given, otherwise alone (compiled if ``compile``); with ``mixed_precision`` either way.

    Returns:
        The :class:`DataParallelLoss` objects to release when the run closes (none when
        training alone).

    Raises:
        ConfigValueError: ``compile`` in a data-parallel run.
    """
    if context is None:
        algorithm.configure_training(mixed_precision=mixed_precision, compile=compile)
        return []
    if compile:
        raise invalid_value(
            "TrainerConfig.compile",
            compile,
            "False in a data-parallel run (compiled updates inside DistributedDataParallel "
            "are not supported yet)",
        )
    divide_mini_batch(algorithm, context)
    return enable_data_parallel(
        algorithm,
        context,
        find_unused_parameters=find_unused_parameters,
        mixed_precision=mixed_precision,
    )
