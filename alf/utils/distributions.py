"""Action distributions: construction helpers, sampling, modes and squashed Gaussians.

Discrete distributions hold actions in the environment's own coordinates: a
``Discrete(n, start=s)`` action is ``s .. s + n - 1`` everywhere in ALF (samples, modes,
stored actions, ``log_prob``'s argument); the 0-based index exists only inside
:class:`Categorical` and :class:`MultiCategorical` (their ``offset``). An invalid-action
mask (true: allowed) gives masked actions the logit :func:`masked_logit`, i.e.
probability zero, so they are never sampled or taken greedily and add nothing to the
entropy; a row that allows nothing is treated as allowing everything (the environments
refuse such a row where the action matters, see ``alf.environments.data_check``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributions as td
import torch.nn.functional as F

from alf import nest
from alf.utils.numpy_draws import gumbel_argmax

__all__ = [
    "Categorical",
    "allowed_actions",
    "MultiCategorical",
    "NestDistribution",
    "SquashedNormal",
    "apply_mask",
    "diag_normal",
    "distribution_mode",
    "masked_logit",
    "sample",
]


def masked_logit(dtype: torch.dtype) -> float:
    """The logit given to masked actions: the most negative finite value of ``dtype``
    (finite, so that ``0 * logit`` in the entropy stays 0)."""
    return torch.finfo(dtype).min


def allowed_actions(mask: torch.Tensor) -> torch.Tensor:
    """``mask`` as booleans, with the rows that allow nothing allowing everything."""
    mask = mask.bool()
    return mask | ~mask.any(-1, keepdim=True)


def apply_mask(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with the entries whose ``mask`` is false set to :func:`masked_logit`
    (rows of ``mask`` that allow nothing allow everything)."""
    if mask is None:
        return logits
    return logits.masked_fill(~allowed_actions(mask), masked_logit(logits.dtype))


def _gumbel_argmax(logits: torch.Tensor) -> torch.Tensor:
    """``argmax(logits + Gumbel noise)`` over the last dimension: a categorical draw.

    The uniform numbers come from torch's generator either way; on CPU float32 (outside
    tracing) the elementwise part runs in numpy, whose dispatch costs a fraction of
    torch's for the small batches of collection (the same formula, values equal up to
    an ulp of the logarithms)."""
    uniform = torch.rand_like(logits)
    if (
        uniform.device.type == "cpu"
        and uniform.dtype == torch.float32
        and not (torch.jit.is_tracing() or torch.compiler.is_compiling())
    ):
        return torch.from_numpy(gumbel_argmax(logits.detach().numpy(), uniform.numpy()))
    uniform.clamp_(min=torch.finfo(logits.dtype).tiny)
    return (logits - torch.log(-torch.log(uniform))).argmax(-1)


class Categorical(td.Categorical):
    """``torch.distributions.Categorical`` over (finite) logits, with a cheaper
    construction (one ``log_softmax``), ``log_prob`` and ``entropy``, and no argument
    validation. For small networks on CPU the distribution's bookkeeping is a
    noticeable part of each step.

    Args:
        logits: ``[B, n]`` unnormalised log-probabilities.
        offset: the action of index 0 (a ``Discrete(n, start)``'s ``start``): samples and
            modes are ``index + offset`` and ``log_prob`` takes such actions.
        mask: ``[B, n]``, false for invalid actions (see :func:`apply_mask`).
    """

    def __init__(
        self, logits: torch.Tensor, *, offset: int = 0, mask: torch.Tensor | None = None
    ) -> None:
        self.logits = torch.log_softmax(apply_mask(logits, mask), dim=-1)
        self._param = self.logits
        self._num_events = logits.shape[-1]
        self.offset = offset
        td.Distribution.__init__(self, logits.shape[:-1], validate_args=False)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        index = value if value.dtype == torch.int64 else value.long()
        if self.offset:
            index = index - self.offset
        return self.logits.gather(-1, index.unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1) + self.offset

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        """A Gumbel-max draw (cheaper on CPU than ``torch.multinomial`` for small
        batches); ``sample_shape`` must be empty."""
        if sample_shape:
            raise ValueError("Categorical.sample draws one action per row")
        with torch.no_grad():
            index = _gumbel_argmax(self.logits)
            return index + self.offset if self.offset else index


