"""Data-parallel training across processes started by ``torchrun``.

``torchrun --nproc_per_node=N -m alf.bin.train ...`` starts ``N`` copies of the trainer
(``--nnodes``/``--rdzv_endpoint`` spread them over machines). Each copy is a *rank*: it
builds its own environments and unroller, and every gradient update averages the ranks'
gradients through :class:`~torch.nn.parallel.DistributedDataParallel` (gloo on CPU,
NCCL on GPU), so all ranks hold identical parameters after every update. Rank 0 alone
reads and writes ``root_dir``.

This module holds the process-group plumbing: :func:`init_distributed` reads torchrun's
environment variables, :class:`DistributedContext` does the small control collectives
the trainer needs (with a gloo group, also next to NCCL), and :class:`DataParallelLoss`
runs an algorithm's loss computation inside DDP's forward, so the backward pass that
follows all-reduces the gradients.
"""

from __future__ import annotations

import datetime
import gc
import hashlib
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from alf.errors import TrainingError

__all__ = [
    "DataParallelLoss",
    "DistributedContext",
    "DistributedError",
    "init_distributed",
    "is_communication_error",
    "parameter_digest",
    "resolve_device",
    "shutdown_distributed",
]

_COMMUNICATION_ERROR = re.compile(
    r"gloo|nccl|connection (reset|closed|refused)|broken pipe|timed out", re.IGNORECASE
)
_UNUSED_PARAMETERS = "Expected to have finished reduction in the prior iteration"


class DistributedError(TrainingError, RuntimeError):
    """Another rank died, hung or disagrees with this one."""


def is_communication_error(err: BaseException) -> bool:
    """Whether ``err`` (raised during a collective, e.g. DDP's gradient all-reduce) says
    that another rank is gone or unreachable."""
    backend_errors = tuple(
        getattr(dist, name) for name in ("DistError", "DistBackendError") if hasattr(dist, name)
    )
    return isinstance(err, backend_errors) or bool(_COMMUNICATION_ERROR.search(str(err)))


def resolve_device(device: str, *, local_rank: int = 0, world_size: int = 1) -> torch.device:
    """The torch device of ``TrainerConfig.device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``)
    for this rank: with several ranks, ``"cuda"`` means ``cuda:LOCAL_RANK``.

    Raises:
        ValueError: an unknown device, CUDA without a GPU, or ``cuda:N`` with several
            ranks (they would share one GPU).
    """
    try:
        parsed = torch.device(device)
    except RuntimeError as err:
        raise ValueError(
            f"TrainerConfig.device='{device}' is not a device; use 'cpu', 'cuda' or 'cuda:N'"
        ) from err
    if parsed.type == "cpu":
        return parsed
    if parsed.type != "cuda":
        raise ValueError(
            f"TrainerConfig.device='{device}': only 'cpu', 'cuda' and 'cuda:N' are supported"
        )
    if not torch.cuda.is_available():
        raise ValueError(
            f"TrainerConfig.device='{device}', but this torch build sees no CUDA GPU "
            f"(torch {torch.__version__}); train with --device=cpu"
        )
    if world_size > 1:
        if parsed.index is not None:
            raise ValueError(
                f"TrainerConfig.device='{device}' with {world_size} ranks: use 'cuda', and "
                "each rank takes the GPU of its LOCAL_RANK (limit the GPUs with "
                "CUDA_VISIBLE_DEVICES)"
            )
        parsed = torch.device("cuda", local_rank)
    index = 0 if parsed.index is None else parsed.index
    if index >= torch.cuda.device_count():
        raise ValueError(
            f"Device cuda:{index} does not exist: this machine has "
            f"{torch.cuda.device_count()} visible GPU(s)"
        )
    return torch.device("cuda", index)


