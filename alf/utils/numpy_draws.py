"""Action draws and their log-probabilities in numpy, for collection on the CPU.

A collector calls the policy once per batched environment step on a few rows, where
torch's per-operation dispatch (a few microseconds an operation) costs more than the
arithmetic; numpy's costs about a microsecond. These functions compute what
:class:`~alf.utils.distributions.Categorical` and a diagonal Normal
(:func:`~alf.utils.distributions.diag_normal`) sample and ``log_prob`` compute, from
numpy float32 parameters, up to float rounding. The noise comes from torch's default
generator, in the order and shape the torch distributions draw it, so that
``torch.manual_seed`` governs collection either way and a seeded draw picks the same
actions as the torch path (unless two logits tie to within rounding).
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["draw_categorical", "draw_diag_normal", "gumbel_argmax", "host_array"]

_TINY = float(np.finfo(np.float32).tiny)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def host_array(tensor: torch.Tensor) -> np.ndarray | None:
    """A numpy view of the data of a float32 tensor on the CPU (detached), or None for
    any other tensor: the one way the numpy paths read tensors, so that they never
    move an accelerator's tensor to the host."""
    if tensor.device.type != "cpu" or tensor.dtype != torch.float32:
        return None
    return tensor.detach().numpy()


def gumbel_argmax(logits: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """``argmax(logits - log(-log(uniform)))`` over the last axis: a categorical draw
    by the Gumbel-max trick from float32 uniform numbers in ``[0, 1)``, which it
    overwrites (the one formula of both the numpy and the torch categorical draws)."""
    np.maximum(uniform, _TINY, out=uniform)
    np.log(uniform, out=uniform)
    np.negative(uniform, out=uniform)
    np.log(uniform, out=uniform)
    np.subtract(logits, uniform, out=uniform)
    return uniform.argmax(-1)


def draw_categorical(logits: np.ndarray, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A Gumbel-max draw from ``[B, n]`` float32 logits, as
    :meth:`~alf.utils.distributions.Categorical.sample` draws it.

    Returns:
        The ``[B]`` int64 actions (index + ``offset``) and their ``[B]`` float32
        log-probabilities.
    """
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    index = gumbel_argmax(log_probs, torch.rand(log_probs.shape, dtype=torch.float32).numpy())
    log_prob = log_probs[np.arange(index.shape[0]), index]
    action = index + offset if offset else index
    return action.astype(np.int64, copy=False), log_prob


def draw_diag_normal(
    mean: np.ndarray, std: np.ndarray, log_std_sum: float, event_dims: int
) -> tuple[np.ndarray, np.ndarray]:
    """A draw from a Normal of ``[B, *S]`` means and standard deviations ``std``
    (broadcast against ``mean``), whose last ``event_dims`` dimensions form one event,
    as ``torch.distributions.Normal.sample`` draws it.

    Args:
        mean: ``[B, *S]`` float32 means.
        std: float32 standard deviations, broadcastable to ``mean``.
        log_std_sum: the sum of ``log(std)`` over one event (the standard deviation
            is the same for every row).
        event_dims: the trailing dimensions summed into one log-probability.

    Returns:
        The ``[B, *S]`` float32 actions and their ``[B, *S[:-event_dims]]`` float32
        log-probabilities.
    """
    noise = torch.randn(mean.shape, dtype=torch.float32).numpy()
    action = mean + std * noise
    # The density of the action as stored (rounded to float32), as training's log_prob
    # will see it: with a small std, ``noise`` itself would differ from it noticeably.
    log_density = np.square((action - mean) / std)
    log_density *= -0.5
    event_axes = tuple(range(mean.ndim - event_dims, mean.ndim))
    event_size = math.prod(mean.shape[mean.ndim - event_dims :])
    log_prob = log_density.sum(axis=event_axes) if event_axes else log_density
    log_prob = log_prob - np.float32(log_std_sum + event_size * _HALF_LOG_2PI)
    return action, log_prob