class MultiCategorical(td.Distribution):
    """Independent categoricals, one per element of a discrete action of shape ``S``
    (``MultiDiscrete``, ``MultiBinary``, or an integer ``Box``); ``log_prob`` and
    ``entropy`` are summed over the elements.

    Args:
        logits: ``[B, *S, m]``, ``m`` the largest number of values of an element;
            elements with fewer values have their extra entries masked in ``mask``.
        offset: ``[*S]`` integer tensor, the action of index 0 of each element.
        mask: ``[B, *S, m]`` (or broadcastable), false for invalid values.
    """

    arg_constraints: dict = {}

    def __init__(
        self, *, logits: torch.Tensor, offset: torch.Tensor, mask: torch.Tensor | None = None
    ) -> None:
        if mask is not None:
            mask = mask.expand_as(logits)
        self.logits = torch.log_softmax(apply_mask(logits, mask), dim=-1)
        self.offset = offset
        self._event_dims = offset.dim()
        split = logits.dim() - 1 - self._event_dims
        super().__init__(logits.shape[:split], logits.shape[split:-1], validate_args=False)

    def _sum_event(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=tuple(range(-self._event_dims, 0))) if self._event_dims else x

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        index = (value.long() - self.offset).unsqueeze(-1)
        return self._sum_event(self.logits.gather(-1, index).squeeze(-1))

    def entropy(self) -> torch.Tensor:
        return self._sum_event(-(self.logits.exp() * self.logits).sum(-1))

    @property
    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1) + self.offset

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        """A Gumbel-max draw per element; ``sample_shape`` must be empty."""
        if sample_shape:
            raise ValueError("MultiCategorical.sample draws one action per row")
        with torch.no_grad():
            return _gumbel_argmax(self.logits) + self.offset


class NestDistribution(td.Distribution):
    """Independent distributions, one per leaf of a nested (``Dict`` / ``Tuple``) action:
    samples and modes are nests of the same structure, ``log_prob`` (of such a nest)
    and ``entropy`` are the sums over the leaves.

    Args:
        dists: the leaves' distributions, in ``nest.flatten`` order of ``structure``.
        structure: a nest (e.g. the action spec) whose structure the actions have.
    """

    arg_constraints: dict = {}

    def __init__(self, *, dists: list[td.Distribution], structure: Any) -> None:
        self.dists = dists
        self._structure = structure
        super().__init__(dists[0].batch_shape, validate_args=False)

    def _pack(self, leaves: list[torch.Tensor]) -> Any:
        return nest.pack_sequence_as(self._structure, leaves)

    def log_prob(self, value: Any) -> torch.Tensor:
        leaves = nest.flatten(value)
        return sum(d.log_prob(v) for d, v in zip(self.dists, leaves, strict=True))

    def entropy(self) -> torch.Tensor:
        return sum(d.entropy() for d in self.dists)

    @property
    def mode(self) -> Any:
        return self._pack([distribution_mode(d) for d in self.dists])

    def sample(self, sample_shape: torch.Size = torch.Size()) -> Any:
        if sample_shape:
            raise ValueError("NestDistribution.sample draws one action per row")
        return self._pack([sample(d) for d in self.dists])


def diag_normal(loc: torch.Tensor, scale: torch.Tensor, event_dims: int = 1) -> td.Distribution:
    """A Normal whose last ``event_dims`` dimensions form one event."""
    normal = td.Normal(loc, scale, validate_args=False)
    if event_dims == 0:
        return normal
    return td.Independent(normal, event_dims, validate_args=False)


