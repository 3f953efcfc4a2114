"""Running moments of a stream of batches, the statistics the normalisers keep."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn as nn


class RunningMeanStd(nn.Module):
    """Running mean and variance of a tensor's elements over batches (float64 buffers).

    Args:
        shape: shape of one element.
    """

    def __init__(self, *, shape: Sequence[int]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(tuple(shape), dtype=torch.float64))
        self.register_buffer("var", torch.ones(tuple(shape), dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.sum_over_ranks: Callable[[torch.Tensor], torch.Tensor] | None = None
        """Set in data-parallel runs: sums a float64 tensor over the ranks, so that every
        rank adds the moments of all ranks' batches (and the statistics stay identical)."""

    def update(self, x: torch.Tensor) -> None:
        """Adds the elements of ``x`` (``[N, *shape]``) to the statistics (in a
        data-parallel run, those of every rank's ``x``: a collective)."""
        x = x.detach().reshape(-1, *self.mean.shape).to(torch.float64)
        n = x.shape[0]
        if self.sum_over_ranks is not None:
            n, batch_mean, batch_var = self._moments_over_ranks(x)
        elif n:
            batch_mean = x.mean(0)
            batch_var = x.var(0, unbiased=False)
        if n == 0:
            return
        total = self.count + n
        delta = batch_mean - self.mean
        # Chan et al.'s parallel combination of two sets' moments.
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def _moments_over_ranks(self, x: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
        # Sums (count, sum, sum of squares) travel, and are turned back into moments.
        size = self.mean.numel()
        local = torch.cat(
            [
                torch.tensor([float(x.shape[0])], dtype=torch.float64),
                x.sum(0).reshape(-1).cpu(),
                (x * x).sum(0).reshape(-1).cpu(),
            ]
        )
        total = self.sum_over_ranks(local).to(self.mean.device)
        n = float(total[0])
        if n == 0:
            return 0, self.mean, self.var
        mean = (total[1 : 1 + size] / n).reshape(self.mean.shape)
        var = (total[1 + size :] / n).reshape(self.mean.shape) - mean**2
        return n, mean, var.clamp(min=0.0)

    def normalize(self, x: torch.Tensor, *, center: bool, clip: float | None) -> torch.Tensor:
        """``(x - mean) / std`` (or ``x / std`` without ``center``), clipped, float32."""
        std = torch.sqrt(self.var + 1e-8).to(torch.float32)
        y = x.to(torch.float32)
        if center:
            y = y - self.mean.to(torch.float32)
        y = y / std
        return y.clamp(-clip, clip) if clip is not None else y
