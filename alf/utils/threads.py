"""The number of CPU threads of torch's kernels and of numpy's BLAS, set together.

Collection evaluates small policies in numpy (``ActorCriticAlgorithm.numpy_rollout``),
and numpy's BLAS (OpenBLAS in numpy's wheels) starts a thread per core for a matrix
product as small as ``[32, 64] @ [64, 64]``; its threads then spin-wait between
products, the way torch's OpenMP threads do, which is what makes a run collapse when
another process shares the cores (``TrainerConfig.torch_num_threads``). So wherever ALF
limits torch's threads it limits numpy's BLAS to the same number (``threadpoolctl``).
"""

from __future__ import annotations

import torch
from threadpoolctl import threadpool_limits

__all__ = ["set_cpu_threads"]


def set_cpu_threads(num_threads: int) -> None:
    """Makes torch's CPU kernels and numpy's BLAS use ``num_threads`` threads each
    (``num_threads >= 1``). Process-wide: it holds for the caller's own torch and numpy
    code too, and it reaches the BLAS libraries loaded so far (numpy's; one that a
    package loads later, e.g. scipy's own, keeps its default)."""
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    torch.set_num_threads(num_threads)
    threadpool_limits(limits=num_threads, user_api="blas")
