"""Action distributions: construction helpers, modes and squashed Gaussians."""

from __future__ import annotations

import torch
import torch.distributions as td

__all__ = ["SquashedNormal", "distribution_mode", "diag_normal", "sample"]


def diag_normal(loc: torch.Tensor, scale: torch.Tensor) -> td.Independent:
    """A Normal over the last dimension of ``loc`` treated as one event."""
    return td.Independent(td.Normal(loc, scale, validate_args=False), 1, validate_args=False)


class SquashedNormal(td.TransformedDistribution):
    """A diagonal Normal pushed through ``tanh`` and scaled to ``[low, high]``.

    Its ``entropy()`` is the entropy of the underlying Normal (the squashed entropy has no
    closed form), which is the usual choice for an entropy bonus.
    """

    def __init__(
        self, loc: torch.Tensor, scale: torch.Tensor, low: torch.Tensor, high: torch.Tensor
    ) -> None:
        self.base_normal = diag_normal(loc, scale)
        transforms = [
            td.TanhTransform(cache_size=1),
            td.AffineTransform((high + low) / 2, (high - low) / 2, event_dim=1, cache_size=1),
        ]
        super().__init__(self.base_normal, transforms, validate_args=False)

    def entropy(self) -> torch.Tensor:
        return self.base_normal.entropy()

    @property
    def mode(self) -> torch.Tensor:
        value = self.base_normal.mean
        for transform in self.transforms:
            value = transform(value)
        return value


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