@dataclass(frozen=True)
class DistributedContext:
    """This process's place in a data-parallel run, and the collectives the trainer uses.

    Every method here is a collective (all ranks must call it, in the same order), except
    :meth:`share`. Communication failures surface as :class:`DistributedError`.

    Attributes:
        rank: this process's rank (0 writes the run's files).
        world_size: number of ranks.
        local_rank: rank within this machine (picks the GPU).
        backend: ``"gloo"`` or ``"nccl"`` (gradients).
        control_group: the gloo group of the control collectives (None: the default group).
    """

    rank: int
    world_size: int
    local_rank: int
    backend: str
    control_group: Any = None

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the only one that writes files."""
        return self.rank == 0

    def share(self, total: int, what: str) -> int:
        """This rank's part of a run-wide ``total`` (e.g. environments), which must be a
        multiple of the number of ranks."""
        if total % self.world_size:
            raise ValueError(
                f"{what}={total} is the total over all ranks and must be divisible by the "
                f"{self.world_size} ranks (each rank takes {what} / {self.world_size})"
            )
        return total // self.world_size

    @contextmanager
    def communicating(self, what: str) -> Iterator[None]:
        """Turns a failed collective into a :class:`DistributedError` naming ``what``."""
        try:
            yield
        except DistributedError:
            raise
        except RuntimeError as err:
            if not is_communication_error(err):
                raise
            raise DistributedError(
                f"rank {self.rank}: lost contact with the other ranks during {what} "
                f"({type(err).__name__}: {str(err).splitlines()[0][:300]}). Another rank "
                "probably died or hangs; its own output has the cause. Nothing was "
                "written after the last checkpoint."
            ) from err

    def all_reduce_sum(self, values: Sequence[float], *, what: str) -> list[float]:
        """Sums ``values`` (float64) element-wise over the ranks."""
        tensor = torch.tensor([float(v) for v in values], dtype=torch.float64)
        with self.communicating(what):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.control_group)
        return tensor.tolist()

    def sum_tensor(self, tensor: torch.Tensor, *, what: str) -> torch.Tensor:
        """A CPU copy of ``tensor`` summed element-wise over the ranks."""
        total = tensor.detach().cpu().clone()
        with self.communicating(what):
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.control_group)
        return total

    def all_gather(self, values: Sequence[float], *, what: str) -> list[list[float]]:
        """Every rank's ``values`` (same length on all ranks), indexed by rank."""
        tensor = torch.tensor([float(v) for v in values], dtype=torch.float64)
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        with self.communicating(what):
            dist.all_gather(out, tensor, group=self.control_group)
        return [t.tolist() for t in out]

    def all_gather_object(self, obj: Any, *, what: str) -> list[Any]:
        """Every rank's picklable ``obj``, indexed by rank."""
        out: list[Any] = [None] * self.world_size
        with self.communicating(what):
            dist.all_gather_object(out, obj, group=self.control_group)
        return out

    def broadcast_object(self, obj: Any, *, what: str) -> Any:
        """Rank 0's picklable ``obj`` on every rank (others pass anything, e.g. None)."""
        box = [obj if self.is_main else None]
        with self.communicating(what):
            dist.broadcast_object_list(box, src=0, group=self.control_group)
        return box[0]

    def broadcast_module(self, module: nn.Module) -> None:
        """Copies rank 0's parameters and buffers into ``module`` on every rank."""
        tensors = list(module.state_dict(keep_vars=True).values())
        with self.communicating("the initial broadcast of rank 0's parameters"), torch.no_grad():
            for tensor in tensors:
                data = tensor.data if isinstance(tensor, nn.Parameter) else tensor
                if self.backend == "gloo" and data.device.type != "cpu":
                    host = data.cpu()
                    dist.broadcast(host, src=0)
                    data.copy_(host)
                else:
                    dist.broadcast(data, src=0)

    def check_identical(self, module: nn.Module, *, what: str) -> str:
        """Compares :func:`parameter_digest` of ``module`` over the ranks and returns it.

        Raises:
            DistributedError: the ranks' parameters differ (an update bypassed the
                gradient all-reduce, e.g. a custom algorithm that does not compute its loss
                through ``Algorithm.compute_loss``).
        """
        digest = parameter_digest(module)
        digests = self.all_gather_object(digest, what=what)
        if len(set(digests)) > 1:
            raise DistributedError(
                f"The ranks' parameters diverged (digests by rank: {digests}) at {what}. "
                "Every gradient update must compute its loss through "
                "Algorithm.compute_loss so that DDP all-reduces the gradients."
            )
        return digest


def parameter_digest(module: nn.Module) -> str:
    """SHA-256 of ``module``'s parameters and buffers (names, dtypes and exact bytes)."""
    hasher = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        data = tensor.detach().cpu().contiguous().reshape(-1)  # a 0-d tensor cannot be viewed
        hasher.update(f"{name}:{data.dtype}:{tuple(data.shape)};".encode())
        hasher.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return hasher.hexdigest()


