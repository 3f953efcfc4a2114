"""``OnPolicyAlgorithm``: trains on each fresh trajectory for some epochs, then drops it."""

from __future__ import annotations

from typing import Any

import torch

from alf import nest
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_structures import Experience
from alf.utils.value_ops import valid_mask

__all__ = ["OnPolicyAlgorithm", "summarize_updates"]


class OnPolicyAlgorithm(RLAlgorithm):
    """Trains on every unrolled trajectory: ``num_epochs`` passes of shuffled mini-batches.

    :meth:`train_from_unroll` calls :meth:`preprocess_experience` on the ``[T+1, B]``
    trajectory (without autograd), which must return a ``[T, B]`` one (the last row only
    bootstraps). Steps
    whose action the environment ignored (LAST steps: the next step is a reset) are
    dropped, so losses are plain means. Then, for each epoch, the remaining steps are
    split into ``ceil(steps / mini_batch_size)`` shuffled mini-batches of nearly equal size
    (every step is used) and each gets ``train_step`` + ``calc_loss`` +
    ``update_with_gradient``. Stateless (feed-forward) algorithms only.

    Args:
        num_epochs: passes over each trajectory.
        mini_batch_size: steps per gradient update (None: the whole trajectory).
        **kwargs: passed to :class:`RLAlgorithm`.
    """

    def __init__(
        self, *, num_epochs: int = 1, mini_batch_size: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1, got {num_epochs}")
        self.num_epochs = num_epochs
        self.mini_batch_size = mini_batch_size

    def train_from_unroll(self, exp: Experience) -> dict[str, float]:
        valid = valid_mask(exp.step_type).reshape(-1).bool()
        with torch.no_grad():
            exp = self.preprocess_experience(exp)
        flat = nest.map_structure(lambda x: x.reshape(-1, *x.shape[2:])[valid], exp)
        num_steps = int(valid.sum())
        if num_steps == 0:  # e.g. unroll_length 1 and every environment just ended
            self.after_train_iter()
            return summarize_updates([], 0)
        # Every step is used each epoch: ceil(num_steps / mini_batch_size) mini-batches of
        # (nearly) equal size, so no short tail batch skews the updates.
        num_batches = -(-num_steps // min(self.mini_batch_size or num_steps, num_steps))
        stats: list[dict[str, torch.Tensor]] = []
        num_skipped = 0
        for _ in range(self.num_epochs):
            # With one mini-batch of everything, order does not matter: skip the shuffle.
            batches = (
                torch.randperm(num_steps).tensor_split(num_batches) if num_batches > 1 else [None]
            )
            for index in batches:
                mini = flat
                if index is not None:
                    mini = nest.map_structure(lambda x, i=index: x[i], flat)
                loss_info, update = self.update_on(mini)
                if "skipped" in update:
                    num_skipped += 1
                    continue
                stats.append({"loss": loss_info.loss.detach(), **loss_info.extra, **update})
        self.after_train_iter()
        return summarize_updates(stats, num_skipped)


def summarize_updates(stats: list[dict[str, Any]], num_skipped: int) -> dict[str, Any]:
    """Means of per-update statistics, plus ``skipped`` (the fraction of updates skipped
    for a non-finite loss; 1.0 means the iteration learned nothing).

    The means stay 0-d tensors (converting each to a Python float costs a few
    microseconds, which adds up when an off-policy run summarizes every 1000th of
    thousands of one-update iterations); the trainer converts the ones it writes.
    """
    total = len(stats) + num_skipped
    result: dict[str, Any] = {"skipped": num_skipped / max(total, 1)}
    if len(stats) == 1:
        result.update(stats[0])
    elif stats:
        for name in stats[0]:
            values = [torch.as_tensor(s[name], dtype=torch.float32) for s in stats]
            result[name] = torch.stack(values).mean()
    return result
