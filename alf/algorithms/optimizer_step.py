"""One gradient step without host synchronisation: clipping by a tensor coefficient,
the non-finite skip decided on the device, and fused Adam called through its kernel.

:class:`Algorithm.update_with_gradient <alf.algorithms.algorithm.Algorithm>` uses
:class:`LeanStep` when its optimizer is a fused ``torch.optim.Adam`` or ``AdamW`` (ALF's
default optimizer is one, with a parameter group per learning rate). Every other
optimizer keeps torch's own ``step()``, still with the device-side skip when it
understands ``found_inf`` (torch's fused optimizers), or the host check otherwise.
"""

from __future__ import annotations

import torch

__all__ = ["LeanStep", "clip_coefficient", "non_finite"]


def non_finite(loss: torch.Tensor, grad_norm: torch.Tensor) -> torch.Tensor:
    """``1.0`` (float, on the device) if the loss or the gradient norm is not finite,
    else ``0.0``; no host synchronisation."""
    return (~torch.isfinite(grad_norm.float() + loss.detach().float())).float()


def clip_coefficient(grad_norm: torch.Tensor, max_norm: float) -> torch.Tensor:
    """The factor that scales a gradient of norm ``grad_norm`` to at most ``max_norm``
    (1 when it is already within), as a float32 tensor. Computed in float64, as the
    host-side ``max_norm / (float(grad_norm) + 1e-6)`` was, so that runs stay
    bit-identical to those before the device-side clipping."""
    return (max_norm / (grad_norm.double() + 1e-6)).clamp(max=1.0).float()


class LeanStep:
    """Steps a fused Adam or AdamW directly through ``torch._fused_adam_``
    (``_fused_adamw_``), one kernel call per parameter group, with lists of its state
    built once, so that a step costs two ``foreach`` calls and the kernels instead of
    ``Optimizer.step``'s per-step grouping, hooks and profiling. The state lives in
    ``optimizer.state`` as torch keeps it, so checkpoints and ``optimizer.step()`` stay
    interchangeable with this.

    Args:
        optimizer: checked with :meth:`supports`.
    """

    def __init__(self, *, optimizer: torch.optim.Optimizer) -> None:
        if not self.supports(optimizer):
            raise ValueError(f"LeanStep cannot step {type(optimizer).__name__}")
        self._optimizer = optimizer
        self._groups: list[list[torch.Tensor]] = [
            list(group["params"]) for group in optimizer.param_groups
        ]
        self._params: list[torch.Tensor] = [p for params in self._groups for p in params]
        group = optimizer.param_groups[0]
        self._kernel = (
            torch._fused_adamw_
            if isinstance(optimizer, torch.optim.AdamW) or group.get("decoupled_weight_decay")
            else torch._fused_adam_
        )
        self._state_lists: list[tuple[list[torch.Tensor], ...]] | None = None

    @staticmethod
    def supports(optimizer: torch.optim.Optimizer) -> bool:
        """Whether ``optimizer`` is an Adam or AdamW this can step: ``fused=True``, no
        empty parameter group, and no AMSGrad, ``maximize``, ``capturable``,
        ``differentiable`` or tensor learning rate in any group."""
        if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW):
            return False
        if not hasattr(torch, "_fused_adam_"):
            return False
        return all(
            bool(group.get("fused"))
            and bool(group["params"])
            and not group.get("amsgrad")
            and not group.get("maximize")
            and not group.get("capturable")
            and not group.get("differentiable")
            and not isinstance(group.get("lr"), torch.Tensor)
            for group in optimizer.param_groups
        )

    def _states(self) -> list[tuple[list[torch.Tensor], ...]] | None:
        """Per group ``(exp_avgs, exp_avg_sqs, steps)``, or None before the optimizer has
        state for every parameter. Rebuilt when the state tensors were replaced (a
        checkpoint load)."""
        state = self._optimizer.state
        cached = self._state_lists
        first = state.get(self._params[0])
        if cached is not None and first is not None and first.get("exp_avg") is cached[0][0][0]:
            return cached
        if any("exp_avg" not in state.get(p, {}) for p in self._params):
            return None
        self._state_lists = [
            (
                [state[p]["exp_avg"] for p in params],
                [state[p]["exp_avg_sq"] for p in params],
                [state[p]["step"] for p in params],
            )
            for params in self._groups
        ]
        return self._state_lists

    def step(self, found_inf: torch.Tensor) -> None:
        """One step on the parameters' ``.grad``, or no change at all (parameters, moments
        and step counts) where ``found_inf`` is 1."""
        grads = [p.grad for p in self._params]
        states = self._states()
        if states is None or any(g is None for g in grads):
            # The first step creates the state; a parameter without a gradient is left
            # out by torch's own step (as torch does).
            self._optimizer.found_inf = found_inf  # type: ignore[attr-defined]
            try:
                self._optimizer.step()
            finally:
                del self._optimizer.found_inf  # type: ignore[attr-defined]
            return
        # Read every step: a schedule sets the learning rates, and a checkpoint load
        # replaces the groups.
        for params, group, (exp_avgs, exp_avg_sqs, steps) in zip(
            self._groups, self._optimizer.param_groups, states, strict=True
        ):
            beta1, beta2 = group["betas"]
            torch._foreach_add_(steps, 1)
            self._kernel(
                params,
                [p.grad for p in params],
                exp_avgs,
                exp_avg_sqs,
                [],
                steps,
                amsgrad=False,
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=False,
                grad_scale=None,
                found_inf=found_inf,
            )
            torch._foreach_sub_(steps, [found_inf] * len(steps))