def init_distributed(*, device: torch.device, timeout_s: float) -> DistributedContext | None:
    """Joins the process group described by torchrun's environment variables
    (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).

    Args:
        device: this rank's training device (from :func:`resolve_device`): gradients go
            through NCCL on CUDA, gloo on CPU.
        timeout_s: how long a collective waits for a silent rank before failing.

    Returns:
        The context, or None when the process was not started as one of several ranks
        (no ``WORLD_SIZE``, or ``WORLD_SIZE=1``).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return None
    missing = [v for v in ("RANK", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise ValueError(
            f"WORLD_SIZE={world_size} is set but {', '.join(missing)} is not: start "
            "distributed training with torchrun (torchrun --nproc_per_node=N -m "
            "alf.bin.train ...)"
        )
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend, timeout=timeout)
    control_group = dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else None
    return DistributedContext(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        backend=backend,
        control_group=control_group,
    )


def shutdown_distributed(context: DistributedContext | None, *, finished: bool) -> None:
    """Leaves the process group, if this process joined one.

    After a run that ``finished`` on this rank, the ranks first meet at a barrier, so that
    none tears its connections down while another still talks to it; a rank that fails
    there only warns (its run's files are already written). Objects that still hold the
    group (a released :class:`DataParallelLoss`'s reducer) are collected before the group
    is destroyed, while the interpreter is fully alive: a gloo group destroyed during the
    interpreter's own teardown can abort the process.

    Args:
        context: this rank's context (None: not a data-parallel run).
        finished: whether this rank's run ended without an error.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if context is not None and finished:
        try:
            with context.communicating("the final barrier"):
                dist.barrier(group=context.control_group)
        except (DistributedError, RuntimeError) as err:  # another rank failed at its end
            logging.warning("%s", str(err).splitlines()[0] if str(err) else repr(err))
    gc.collect()
    dist.destroy_process_group()


class _LossModule(nn.Module):
    """Holds the optimized parameters (plus the non-finite flag) for DDP; its forward
    runs whatever loss function it is given."""

    def __init__(self, parameters: Sequence[nn.Parameter]) -> None:
        super().__init__()
        self.optimized = nn.ParameterList(parameters)
        self.nonfinite_flag = nn.Parameter(torch.zeros((), device=parameters[0].device))

    def forward(self, loss_fn: Callable[..., Any], *args: Any) -> tuple[Any, torch.Tensor]:
        # The flag goes through the forward's output, so that DDP's search for unused
        # parameters (find_unused_parameters) sees it used.
        return loss_fn(*args), self.nonfinite_flag * 1.0


class DataParallelLoss:
    """Runs loss computations inside a :class:`DistributedDataParallel` forward, so the
    next ``backward()`` averages the gradients of ``parameters`` over the ranks.

    The wrapped module holds one extra scalar parameter, :attr:`nonfinite_flag`. Adding
    ``nonfinite_flag * (1 if this rank's loss is not finite else 0)`` to the loss before
    ``backward()`` makes its averaged gradient non-zero on every rank exactly when some
    rank's loss was not finite, so all ranks skip the same updates without another
    collective.

    Args:
        parameters: the optimizer's parameters (identical on all ranks).
        context: this rank's :class:`DistributedContext`.
        find_unused_parameters: set when some updates leave parameters without a
            gradient (e.g. a delayed actor update); costs a graph traversal per update.
    """

    def __init__(
        self,
        *,
        parameters: Sequence[nn.Parameter],
        context: DistributedContext,
        find_unused_parameters: bool = False,
    ) -> None:
        self.context = context
        self._module = _LossModule(list(parameters))
        self._flag_output: torch.Tensor | None = None
        device = self._module.nonfinite_flag.device
        with context.communicating("setting up DistributedDataParallel"):
            self._ddp: nn.parallel.DistributedDataParallel | None = (
                nn.parallel.DistributedDataParallel(
                    self._module,
                    device_ids=[device] if device.type == "cuda" else None,
                    find_unused_parameters=find_unused_parameters,
                )
            )

    @property
    def nonfinite_flag(self) -> nn.Parameter:
        """The scalar parameter that carries "some loss was not finite" (see above)."""
        return self._module.nonfinite_flag

    def __call__(self, loss_fn: Callable[..., Any], *args: Any) -> Any:
        """``loss_fn(*args)``, run as DDP's forward."""
        if self._ddp is None:
            raise RuntimeError("DataParallelLoss used after release() (the run was closed)")
        try:
            with self.context.communicating("DDP's forward"):
                result, self._flag_output = self._ddp(loss_fn, *args)
        except RuntimeError as err:
            if _UNUSED_PARAMETERS not in str(err):
                raise
            raise ValueError(
                "An update left some optimized parameters without a gradient (e.g. an "
                "actor updated only every few steps), which DistributedDataParallel does "
                "not expect: set TrainerConfig.find_unused_parameters = True"
            ) from err
        return result

    def backward(self, loss: torch.Tensor) -> bool:
        """``backward()`` of ``loss`` with the gradients averaged over the ranks.

        Returns:
            Whether every rank's loss was finite.
        """
        if self._flag_output is None:
            raise RuntimeError(
                "DataParallelLoss.backward() without a loss computed through it: compute "
                "the loss with Algorithm.compute_loss so that DDP all-reduces its gradients"
            )
        flag = self.nonfinite_flag
        flag.grad = None
        local_bad = (~torch.isfinite(loss.detach())).to(flag.dtype)
        flag_term, self._flag_output = self._flag_output * local_bad, None
        with self.context.communicating("the gradient all-reduce"):
            (loss + flag_term).backward()
        return bool(flag.grad == 0)

    def release(self) -> None:
        """Drops the DDP wrapper (and with it the reducer's hold on the process group);
        this object cannot compute losses afterwards. Idempotent."""
        self._ddp = None
        self._flag_output = None
