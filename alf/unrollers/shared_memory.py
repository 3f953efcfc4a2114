"""Shared-memory state of asynchronous collection: trajectory fragments and parameters.

Both are preallocated once, from specs or from a module, as shared torch tensors that are
handed to the actor processes when they start. Afterwards only small integers (buffer
indices, versions) travel between processes.
"""

from __future__ import annotations

import os
import re
from typing import Any

import torch

from alf import nest
from alf.run_dir.layout import pid_alive
from alf.tensor_specs import TensorSpec

__all__ = ["SEMAPHORE_PREFIX", "FragmentPool", "SharedParameters", "remove_stale_semaphores"]

SEMAPHORE_PREFIX = "/alf_{pid}"
"""Prefix of the named semaphores of an asynchronous learner's queues, locks and events
(``/dev/shm/sem.alf_<pid>-*``): the pid names their owner, so what a killed run left can
be told from what a live one uses."""

_SEMAPHORE_FILE = re.compile(r"^sem\.alf_(\d+)-")


def remove_stale_semaphores(shm_dir: str = "/dev/shm") -> int:
    """Removes the named semaphores of learners that are gone (a SIGKILL of a run's
    process group gives multiprocessing no chance to unlink them); returns how many.

    Called when an asynchronous run starts, so what a killed run left does not pile up.
    """
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return 0
    removed = 0
    for name in names:
        match = _SEMAPHORE_FILE.match(name)
        if not match or pid_alive(int(match.group(1))):
            continue
        try:
            os.unlink(os.path.join(shm_dir, name))
            removed += 1
        except OSError:
            pass
    return removed


class FragmentPool:
    """``num_buffers`` trajectory fragments ``[length, batch_size, ...]`` in shared memory.

    Each leaf of ``spec`` becomes one shared tensor ``[num_buffers, length, batch_size,
    ...]``; buffer ``i`` is the slice ``[i]`` of every leaf. An actor fills a free buffer
    and sends its index to the learner, which copies it out and gives the index back.

    Args:
        spec: nest of :class:`TensorSpec` of one step of one environment.
        num_buffers: how many fragments exist at once.
        length: rows per fragment.
        batch_size: environments per fragment.
    """

    def __init__(self, *, spec: Any, num_buffers: int, length: int, batch_size: int) -> None:
        if num_buffers < 1:
            raise ValueError(f"num_buffers must be >= 1, got {num_buffers}")
        self.spec = spec
        self.num_buffers = num_buffers
        self.length = length
        self.batch_size = batch_size
        self.storage = nest.map_structure(
            lambda s: s.zeros((num_buffers, length, batch_size)).share_memory_(), spec
        )

    def write(self, index: int, fragment: Any) -> None:
        """Copies a ``[length, batch_size]`` nest into buffer ``index``."""
        nest.map_structure(lambda dst, src: dst[index].copy_(src), self.storage, fragment)

    def read(self, index: int) -> Any:
        """A private copy of buffer ``index`` (the buffer may be reused right after)."""
        return nest.map_structure(lambda x: x[index].clone(), self.storage)


class SharedParameters:
    """A shared copy of a module's parameters and buffers, with a version counter.

    The learner :meth:`publish` es its module's current values (bumping the version);
    actors :meth:`load_into` their own copy when :attr:`version` changed. A lock makes
    each copy see one consistent set of values.

    Args:
        module: the module whose ``state_dict`` tensors are shared.
        lock: a lock from the multiprocessing context the actors are started with.
        skip_prefixes: names starting with one of these are not shared (state that
            acting never reads, e.g. ``RLAlgorithm.learner_only_state``).
    """

    def __init__(
        self, *, module: torch.nn.Module, lock: Any, skip_prefixes: tuple[str, ...] = ()
    ) -> None:
        self.tensors = {
            name: value.detach().to("cpu", copy=True).share_memory_()
            for name, value in module.state_dict().items()
            if isinstance(value, torch.Tensor) and not name.startswith(skip_prefixes)
        }
        self._version = torch.zeros((), dtype=torch.int64).share_memory_()
        self._lock = lock

    @property
    def version(self) -> int:
        """How many times :meth:`publish` has been called."""
        return int(self._version)

    @torch.no_grad()
    def publish(self, module: torch.nn.Module) -> int:
        """Copies ``module``'s current values in; returns the new version."""
        state = module.state_dict()
        with self._lock:
            for name, shared in self.tensors.items():
                shared.copy_(state[name])
            self._version += 1
            return int(self._version)

    @torch.no_grad()
    def load_into(self, module: torch.nn.Module) -> int:
        """Copies the shared values into ``module``; returns their version."""
        state = module.state_dict()
        with self._lock:
            for name, shared in self.tensors.items():
                state[name].copy_(shared)
            return int(self._version)


def spec_of(example: Any) -> Any:
    """Specs of a nest of ``[B, ...]`` tensors (one element, without the batch)."""
    return nest.map_structure(lambda x: TensorSpec(tuple(x.shape[1:]), x.dtype), example)
