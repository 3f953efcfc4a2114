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


_Slot = tuple[dict[str, torch.Tensor | None], str]
"""A tensor's place: its owner module's ``_parameters`` or ``_buffers`` dict and its key."""


def _float_slots(module: nn.Module) -> list[_Slot]:
    """The places of ``module``'s floating-point parameters, then buffers (in the order of
    ``parameters()`` and ``buffers()``).

    Places rather than tensors: ``module.to(device)`` (and ``.float()``...) puts *new*
    buffer tensors in the owners' ``_buffers`` (and new parameters where torch is set to
    overwrite them), so tensors captured before the move would be stale host copies.
    """
    slots: list[_Slot] = []
    for attr, named in (
        ("_parameters", module.named_parameters()),
        ("_buffers", module.named_buffers()),
    ):
        for name, tensor in named:
            if tensor.is_floating_point():
                owner, _, key = name.rpartition(".")
                slots.append((getattr(module.get_submodule(owner), attr), key))
    return slots


def _tensors(slots: list[_Slot]) -> list[torch.Tensor]:
    return [store[key] for store, key in slots]


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
        # Looked up at every update, so the updater follows the modules to a device.
        self._source = [slot for m in sources for slot in _float_slots(m)]
        self._target = [slot for m in targets for slot in _float_slots(m)]
        source, target = _tensors(self._source), _tensors(self._target)
        if len(source) != len(target) or any(
            s.shape != t.shape for s, t in zip(source, target, strict=True)
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
        source, target = _tensors(self._source), _tensors(self._target)
        if self.tau == 1.0:
            torch._foreach_copy_(target, source)
        else:
            torch._foreach_lerp_(target, source, self.tau)
        return True
