"""``OnPolicyAlgorithm``: trains on each fresh trajectory for some epochs, then drops it."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from alf import nest
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_structures import Experience

__all__ = ["OnPolicyAlgorithm"]


class OnPolicyAlgorithm(RLAlgorithm):
    """Trains on every unrolled trajectory: ``num_epochs`` passes of shuffled mini-batches.

    :meth:`train_from_unroll` calls :meth:`preprocess_experience` on the ``[T+1, B]``
    trajectory, which must return a ``[T, B]`` one (the last row only bootstraps), then
    for each epoch splits its ``T * B`` steps into shuffled mini-batches of
    ``mini_batch_size`` steps and runs ``train_step`` + ``calc_loss`` +
    ``update_with_gradient`` on each. Stateless (feed-forward) algorithms only.

    Args:
        num_epochs: passes over each trajectory.
        mini_batch_size: steps per gradient update (None: the whole trajectory).
        **kwargs: passed to :class:`RLAlgorithm`.
    """

    def __init__(self, *, num_epochs: int = 1, mini_batch_size: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1, got {num_epochs}")
        self.num_epochs = num_epochs
        self.mini_batch_size = mini_batch_size

    def train_from_unroll(self, exp: Experience) -> dict[str, float]:
        exp = self.preprocess_experience(exp)
        flat = nest.map_structure(lambda x: x.reshape(-1, *x.shape[2:]), exp)
        num_steps = flat.step_type.shape[0]
        batch = min(self.mini_batch_size or num_steps, num_steps)
        totals: dict[str, float] = defaultdict(float)
        num_updates = 0
        for _ in range(self.num_epochs):
            order = torch.randperm(num_steps)
            for start in range(0, num_steps - batch + 1, batch):
                index = order[start : start + batch]
                mini = nest.map_structure(lambda x, i=index: x[i], flat)
                step = self.train_step(mini, (), mini.rollout_info)
                loss_info = self.calc_loss(step.info)
                stats = self.update_with_gradient(loss_info)
                self.after_update()
                totals["loss"] += float(loss_info.loss.detach())
                for name, value in loss_info.extra.items():
                    totals[name] += float(value)
                for name, value in stats.items():
                    totals[name] += value
                num_updates += 1
        self.after_train_iter()
        return {name: value / num_updates for name, value in totals.items()}
