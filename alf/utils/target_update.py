"""Target networks: frozen copies of networks that follow them slowly or periodically."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

__all__ = ["TargetUpdater", "make_target"]


def make_target(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose parameters take no gradient (and so are left out of
    the optimizer)."""
    target = copy.deepcopy(module)
    for p in target.parameters():
        p.requires_grad_(False)
    return target


def _float_tensors(module: nn.Module) -> list[torch.Tensor]:
    return [t for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()]


class TargetUpdater:
    """Moves target parameters towards their sources every ``period`` calls:
    ``target <- (1 - tau) * target + tau * source`` (``tau=1`` copies: a periodic hard
    update; ``period=1`` with a small ``tau``: Polyak averaging).

    Args:
        sources: the trained networks.
        targets: their target copies, in the same order.
        tau: interpolation factor in ``(0, 1]``.
        period: calls between updates.
    """

    def __init__(
        self,
        *,
        sources: list[nn.Module],
        targets: list[nn.Module],
        tau: float = 0.005,
        period: int = 1,
    ) -> None:
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
        if period < 1:
            raise ValueError(f"period must be >= 1, got {period}")
        self._source = [t for m in sources for t in _float_tensors(m)]
        self._target = [t for m in targets for t in _float_tensors(m)]
        if len(self._source) != len(self._target) or any(
            s.shape != t.shape for s, t in zip(self._source, self._target, strict=True)
        ):
            raise ValueError("Target networks do not match their sources")
        self.tau = tau
        self.period = period
        self._calls = 0

    @torch.no_grad()
    def __call__(self) -> bool:
        """Counts a call and updates on every ``period``-th; returns whether it did."""
        self._calls += 1
        if self._calls % self.period:
            return False
        if self.tau == 1.0:
            torch._foreach_copy_(self._target, self._source)
        else:
            torch._foreach_lerp_(self._target, self._source, self.tau)
        return True
