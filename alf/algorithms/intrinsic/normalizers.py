"""Running statistics for intrinsic rewards: observations and intrinsic returns.

:class:`RunningMeanStd` keeps the mean and variance of every element of a stream of
batches (Chan et al.'s parallel update, in float64 so that long runs do not drift);
:class:`ReturnNormalizer` divides a ``[T, B]`` block of intrinsic rewards by the running
standard deviation of their discounted sums (Burda et al., 2018: the "reward forward
filter"), so that the bonus keeps one scale whatever its raw size.

Both are ``nn.Module`` s whose statistics are persistent buffers: they are part of the
owning algorithm's ``state_dict`` and so of every checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

__all__ = ["ReturnNormalizer", "RunningMeanStd"]


class RunningMeanStd(nn.Module):
    """The running mean and variance of ``[N, *shape]`` batches, element by element.

    Args:
        shape: the shape of one element (``()`` for scalars).
        epsilon: the weight of the initial statistics (mean 0, variance 1), so that the
            first batch does not divide by a variance of zero.
    """

    def __init__(self, *, shape: Sequence[int] = (), epsilon: float = 1e-4) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(tuple(shape), dtype=torch.float64))
        self.register_buffer("var", torch.ones(tuple(shape), dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        """Adds the ``[N, *shape]`` ``batch`` (N >= 1) to the statistics."""
        x = batch.detach().to(torch.float64).reshape(-1, *self.mean.shape)
        n = x.shape[0]
        if n == 0:
            return
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        delta = batch_mean - self.mean
        total = self.count + n
        self.mean += delta * (n / total)
        m2 = self.var * self.count + batch_var * n + delta.square() * (self.count * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    @property
    def std(self) -> torch.Tensor:
        """The running standard deviation (float64, at least ``1e-8``)."""
        return self.var.clamp(min=1e-16).sqrt()

    def normalize(self, x: torch.Tensor, clip: float) -> torch.Tensor:
        """``(x - mean) / std`` clipped to ``[-clip, clip]``, as float32."""
        mean = self.mean.to(torch.float32)
        std = self.std.to(torch.float32)
        return ((x.to(torch.float32) - mean) / std).clamp(-clip, clip)


class ReturnNormalizer(nn.Module):
    """Divides intrinsic rewards by the running standard deviation of their discounted
    sums (Burda et al.'s reward forward filter).

    For each batch column ``b`` it carries ``R_b = gamma * R_b + r_t`` along the rows of
    every ``[T, B]`` block it is given (and on to the next block: intrinsic returns are
    not episodic), adds those sums to a :class:`RunningMeanStd`, and returns
    ``r / std(R)``. The carried sums are per column and not checkpointed (their shape is
    the batch's; a block of a different width starts them again from 0). In an
    asynchronous run a column is a fragment's environment, which changes from block to
    block: the sums are then approximate, the statistics still of the right scale.

    Args:
        gamma: the intrinsic discount.
    """

    def __init__(self, *, gamma: float) -> None:
        super().__init__()
        self.gamma = gamma
        self.returns = RunningMeanStd()
        self.register_buffer("_carried", torch.zeros(0), persistent=False)

    @torch.no_grad()
    def forward(self, rewards: torch.Tensor) -> torch.Tensor:
        """The ``[T, B]`` ``rewards`` divided by the updated running std of the returns."""
        width = rewards.shape[1]
        carried = self._carried
        if carried.shape != (width,) or carried.device != rewards.device:
            carried = torch.zeros(width, device=rewards.device, dtype=rewards.dtype)
        sums = torch.empty_like(rewards)
        for t in range(rewards.shape[0]):
            carried = self.gamma * carried + rewards[t]
            sums[t] = carried
        self._carried = carried
        self.returns.update(sums.reshape(-1))
        return rewards / self.returns.std.to(rewards.dtype)
