"""``Algorithm``: a module that owns its optimizer and updates itself from a loss."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import gin
import torch
import torch.nn as nn

from alf.algorithms.optimizer_step import LeanStep, clip_coefficient, non_finite
from alf.data_structures import LossInfo
from alf.nest import map_structure
from alf.utils.schedules import Schedule, as_schedule

if TYPE_CHECKING:
    from alf.utils.distributed import DataParallelLoss

__all__ = [
    "MIXED_PRECISION_DTYPES",
    "Algorithm",
    "OptimizerCtor",
    "compile_cache_dir",
    "default_optimizer",
    "was_skipped",
]

MIXED_PRECISION_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
"""Values of ``TrainerConfig.mixed_precision`` and the autocast dtype each one means."""

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


def _cuda_graph_safe(compiled: Callable[..., LossInfo]) -> Callable[..., LossInfo]:
    """``compiled`` (CUDA graphs) made safe to call once per minibatch: each call starts a
    new graph step and its tensors are copied out of the graph's memory, which the next
    replay overwrites (the statistics of every minibatch are kept until the update ends)."""

    def call(*args: Any) -> LossInfo:
        torch.compiler.cudagraph_mark_step_begin()
        return map_structure(
            lambda x: x.clone() if isinstance(x, torch.Tensor) else x, compiled(*args)
        )

    return call


def compile_cache_dir() -> str:
    """Where ``torch.compile`` keeps compiled code between runs: ``TORCHINDUCTOR_CACHE_DIR``
    if set, else ``~/.cache/alf/torch_compile`` (rather than torch's default under /tmp,
    which a reboot empties)."""
    default = os.path.join(os.path.expanduser("~"), ".cache", "alf", "torch_compile")
    return os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", default)


def was_skipped(update: dict[str, Any]) -> bool:
    """Whether the update :meth:`Algorithm.update_with_gradient` returned was skipped
    (waits for the device)."""
    return bool(update["skipped"])


class Algorithm(nn.Module):
    """Base of every algorithm: parameters, one optimizer, gradient updates.

    The learning rate may follow a :class:`Schedule` of training progress, set by the
    trainer through :meth:`set_progress`. A non-finite loss or gradient skips the update
    and is counted in :attr:`num_skipped_updates`.

    Every update computes its loss through :meth:`compute_loss`, which the trainer
    configures (:meth:`configure_training`) for mixed precision and for data-parallel
    training, where it runs inside DDP's forward so that the gradients are averaged over
    the ranks.

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
        self._group_schedules: list[Schedule] = [self._lr_schedule]
        self._optimized: list[torch.Tensor] = []  # the optimizer's parameters, flattened
        self._skipped_on_host = 0
        self._skipped_on_device: torch.Tensor | int = 0
        self._lean_step: LeanStep | None = None
        self._compile = False
        self._compiled_losses: dict[Any, Callable[..., LossInfo]] = {}
        self._data_parallel: DataParallelLoss | None = None
        self._autocast_dtype: torch.dtype | None = None
        self._grad_scaler: torch.amp.GradScaler | None = None
        self._restored_scaler_state: dict[str, Any] | None = None

    @property
    def device(self) -> torch.device:
        """The device of the parameters (CPU for an algorithm without any)."""
        for tensor in self.parameters():
            return tensor.device
        return torch.device("cpu")

    def configure_training(
        self,
        *,
        data_parallel: DataParallelLoss | None = None,
        mixed_precision: str | None = None,
        compile: bool = False,  # noqa: A002 - TrainerConfig.compile
    ) -> None:
        """Sets how :meth:`compute_loss` and :meth:`update_with_gradient` run.

        Args:
            data_parallel: averages gradients over the ranks of a distributed run (built
                over :attr:`optimized_parameters`); None: this process alone.
            mixed_precision: ``"bfloat16"`` or ``"float16"`` to compute losses under
                ``torch.autocast`` (float16 also scales the loss against underflow with a
                ``GradScaler``); None: float32.
            compile: compile every loss function given to :meth:`compute_loss` (and so
                its backward pass) with ``torch.compile``, on first use; with CUDA graphs
                (``mode="reduce-overhead"``) on a GPU. Compiled code is cached on disk
                (:func:`compile_cache_dir`), so a resumed or repeated run starts fast.
        """
        if compile and data_parallel is not None:
            raise ValueError("compiled updates are not supported in data-parallel runs yet")
        self._compile = compile
        self._compiled_losses: dict[Any, Callable[..., LossInfo]] = {}
        if mixed_precision is not None and mixed_precision not in MIXED_PRECISION_DTYPES:
            raise ValueError(
                f"mixed_precision must be one of {sorted(MIXED_PRECISION_DTYPES)} or None, "
                f"got '{mixed_precision}'"
            )
        self._data_parallel = data_parallel
        self._autocast_dtype = MIXED_PRECISION_DTYPES.get(mixed_precision)
        self._grad_scaler = None
        if mixed_precision == "float16":
            self._grad_scaler = torch.amp.GradScaler(self.device.type, init_scale=2.0**10)
            if self._restored_scaler_state is not None:
                self._grad_scaler.load_state_dict(self._restored_scaler_state)

    @property
    def is_data_parallel(self) -> bool:
        """Whether updates are averaged over the ranks of a data-parallel run (then every
        rank must make the same number of updates, in the same order)."""
        return self._data_parallel is not None

    @property
    def optimized_parameters(self) -> list[torch.Tensor]:
        """The parameters the optimizer updates (creating the optimizer if needed)."""
        self.optimizer  # noqa: B018 - fills self._optimized
        return list(self._optimized)

    def compute_loss(self, loss_fn: Callable[..., LossInfo], *args: Any) -> LossInfo:
        """``loss_fn(*args)`` for the next :meth:`update_with_gradient`: under autocast
        with mixed precision, and inside DDP's forward in a data-parallel run.

        Custom update paths must compute their loss through here, or a distributed run
        stops with an error (the ranks' gradients would not be averaged).
        """
        autocast = (
            torch.autocast(self.device.type, dtype=self._autocast_dtype)
            if self._autocast_dtype is not None
            else nullcontext()
        )
        if self._compile:
            loss_fn = self._compiled_loss(loss_fn)
        with autocast:
            if self._data_parallel is not None:
                return self._data_parallel(loss_fn, *args)
            return loss_fn(*args)

    def _compiled_loss(self, loss_fn: Callable[..., LossInfo]) -> Callable[..., LossInfo]:
        key = getattr(loss_fn, "__func__", loss_fn)  # one per method, not per bound object
        compiled = self._compiled_losses.get(key)
        if compiled is None:
            compile_cache_dir()
            if self.device.type == "cuda":
                compiled = _cuda_graph_safe(torch.compile(loss_fn, mode="reduce-overhead"))
            else:
                compiled = torch.compile(loss_fn)
            self._compiled_losses[key] = compiled
        return compiled

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer over :meth:`trainable_parameters`, created on first use."""
        if self._optimizer is None:
            params = [p for p in self.trainable_parameters() if p.requires_grad]
            groups, self._group_schedules = self._parameter_groups(params)
            self._optimizer = self._optimizer_ctor(groups, lr=self._lr_schedule(0.0))
            groups = self._optimizer.param_groups
            self._optimized = [p for group in groups for p in group["params"]]
        return self._optimizer

    def _parameter_groups(self, params: list[nn.Parameter]) -> tuple[list[Any], list[Schedule]]:
        """The optimizer's parameters (a plain list, or a group per learning rate of
        :meth:`learning_rate_groups` after the group of the others) and each group's
        schedule."""
        special = [
            ([p for p in group if p.requires_grad], as_schedule(lr))
            for group, lr in self.learning_rate_groups()
        ]
        special = [(group, schedule) for group, schedule in special if group]
        if not special:
            return params, [self._lr_schedule]
        taken = {id(p) for group, _ in special for p in group}
        rest = [p for p in params if id(p) not in taken]
        groups = [{"params": group, "lr": schedule(0.0)} for group, schedule in special]
        schedules = [schedule for _, schedule in special]
        if rest:
            groups.insert(0, {"params": rest, "lr": self._lr_schedule(0.0)})
            schedules.insert(0, self._lr_schedule)
        return groups, schedules

    def trainable_parameters(self) -> Iterable[nn.Parameter]:
        """The parameters the optimizer updates (all of them by default)."""
        return self.parameters()

    def learning_rate_groups(self) -> Sequence[tuple[Iterable[nn.Parameter], float | Schedule]]:
        """Parameters that follow a learning rate of their own (e.g. an actor's, as
        offline RL methods have it), as ``(parameters, learning rate or Schedule)`` pairs;
        the others follow ``learning_rate``. None by default (one learning rate)."""
        return ()

    @property
    def learning_rate(self) -> float:
        """The current learning rate (of the first parameter group: ``learning_rate``'s,
        unless :meth:`learning_rate_groups` takes every parameter)."""
        return self.optimizer.param_groups[0]["lr"]

    def set_progress(self, progress: float) -> None:
        """Tells the algorithm how far training is (``0..1``); updates scheduled values."""
        groups = self.optimizer.param_groups
        for group, schedule in zip(groups, self._group_schedules, strict=True):
            group["lr"] = schedule(progress)

    def update_with_gradient(self, loss_info: LossInfo) -> dict[str, torch.Tensor]:
        """One optimizer step on ``loss_info.loss``, or none when the loss or the gradient
        is not finite (the parameters and the optimizer state are then left unchanged, and
        the update is counted in :attr:`num_skipped_updates`).

        With a fused Adam or AdamW (the default) and neither data parallelism nor float16,
        the step waits for nothing on the host: the gradient is clipped by a tensor
        coefficient and the skip happens inside the optimizer's kernel
        (:class:`~alf.algorithms.optimizer_step.LeanStep`).

        Returns:
            ``{"grad_norm": <0-d tensor>, "skipped": <0-d float tensor, 1.0 if skipped>}``;
            read ``skipped`` with :func:`was_skipped` (it may still be on the device).
        """
        if self._data_parallel is None and self._grad_scaler is None:
            lean = self._lean_step
            if lean is None and LeanStep.supports(self.optimizer):
                lean = self._lean_step = LeanStep(optimizer=self.optimizer)
            if lean is not None:
                return self._lean_update(loss_info.loss, lean)
        return self._checked_update(loss_info.loss)

    def _clear_gradients(self) -> None:
        for p in self._optimized:
            p.grad = None

    def _gradients(self) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The optimized parameters' gradients and their global norm."""
        grads = [p.grad for p in self._optimized if p.grad is not None]
        if not grads:
            raise RuntimeError("The loss does not depend on any optimized parameter")
        # One norm over the concatenated gradient: much cheaper than per-tensor norms
        # for the many small tensors of RL networks.
        return grads, torch.cat([g.reshape(-1).float() for g in grads]).norm()

    def _lean_update(self, loss: torch.Tensor, lean: LeanStep) -> dict[str, torch.Tensor]:
        self._clear_gradients()  # (the optimizer, and so self._optimized, exists)
        loss.backward()
        grads, grad_norm = self._gradients()
        skipped = non_finite(loss, grad_norm)
        if self._max_grad_norm is not None:
            torch._foreach_mul_(grads, clip_coefficient(grad_norm, self._max_grad_norm))
        lean.step(skipped)
        self._skipped_on_device = self._skipped_on_device + skipped
        return {"grad_norm": grad_norm.detach(), "skipped": skipped}

    def _checked_update(self, loss: torch.Tensor) -> dict[str, torch.Tensor]:
        """The update with the finiteness checks on the host: any optimizer, float16 loss
        scaling, and data-parallel runs (whose all-reduce reports finiteness)."""
        optimizer = self.optimizer
        scaler = self._grad_scaler
        # In a data-parallel run every rank must take part in the backward pass (its
        # all-reduce), so a non-finite loss is only dropped after it.
        if self._data_parallel is None and not torch.isfinite(loss):
            return self._skip_update(unscaled=False)
        self._clear_gradients()
        scaled = scaler.scale(loss) if scaler is not None else loss
        all_finite = True
        if self._data_parallel is not None:
            all_finite = self._data_parallel.backward(scaled)
        else:
            scaled.backward()
        if scaler is not None:
            scaler.unscale_(optimizer)
        grads, grad_norm = self._gradients()
        if not all_finite or not torch.isfinite(grad_norm):
            # float16: an overflow of the scaled gradient; the scaler lowers its scale.
            return self._skip_update(unscaled=scaler is not None)
        if self._max_grad_norm is not None:
            torch._foreach_mul_(grads, clip_coefficient(grad_norm, self._max_grad_norm))
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        return {"grad_norm": grad_norm.detach(), "skipped": torch.zeros(())}

    def _skip_update(self, *, unscaled: bool) -> dict[str, torch.Tensor]:
        self._clear_gradients()
        if unscaled:
            # Without gradients the step changes nothing; it and update() let the scaler
            # lower its scale after an overflow.
            self._grad_scaler.step(self.optimizer)
            self._grad_scaler.update()
        self._skipped_on_host += 1
        return {"grad_norm": torch.full((), math.nan), "skipped": torch.ones(())}

    @property
    def num_skipped_updates(self) -> int:
        """Updates skipped so far for a non-finite loss or gradient (reading it waits for
        the device)."""
        return self._skipped_on_host + int(self._skipped_on_device)

    def checkpoint_state(self) -> dict[str, Any]:
        """Everything needed to resume: parameters, buffers, optimizer state (and the
        float16 loss scale)."""
        state = {"module": self.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self._grad_scaler is not None:
            state["grad_scaler"] = self._grad_scaler.state_dict()
        return state

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`checkpoint_state`; raises ``RuntimeError`` naming mismatched keys."""
        self.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        # Applied now or by configure_training(mixed_precision="float16").
        self._restored_scaler_state = state.get("grad_scaler")
        if self._grad_scaler is not None and self._restored_scaler_state is not None:
            self._grad_scaler.load_state_dict(self._restored_scaler_state)
