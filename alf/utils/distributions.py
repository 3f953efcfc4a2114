"""Action distributions: construction helpers, sampling, modes and squashed Gaussians."""

from __future__ import annotations

import math

import torch
import torch.distributions as td
import torch.nn.functional as F

__all__ = ["Categorical", "SquashedNormal", "diag_normal", "distribution_mode", "sample"]


class Categorical(td.Categorical):
    """``torch.distributions.Categorical`` over (finite) logits, with a cheaper
    construction (one ``log_softmax``), ``log_prob`` and ``entropy``, and no argument
    validation. For small networks on CPU the distribution's bookkeeping is a
    noticeable part of each step."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = torch.log_softmax(logits, dim=-1)
        self._param = self.logits
        self._num_events = logits.shape[-1]
        td.Distribution.__init__(self, logits.shape[:-1], validate_args=False)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, value.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)


def diag_normal(loc: torch.Tensor, scale: torch.Tensor, event_dims: int = 1) -> td.Distribution:
    """A Normal whose last ``event_dims`` dimensions form one event."""
    normal = td.Normal(loc, scale, validate_args=False)
    if event_dims == 0:
        return normal
    return td.Independent(normal, event_dims, validate_args=False)


class SquashedNormal(td.TransformedDistribution):
    """A diagonal Normal pushed through ``tanh`` and scaled to ``[low, high]``.

    ``log_prob`` inverts the squashing with the pre-image clamped just inside
    ``(-1, 1)``, so the log-probability of a stored action that float32 rounded onto a
    bound stays finite. ``entropy()`` is the entropy of the underlying Normal (the
    squashed entropy has no closed form), the usual choice for an entropy bonus.

    Args:
        loc, scale: parameters of the Normal, shaped ``[B, *event_shape]``.
        low, high: action bounds, shaped ``event_shape``.
        event_dims: number of trailing dimensions that form one action.
    """

    _EPS = 1e-6

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        low: torch.Tensor,
        high: torch.Tensor,
        event_dims: int = 1,
    ) -> None:
        self.base_normal = diag_normal(loc, scale, event_dims)
        self._mid = (high + low) / 2
        self._half = (high - low) / 2
        self._event_dims = event_dims
        transforms = [
            td.TanhTransform(),
            td.AffineTransform(self._mid, self._half, event_dim=event_dims),
        ]
        super().__init__(self.base_normal, transforms, validate_args=False)

    def _sum_event(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=tuple(range(-self._event_dims, 0))) if self._event_dims else x

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        squashed = ((value - self._mid) / self._half).clamp(-1 + self._EPS, 1 - self._EPS)
        pre_image = torch.atanh(squashed)
        # log |dy/dx| of y = mid + half * tanh(x), with log(1 - tanh(x)^2) written stably.
        log_det = torch.log(self._half) + 2 * (math.log(2) - pre_image - F.softplus(-2 * pre_image))
        return self.base_normal.log_prob(pre_image) - self._sum_event(log_det)

    def entropy(self) -> torch.Tensor:
        return self.base_normal.entropy()

    @property
    def mode(self) -> torch.Tensor:
        return self._mid + self._half * torch.tanh(self.base_normal.mean)


def distribution_mode(dist: td.Distribution) -> torch.Tensor:
    """The most likely action of ``dist`` (argmax for Categorical, mean for Normal)."""
    if isinstance(dist, td.Categorical):
        return dist.logits.argmax(-1)
    return dist.mode


def sample(dist: td.Distribution) -> torch.Tensor:
    """Draws an action from ``dist``; Categoricals use the Gumbel-max trick, which is much
    cheaper on CPU than ``torch.multinomial`` for small batches."""
    if isinstance(dist, td.Categorical):
        logits = dist.logits
        uniform = torch.rand_like(logits).clamp_(min=torch.finfo(logits.dtype).tiny)
        return (logits - torch.log(-torch.log(uniform))).argmax(-1)
    return dist.sample()