class SquashedNormal(td.Distribution):
    """A diagonal Normal pushed through ``tanh`` and scaled to ``[low, high]``.

    Written directly rather than as a ``TransformedDistribution``, whose construction
    alone costs about 0.2 ms on CPU (SAC builds two of these per update).
    ``log_prob`` inverts the squashing with the pre-image clamped just inside
    ``(-1, 1)``, so the log-probability of a stored action that float32 rounded onto a
    bound stays finite; :meth:`rsample_with_log_prob` needs no inversion at all.
    ``entropy()`` is the entropy of the underlying Normal (the squashed entropy has no
    closed form), the usual choice for an entropy bonus. Samples and modes are clamped
    to the bounds (``mid + half * tanh`` can round one ulp past them).

    Args:
        loc: mean of the Normal, shaped ``[B, *event_shape]``.
        scale: standard deviation of the Normal, shaped ``[B, *event_shape]``.
        low: lower action bound, shaped ``event_shape``.
        high: upper action bound, shaped ``event_shape``.
        event_dims: number of trailing dimensions that form one action.
    """

    _EPS = 1e-6
    arg_constraints: dict = {}
    has_rsample = True

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        low: torch.Tensor,
        high: torch.Tensor,
        event_dims: int = 1,
    ) -> None:
        self.loc, self.scale = loc, scale
        self._low, self._high = low, high
        self._mid = (high + low) / 2
        self._half = (high - low) / 2
        self._event_dims = event_dims
        split = loc.dim() - event_dims
        super().__init__(loc.shape[:split], loc.shape[split:], validate_args=False)

    @property
    def base_normal(self) -> td.Distribution:
        """The Normal before squashing."""
        return diag_normal(self.loc, self.scale, self._event_dims)

    def _sum_event(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=tuple(range(-self._event_dims, 0))) if self._event_dims else x

    def _squash(self, x: torch.Tensor) -> torch.Tensor:
        y = self._mid + self._half * torch.tanh(x)
        return torch.maximum(torch.minimum(y, self._high), self._low)

    def _log_prob_of_pre_image(self, pre_image: torch.Tensor) -> torch.Tensor:
        z = (pre_image - self.loc) / self.scale
        normal = -0.5 * z * z - torch.log(self.scale) - 0.5 * math.log(2 * math.pi)
        # log |dy/dx| of y = mid + half * tanh(x), with log(1 - tanh(x)^2) written stably.
        log_det = torch.log(self._half) + 2 * (math.log(2) - pre_image - F.softplus(-2 * pre_image))
        return self._sum_event(normal - log_det)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        squashed = ((value - self._mid) / self._half).clamp(-1 + self._EPS, 1 - self._EPS)
        return self._log_prob_of_pre_image(torch.atanh(squashed))

    def rsample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        noise = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self._squash(self.loc + self.scale * noise)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)

    def rsample_with_log_prob(
        self, sample_shape: torch.Size | tuple[int, ...] = ()
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample (``[*sample_shape, B, *event_shape]``) and its
        log-probability, computed from the pre-image (no ``atanh``, so it is exact even
        where ``tanh`` rounds to +-1)."""
        if sample_shape:
            noise = torch.randn(
                (*sample_shape, *self.loc.shape), dtype=self.loc.dtype, device=self.loc.device
            )
        else:
            noise = torch.randn_like(self.loc)
        pre_image = self.loc + self.scale * noise
        return self._squash(pre_image), self._log_prob_of_pre_image(pre_image)

    def entropy(self) -> torch.Tensor:
        return self._sum_event(0.5 + 0.5 * math.log(2 * math.pi) + torch.log(self.scale))

    @property
    def mode(self) -> torch.Tensor:
        return self._squash(self.loc)


def distribution_mode(dist: td.Distribution) -> Any:
    """The most likely action of ``dist`` (argmax for categoricals, the mean for a
    Normal, a nest of the leaves' modes for a :class:`NestDistribution`)."""
    if isinstance(dist, td.Categorical) and not isinstance(dist, Categorical):
        return dist.logits.argmax(-1)
    return dist.mode


def sample(dist: td.Distribution) -> Any:
    """Draws an action from ``dist``; categoricals use the Gumbel-max trick, which is much
    cheaper on CPU than ``torch.multinomial`` for small batches."""
    if isinstance(dist, td.Categorical) and not isinstance(dist, Categorical):
        return _gumbel_argmax(dist.logits)
    return dist.sample()
