"""``OnPolicyAlgorithm``: trains on each fresh trajectory for some epochs, then drops it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from alf import nest
from alf.algorithms.algorithm import was_skipped
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.config import invalid_value
from alf.data_structures import AlgStep, Experience, LossInfo
from alf.utils.device import to_device
from alf.utils.value_ops import valid_mask

__all__ = ["OnPolicyAlgorithm", "summarize_updates"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class OnPolicyAlgorithm(RLAlgorithm):
    """Trains on every unrolled trajectory: ``num_epochs`` passes of shuffled mini-batches.

    :meth:`train_from_unroll` first applies the data transformers to the raw
    ``[h + T + 1, B]`` trajectory (which updates their statistics afterwards, so the
    batch is transformed exactly as the policy saw it), then calls
    :meth:`preprocess_experience` on the ``[T+1, B]`` result (without autograd), which
    must return a ``[T, B]`` one (the last row only bootstraps). Steps whose action the
    environment ignored (LAST steps: the next step is a reset) get no loss, so losses are
    plain means over real transitions.

    Feed-forward algorithms (empty ``train_state_spec``): for each epoch, the steps are
    split into ``ceil(steps / mini_batch_size)`` shuffled mini-batches of nearly equal
    size (every step is used), and each gets ``train_step`` + ``calc_loss`` +
    ``update_with_gradient``.

    Recurrent algorithms: the trajectory is cut into sequences of ``mini_batch_length``
    steps per environment; each mini-batch holds ``mini_batch_size // mini_batch_length``
    shuffled sequences, and :meth:`~RLAlgorithm.train_sequence` runs along them (one
    fused call per network where the algorithm implements it, e.g. LSTM actor-critic),
    starting from the rollout state stored with each sequence's first step
    (``use_rollout_state``) or from zeros, and resetting to zeros at FIRST steps.

    Args:
        num_epochs: passes over each trajectory (an int >= 1).
        mini_batch_size: steps per gradient update: an int >= 1, or None for one update
            on the whole trajectory (0 is refused, as in every algorithm: off-policy ones
            take an int >= 1 only, since there is no whole batch to sample).
        mini_batch_length: recurrent algorithms only: steps per training sequence (an
            int >= 1, or None: the whole unroll); must divide the unroll length.
        use_rollout_state: recurrent algorithms only: start each training sequence from
            the state the policy had there during collection (otherwise from zeros).
        fused_sequences: recurrent algorithms only: run the training sequences through
            :meth:`~RLAlgorithm.train_sequence` (whole sequences at once where the
            algorithm implements it); False steps ``train_step`` along them one row at a
            time (:meth:`~RLAlgorithm.step_through_sequence`: the same result, slower;
            kept as the reference for tests and benchmarks).
        **kwargs: passed to :class:`RLAlgorithm`.
    """

    def __init__(
        self,
        *,
        num_epochs: int = 1,
        mini_batch_size: int | None = None,
        mini_batch_length: int | None = None,
        use_rollout_state: bool = True,
        fused_sequences: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        owner = type(self).__name__
        if not _is_int(num_epochs) or num_epochs < 1:
            raise invalid_value(f"{owner}.num_epochs", num_epochs, "an int >= 1")
        if mini_batch_size is not None and (not _is_int(mini_batch_size) or mini_batch_size < 1):
            raise invalid_value(
                f"{owner}.mini_batch_size",
                mini_batch_size,
                "an int >= 1, or None for the whole trajectory",
            )
        if mini_batch_length is not None and (
            not _is_int(mini_batch_length) or mini_batch_length < 1
        ):
            raise invalid_value(
                f"{owner}.mini_batch_length",
                mini_batch_length,
                "an int >= 1, or None for the whole unroll",
            )
        self.num_epochs = num_epochs
        self.mini_batch_size = mini_batch_size
        self.mini_batch_length = mini_batch_length
        self.use_rollout_state = use_rollout_state
        self.fused_sequences = fused_sequences
        self._epochs_run = 0

    def share_mini_batch(self, num_ranks: int) -> None:
        """Makes :attr:`mini_batch_size` this rank's share of a data-parallel run's total.

        In a data-parallel run ``mini_batch_size`` counts the steps (or sequences) of an
        update over all ranks; the trainer calls this once, before training, so that
        each rank's mini-batches hold ``mini_batch_size / num_ranks`` (None, one update
        on the whole trajectory, stays None).

        Args:
            num_ranks: the ranks of the run (an int >= 1).

        Raises:
            ValueError: ``mini_batch_size`` is not divisible by ``num_ranks``.
        """
        size = self.mini_batch_size
        if size is None:
            return
        if size % num_ranks:
            what = f"{type(self).__name__}.mini_batch_size"
            raise ValueError(
                f"{what}={size} is the total over all ranks and must be divisible by the "
                f"{num_ranks} ranks (each rank takes {what} / {num_ranks})"
            )
        self.mini_batch_size = size // num_ranks

    @property
    def epochs_run(self) -> int:
        """The epochs the last :meth:`train_from_unroll` started: ``num_epochs``, fewer
        if :meth:`stop_epochs` stopped it, 0 if it had no step to train on."""
        return self._epochs_run

    def update_statistics(self, info: Any) -> dict[str, torch.Tensor]:
        """Hook: statistics of one update's mini-batch besides ``calc_loss``'s, from
        ``train_step``'s ``info`` (e.g. PPO's ``approx_kl``). They join the update's
        ``LossInfo.extra`` (so :meth:`stop_epochs` sees them) and are averaged over the
        iteration's updates like the losses. They must not need gradients or random
        numbers; compute those only summaries use on :attr:`record_statistics`
        iterations. Default: none."""
        return {}

    def trajectory_statistics(self, exp: Experience, valid: torch.Tensor) -> dict[str, Any]:
        """Hook: statistics of the preprocessed ``[T, B]`` trajectory, over its steps where
        the ``[T, B]`` bool ``valid`` is set (e.g. PPO's ``explained_variance``); called
        without autograd, on :attr:`record_statistics` iterations only, before any update
        on the trajectory. Default: none."""
        return {}

    def stop_epochs(self, loss_info: LossInfo) -> bool:
        """Hook: whether to skip the rest of this iteration's mini-batches and epochs,
        given the update just applied (e.g. PPO's ``target_kl``). Default: never."""
        return False

    @property
    def is_recurrent(self) -> bool:
        """Whether ``train_step`` carries a state from step to step."""
        return bool(nest.flatten(self.train_state_spec))

    def train_from_unroll(self, exp: Experience) -> dict[str, float]:
        """Trains on a ``[h + T + 1, B]`` trajectory (copied to :attr:`device`)."""
        exp = to_device(exp, self.device)
        exp = self.data_transformer.transform_experience(exp, update="rollout")
        valid = valid_mask(exp.step_type)
        self._epochs_run = 0
        with torch.no_grad():
            exp = self.preprocess_experience(exp)
        any_valid = bool(valid.any())
        trajectory_stats: dict[str, Any] = {}
        if any_valid and self.record_statistics:
            with torch.no_grad():
                trajectory_stats = self.trajectory_statistics(exp, valid.bool())
        if not any_valid and not self.is_data_parallel:
            # E.g. unroll_length 1 and every environment just ended. (A rank of a
            # data-parallel run still takes part in every update, see _train_steps.)
            self.after_train_iter()
            return summarize_updates([], 0)
        stats, num_skipped = self.train_updates(exp, valid.bool())
        self.after_train_iter()
        return {**summarize_updates(stats, num_skipped), **trajectory_stats}

    def train_updates(
        self, exp: Experience, valid: torch.Tensor
    ) -> tuple[list[dict[str, Any]], int]:
        """The updates of one iteration on the preprocessed trajectory ``exp`` (``valid``:
        its ``[T, B]`` bool mask of real steps): mini-batches of steps, or of sequences
        for recurrent networks. Returns each applied update's statistics and the number
        of updates skipped (see :func:`summarize_updates`)."""
        if self.is_recurrent:
            return self._train_sequences(exp, valid)
        return self._train_steps(exp, valid.reshape(-1))

    def _epochs(
        self, num_items: int, items_per_batch: int, num_planned: int | None = None
    ) -> Iterator[torch.Tensor | None]:
        """Per epoch, ``ceil(num_planned / items_per_batch)`` shuffled index batches of
        the ``num_items`` items, of nearly equal size (None: one batch of everything, in
        order). ``num_planned`` defaults to ``num_items``; a data-parallel run plans by a
        count that is the same on every rank, so that all ranks make as many updates."""
        num_planned = num_items if num_planned is None else num_planned
        num_batches = -(-num_planned // max(1, min(items_per_batch, num_planned)))
        for _ in range(self.num_epochs):
            self._epochs_run += 1
            if num_batches == 1:
                yield None
            else:
                yield from torch.randperm(num_items).tensor_split(num_batches)

    @staticmethod
    def _record(update: tuple[Any, dict[str, Any]], stats: list[dict[str, Any]]) -> None:
        loss_info, result = update
        stats.append({"loss": loss_info.loss.detach(), **loss_info.extra, **result})

    def _train_steps(
        self, exp: Experience, valid: torch.Tensor
    ) -> tuple[list[dict[str, Any]], int]:
        flat = nest.map_structure(lambda x: x.reshape(-1, *x.shape[2:])[valid], exp)
        num_steps = int(valid.sum())
        # Ranks drop different numbers of LAST steps: they plan by all rows instead.
        planned = valid.numel() if self.is_data_parallel else num_steps
        stats: list[dict[str, Any]] = []
        num_skipped = 0
        for index in self._epochs(num_steps, self.mini_batch_size or planned, planned):
            mini = flat
            if index is not None:
                mini = nest.map_structure(lambda x, i=index: x[i], flat)
            if mini.step_type.shape[0] == 0:
                num_skipped += self._update_with_zero_loss()
                continue
            update = self.update_on(mini)
            self._record(update, stats)
            if self.stop_epochs(update[0]):
                break
        return stats, num_skipped

    def _update_with_zero_loss(self) -> int:
        """Takes part in an update without data. A rank of a data-parallel run whose
        mini-batch has no valid step must still join the update (the other ranks wait
        in its gradient all-reduce): a loss of zero times every optimized parameter adds
        a zero gradient. Returns 1 if the update was skipped."""

        def zero_loss() -> LossInfo:
            return LossInfo(loss=sum((p * 0.0).sum() for p in self.optimized_parameters))

        update = self.update_with_gradient(self.compute_loss(zero_loss))
        if was_skipped(update):
            return 1
        self.after_update()
        return 0

    def _train_sequences(
        self, exp: Experience, valid: torch.Tensor
    ) -> tuple[list[dict[str, Any]], int]:
        length, batch = valid.shape
        seq_len = self.mini_batch_length or length
        if length % seq_len:
            raise ValueError(f"mini_batch_length={seq_len} must divide the unroll length {length}")

        def to_sequences(x: torch.Tensor) -> torch.Tensor:
            # [T, B, ...] -> [L, (T / L) * B, ...]: column j * B + b is env b's j-th piece.
            x = x.reshape(length // seq_len, seq_len, batch, *x.shape[2:]).transpose(0, 1)
            return x.reshape(seq_len, -1, *x.shape[3:])

        per_batch = max(1, (self.mini_batch_size or length * batch) // seq_len)
        return self.train_on_columns(
            nest.map_structure(to_sequences, exp),
            to_sequences(valid),
            per_batch,
            self._sequence_loss,
        )

    def train_on_columns(
        self,
        columns: Experience,
        valid: torch.Tensor,
        per_batch: int,
        loss_fn: Callable[[Experience, torch.Tensor], LossInfo],
    ) -> tuple[list[dict[str, Any]], int]:
        """Updates on mini-batches of whole columns of ``columns`` (``[L, N]`` nests),
        ``per_batch`` columns each, for :attr:`num_epochs` epochs: each update's loss is
        ``loss_fn(mini_batch, mask)`` with ``mask`` the mini-batch's columns of ``valid``
        (``[L', N]`` bool; ``L'`` may be shorter than ``L``, e.g. without a bootstrap
        row). Returns each applied update's statistics and the number skipped."""
        stats: list[dict[str, Any]] = []
        num_skipped = 0
        for index in self._epochs(valid.shape[1], per_batch):
            mini, mask = columns, valid
            if index is not None:
                mini = nest.map_structure(lambda x, i=index: x[:, i], columns)
                mask = valid[:, index]
            if self.is_data_parallel and not mask.any():
                num_skipped += self._update_with_zero_loss()
                continue
            loss_info = self.compute_loss(loss_fn, mini, mask)
            update = self.update_with_gradient(loss_info)
            self.after_applied_update(update)
            self._record((loss_info, update), stats)
            if self.stop_epochs(loss_info):
                break
        return stats, num_skipped

    def run_sequences(self, exp: Experience, state: Any) -> AlgStep:
        """:meth:`~RLAlgorithm.train_sequence` on ``[L, b]`` sequences, or
        :meth:`~RLAlgorithm.step_through_sequence` without ``fused_sequences``."""
        if self.fused_sequences:
            return self.train_sequence(exp, state)
        return self.step_through_sequence(exp, state)

    def _sequence_loss(self, exp: Experience, valid: torch.Tensor) -> LossInfo:
        if self.use_rollout_state:
            state = nest.map_structure(lambda x: x[0], exp.state)
        else:
            state = self.zero_state(self.train_state_spec, valid.shape[1])
        info = self.run_sequences(exp, state).info
        flat_valid = valid.reshape(-1)
        info = nest.map_structure(lambda x: x.reshape(-1, *x.shape[2:])[flat_valid], info)
        return self.loss_with_statistics(info)

    def _batch_loss(self, exp: Experience) -> LossInfo:
        return self.loss_with_statistics(self.train_step(exp, (), exp.rollout_info).info)

    def loss_with_statistics(self, info: Any) -> LossInfo:
        """``calc_loss(info)`` with :meth:`update_statistics` added to its ``extra``: what
        every update of :meth:`train_from_unroll` computes (through ``compute_loss``)."""
        loss_info = self.calc_loss(info)
        statistics = self.update_statistics(info)
        if not statistics:
            return loss_info
        # A new LossInfo rather than ``_replace``: torch.compile (2.11) cannot rebuild a
        # NamedTuple that ``_replace`` made inside the compiled loss.
        return LossInfo(
            loss=loss_info.loss,
            extra={**loss_info.extra, **statistics},
            priority=loss_info.priority,
        )


def summarize_updates(stats: list[dict[str, Any]], num_skipped: int) -> dict[str, Any]:
    """Means of per-update statistics over the updates applied, plus ``skipped`` (the
    fraction of updates skipped for a non-finite loss; 1.0 means the iteration learned
    nothing).

    ``stats`` holds one dict per update, with its ``"skipped"`` (0 or 1, from
    :meth:`~alf.algorithms.algorithm.Algorithm.update_with_gradient`); ``num_skipped``
    counts updates skipped without an entry. The means stay 0-d tensors, computed without
    waiting for the device (converting each to a Python float costs a few microseconds,
    which adds up when an off-policy run summarizes every 1000th of thousands of
    one-update iterations); the trainer converts the ones it writes.
    """
    total = len(stats) + num_skipped
    if not stats:
        return {"skipped": num_skipped / max(total, 1)}
    if len(stats) == 1 and not num_skipped:
        return dict(stats[0])  # the common off-policy case: no work at all
    skipped = torch.stack([torch.as_tensor(s["skipped"], dtype=torch.float32) for s in stats])
    applied = skipped == 0
    num_applied = applied.sum()  # 0: every mean is NaN (nothing was learned)
    result: dict[str, Any] = {"skipped": (skipped.sum() + num_skipped) / total}
    for name in stats[0]:
        if name == "skipped":
            continue
        values = torch.stack([torch.as_tensor(s[name], dtype=torch.float32) for s in stats])
        # A skipped update's loss may be NaN: where() keeps it out of the sum.
        result[name] = torch.where(applied, values, 0.0).sum() / num_applied
    return result
