"""``Algorithm``: a module that owns its optimizer and updates itself from a loss."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import gin
import torch
import torch.nn as nn

from alf.data_structures import LossInfo
from alf.utils.schedules import Schedule, as_schedule

__all__ = ["Algorithm", "OptimizerCtor", "default_optimizer"]

OptimizerCtor = Callable[..., torch.optim.Optimizer]


for _name in ("Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"):
    # Lets configs name them: ``MyAlg.optimizer_ctor = @torch.optim.AdamW``.
    gin.external_configurable(getattr(torch.optim, _name), module="torch.optim")


def default_optimizer(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """Adam with ``eps=1e-5`` (the usual choice in RL: it learns CartPole with PPO in
    clearly fewer steps than 1e-8), fused into one kernel where this torch supports it
    (much faster for small networks on CPU)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=1e-5, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr, eps=1e-5)


class Algorithm(nn.Module):
    """Base of every algorithm: parameters, one optimizer, gradient updates.

    The learning rate may follow a :class:`Schedule` of training progress, set by the
    trainer through :meth:`set_progress`. A non-finite loss or gradient skips the update
    and is counted in :attr:`num_skipped_updates`.

    Args:
        optimizer_ctor: called as ``optimizer_ctor(params, lr=...)``; by default
            :func:`default_optimizer` (fused Adam, ``eps=1e-5``).
            In gin: ``MyAlg.optimizer_ctor = @torch.optim.AdamW``.
        learning_rate: a number or a :class:`Schedule`.
        max_grad_norm: clip the global gradient norm to this value (None: no clipping).
    """

    def __init__(
        self,
        *,
        optimizer_ctor: OptimizerCtor | None = None,
        learning_rate: float | Schedule = 3e-4,
        max_grad_norm: float | None = None,
    ) -> None:
        super().__init__()
        self._optimizer_ctor = optimizer_ctor or default_optimizer
        self._lr_schedule = as_schedule(learning_rate)
        self._max_grad_norm = max_grad_norm
        self._optimizer: torch.optim.Optimizer | None = None
        self._optimized: list[torch.Tensor] = []  # the optimizer's parameters, flattened
        self.num_skipped_updates = 0

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer over :meth:`trainable_parameters`, created on first use."""
        if self._optimizer is None:
            params = [p for p in self.trainable_parameters() if p.requires_grad]
            self._optimizer = self._optimizer_ctor(params, lr=self._lr_schedule(0.0))
            groups = self._optimizer.param_groups
            self._optimized = [p for group in groups for p in group["params"]]
        return self._optimizer

    def trainable_parameters(self) -> Iterable[nn.Parameter]:
        """The parameters the optimizer updates (all of them by default)."""
        return self.parameters()

    @property
    def learning_rate(self) -> float:
        """The current learning rate."""
        return self.optimizer.param_groups[0]["lr"]

    def set_progress(self, progress: float) -> None:
        """Tells the algorithm how far training is (``0..1``); updates scheduled values."""
        lr = self._lr_schedule(progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def update_with_gradient(self, loss_info: LossInfo) -> dict[str, Any]:
        """One optimizer step on ``loss_info.loss``.

        Returns:
            ``{"grad_norm": <scalar tensor>}``, or ``{"skipped": 1.0}`` when the loss or
            the gradient was not finite (the parameters are then left unchanged).
        """
        optimizer = self.optimizer
        loss = loss_info.loss
        if not torch.isfinite(loss):
            self.num_skipped_updates += 1
            return {"skipped": 1.0}
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad for p in self._optimized if p.grad is not None]
        # One norm over the concatenated gradient: much cheaper than per-tensor norms
        # for the many small tensors of RL networks.
        if not grads:
            raise RuntimeError("The loss does not depend on any optimized parameter")
        grad_norm = torch.cat([g.reshape(-1) for g in grads]).norm()
        if not torch.isfinite(grad_norm):
            optimizer.zero_grad(set_to_none=True)
            self.num_skipped_updates += 1
            return {"skipped": 1.0}
        if self._max_grad_norm is not None and grad_norm > self._max_grad_norm:
            torch._foreach_mul_(grads, self._max_grad_norm / (float(grad_norm) + 1e-6))
        optimizer.step()
        return {"grad_norm": grad_norm.detach()}

    def checkpoint_state(self) -> dict[str, Any]:
        """Everything needed to resume: parameters, buffers and optimizer state."""
        return {"module": self.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`checkpoint_state`; raises ``RuntimeError`` naming mismatched keys."""
        self.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
