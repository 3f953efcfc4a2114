"""Policy networks that output an action distribution."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.distributions as td
import torch.nn as nn
import torch.nn.functional as F

from alf import nest
from alf.config import configurable, invalid_value
from alf.networks.action_mask import ActionMask, discrete_sizes
from alf.networks.conv_encoder import ConvLayerParams
from alf.networks.encoding_network import EncodingNetwork, encoder_options, orthogonal_init
from alf.tensor_specs import (
    BoundedTensorSpec,
    UnsupportedActionSpaceError,
    action_bounds,
    describe_spec,
)
from alf.utils.distributions import (
    Categorical,
    MultiCategorical,
    NestDistribution,
    SquashedNormal,
    diag_normal,
)
from alf.utils.numpy_draws import draw_categorical, draw_diag_normal, host_array

__all__ = [
    "ActorDistributionNetwork",
    "HeadOptions",
    "action_distribution",
    "add_action_heads",
    "bounded_action_specs",
    "head_options",
    "numpy_action_draw",
]

_MIN_LOG_STD, _MAX_LOG_STD = -20.0, 2.0  # bounds of a state-dependent log-std ("exp")


@dataclass(frozen=True, kw_only=True)
class HeadOptions:
    """The continuous heads' settings, shared by every leaf."""

    state_dependent_std: bool
    init_std: float
    min_std: float
    squash: bool
    std_transform: Literal["softplus", "exp"]


def _add_head(owner: nn.Module, spec: BoundedTensorSpec, size: int, options: HeadOptions) -> None:
    """Adds the layers that turn ``[B, size]`` features into ``spec``'s distribution to
    ``owner`` (the network itself for a single action, else one module per leaf), under
    the names a single action's checkpoints have always used."""
    if spec.is_discrete:
        if spec.shape == ():
            owner._offset = int(np.asarray(spec.minimum))
            owner.logits = orthogonal_init(nn.Linear(size, spec.num_actions), 0.01)
            return
        sizes = discrete_sizes(spec)
        width = int(sizes.max())
        owner.logits = orthogonal_init(nn.Linear(size, int(sizes.size) * width), 0.01)
        offset = torch.as_tensor(np.broadcast_to(np.asarray(spec.minimum), spec.shape).copy())
        owner.register_buffer("_offsets", offset.to(torch.int64), persistent=False)
        padding = torch.arange(width) < torch.as_tensor(sizes).unsqueeze(-1)
        owner.register_buffer("_padding", padding, persistent=False)
        owner._layout = (*spec.shape, width)
        return
    dim = int(math.prod(spec.shape))
    owner.mean = orthogonal_init(nn.Linear(size, dim), 0.01)
    # softplus(x) = init_std at x = log(exp(init_std) - 1); exp(x) = init_std at log(init_std)
    if options.std_transform == "exp":
        std_bias = math.log(options.init_std)
    else:
        std_bias = math.log(math.expm1(options.init_std))
    if options.state_dependent_std:
        owner.std = orthogonal_init(nn.Linear(size, dim), 0.01)
        nn.init.constant_(owner.std.bias, std_bias)
    else:
        owner.std_param = nn.Parameter(torch.full((dim,), std_bias))
    low, high = action_bounds(spec)
    owner.register_buffer("_low", low)
    owner.register_buffer("_high", high)
    owner._action_shape = spec.shape


def _linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` without the module call machinery (a head's layer has no hooks)."""
    return F.linear(x, layer.weight, layer.bias)


def _std(raw_std: torch.Tensor, options: HeadOptions) -> torch.Tensor:
    """The standard deviation from the std parameter or output, by ``std_transform``."""
    if options.std_transform == "exp":
        if options.state_dependent_std:  # a network output: bound it as SB3 does
            raw_std = raw_std.clamp(_MIN_LOG_STD, _MAX_LOG_STD)
        return torch.exp(raw_std) + options.min_std
    return F.softplus(raw_std) + options.min_std


def _head_distribution(
    owner: nn.Module,
    spec: BoundedTensorSpec,
    hidden: torch.Tensor,
    options: HeadOptions,
    mask: torch.Tensor | None,
) -> td.Distribution:
    """The distribution of one action leaf from the layers :func:`_add_head` added."""
    if spec.is_discrete:
        logits = _linear(owner.logits, hidden)
        if spec.shape == ():
            return Categorical(logits, offset=owner._offset, mask=mask)
        logits = logits.reshape(logits.shape[0], *owner._layout)
        allowed = owner._padding
        if mask is not None:  # an element whose values are all masked allows them all
            allowed = (mask | ~mask.any(-1, keepdim=True)) & allowed
        return MultiCategorical(logits=logits, offset=owner._offsets, mask=allowed)
    mean = _linear(owner.mean, hidden)
    if options.state_dependent_std:
        raw_std = _linear(owner.std, hidden)
    else:
        raw_std = owner.std_param.expand_as(mean)
    std = _std(raw_std, options)
    shape = (mean.shape[0], *owner._action_shape)
    mean, std = mean.reshape(shape), std.reshape(shape)
    event_dims = len(owner._action_shape)
    if options.squash:
        return SquashedNormal(mean, std, owner._low, owner._high, event_dims)
    return diag_normal(mean, std, event_dims)


NumpyDraw = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``[B, size]`` float32 features -> ``[B, ...]`` actions and their ``[B]`` log-probabilities."""


def _numpy_head_draw(
    owner: nn.Module, spec: BoundedTensorSpec, options: HeadOptions
) -> NumpyDraw | None:
    """:func:`_head_distribution`'s draw and log-probability in numpy, from the head's
    parameters as they are now (None where only torch can: several action elements, a
    squashed Normal or a state-dependent standard deviation, parameters that are not
    float32 on the CPU)."""
    if spec.is_discrete:
        if spec.shape != ():
            return None
        weight, bias = host_array(owner.logits.weight), host_array(owner.logits.bias)
        if weight is None or bias is None:
            return None
        weight_t, offset = weight.T, owner._offset

        def draw_discrete(hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return draw_categorical(hidden @ weight_t + bias, offset)

        return draw_discrete
    if options.squash or options.state_dependent_std:
        return None
    weight, bias = host_array(owner.mean.weight), host_array(owner.mean.bias)
    with torch.no_grad():
        std_tensor = _std(owner.std_param, options)
    std = host_array(std_tensor)
    if weight is None or bias is None or std is None:
        return None
    std = std.reshape(owner._action_shape)
    log_std_sum = float(std_tensor.log().sum())
    weight_t, shape = weight.T, owner._action_shape

    def draw_continuous(hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean = (hidden @ weight_t + bias).reshape(hidden.shape[0], *shape)
        return draw_diag_normal(mean, std, log_std_sum, len(shape))

    return draw_continuous


def bounded_action_specs(owner: str, action_spec: Any) -> list[BoundedTensorSpec]:
    """The leaves of ``action_spec``, checked to be bounded specs.

    Args:
        owner: the network's name, for the message.
        action_spec: nest of specs of one action.

    Raises:
        UnsupportedActionSpaceError: a leaf is not a bounded spec, or there is none.
    """
    specs = nest.flatten(action_spec)
    if not specs or not all(isinstance(s, BoundedTensorSpec) for s in specs):
        raise UnsupportedActionSpaceError(
            f"{owner} needs bounded action specs (Gymnasium Discrete, "
            f"MultiDiscrete, MultiBinary, Box, or Dict/Tuple of them), got "
            f"{describe_spec(action_spec)}"
        )
    return specs


def head_options(*, owner: str, **options: Any) -> HeadOptions:
    """The :class:`HeadOptions` of ``options`` (its fields), ``std_transform`` checked
    (the message names ``owner``)."""
    if options["std_transform"] not in ("softplus", "exp"):
        raise invalid_value(
            f"{owner}.std_transform", options["std_transform"], "'softplus' or 'exp'"
        )
    return HeadOptions(**options)


def add_action_heads(
    owner: nn.Module, *, action_spec: Any, size: int, options: HeadOptions
) -> None:
    """Adds to ``owner`` the layers that turn ``[B, size]`` features into the distribution
    of an ``action_spec`` action (on ``owner`` itself for a single action, else one
    module per leaf in ``owner.heads``: the names an :class:`ActorDistributionNetwork`'s
    checkpoints have always used), and what :func:`action_distribution` reads back.

    Raises:
        UnsupportedActionSpaceError: an action leaf is not a bounded spec.
    """
    owner._specs = bounded_action_specs(type(owner).__name__, action_spec)
    owner._action_spec = action_spec
    owner._single = nest.is_single(action_spec)
    owner._options = options
    if owner._single:
        _add_head(owner, owner._specs[0], size, options)
        return
    owner.heads = nn.ModuleList()
    for spec in owner._specs:
        head = nn.Module()
        _add_head(head, spec, size, options)
        owner.heads.append(head)


def action_distribution(
    owner: nn.Module, hidden: torch.Tensor, mask: torch.Tensor | None
) -> td.Distribution:
    """The action distribution of the layers :func:`add_action_heads` added to ``owner``,
    from ``[B, size]`` features and an invalid-action mask (see
    :meth:`~alf.networks.action_mask.ActionMask.split`) or None: a distribution per
    action leaf, a :class:`~alf.utils.distributions.NestDistribution` of several."""
    options = owner._options
    if owner._single:
        return _head_distribution(owner, owner._specs[0], hidden, options, mask)
    dists = [
        _head_distribution(head, spec, hidden, options, None)
        for head, spec in zip(owner.heads, owner._specs, strict=True)
    ]
    return NestDistribution(dists=dists, structure=owner._action_spec)


def numpy_action_draw(owner: nn.Module) -> NumpyDraw | None:
    """The draw of :func:`action_distribution` in numpy for the layers
    :func:`add_action_heads` added to ``owner`` (see
    :meth:`ActorDistributionNetwork.numpy_draw`; None for several action leaves)."""
    if not owner._single:
        return None
    return _numpy_head_draw(owner, owner._specs[0], owner._options)


@configurable
class ActorDistributionNetwork(nn.Module):
    """Observation -> action distribution.

    One distribution per action leaf: a ``Discrete(n, start)`` action gives a
    ``Categorical`` (actions ``start .. start + n - 1``); a ``MultiDiscrete`` or
    ``MultiBinary`` action (any integer spec with a shape) gives a
    :class:`~alf.utils.distributions.MultiCategorical`, one categorical per element; a
    continuous (Box) action gives a diagonal Normal whose standard deviation is either a
    learned state-independent parameter or a state-dependent output, and with
    ``squash=True`` the Normal is pushed through ``tanh`` and scaled to the action
    bounds. A ``Dict`` or ``Tuple`` action (e.g. a hybrid of a Discrete and a Box) gives
    a :class:`~alf.utils.distributions.NestDistribution` of its leaves' distributions,
    all computed from the same encoder features: ``log_prob`` and ``entropy`` are summed
    over the leaves, samples and modes are nests.

    If the observation is a ``Dict`` with the key :func:`~alf.tensor_specs.action_mask_key`
    (default ``"action_mask"``), that entry is an invalid-action mask: it is not encoded
    (see :mod:`alf.networks.action_mask`), and invalid actions get probability zero.

    Args:
        input_spec: nest of :class:`TensorSpec` of one observation.
        action_spec: nest of :class:`BoundedTensorSpec` of one action.
        fc_layer_params: sizes of the hidden layers.
        activation: name of the hidden activation.
        state_dependent_std: whether the standard deviation is an output of the network.
        init_std: initial standard deviation (continuous actions).
        min_std: lower bound of the standard deviation.
        squash: squash the Normal with ``tanh`` into the action bounds.
        std_transform: how the std parameter (or output) becomes the standard deviation:
            ``"softplus"`` (the default) or ``"exp"`` (a log-std parameter, as
            Stable-Baselines3 and CleanRL have it: near std 1 an optimizer step moves
            it about 1.6x as far as softplus does). ``min_std`` is added either way;
            with ``state_dependent_std`` the log-std output is clamped to [-20, 2].
        input_preprocessors: passed to the :class:`EncodingNetwork` encoder when given
            (when None, a gin binding of ``EncodingNetwork`` may still set it).
        conv_layer_params: passed to the encoder like ``input_preprocessors``.
        lstm_hidden_size: passed to the encoder like ``input_preprocessors``. With it the
            network is recurrent: step it with :meth:`step`.

    Raises:
        UnsupportedActionSpaceError: an action leaf is not a bounded spec.
        ActionMaskError: the observation's mask does not fit the action space.
    """

    def __init__(
        self,
        *,
        input_spec: Any,
        action_spec: Any,
        fc_layer_params: Sequence[int] = (64, 64),
        activation: str = "tanh",
        state_dependent_std: bool = False,
        init_std: float = 1.0,
        min_std: float = 1e-3,
        squash: bool = False,
        std_transform: Literal["softplus", "exp"] = "softplus",
        input_preprocessors: Any = None,
        conv_layer_params: ConvLayerParams | None = None,
        lstm_hidden_size: int | Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        owner = "ActorDistributionNetwork"
        options = head_options(
            owner=owner,
            state_dependent_std=state_dependent_std,
            init_std=init_std,
            min_std=min_std,
            squash=squash,
            std_transform=std_transform,
        )
        bounded_action_specs(owner, action_spec)  # the error before building anything
        self._mask = ActionMask(owner=owner, input_spec=input_spec, action_spec=action_spec)
        self.encoder = EncodingNetwork(
            input_spec=self._mask.input_spec,
            fc_layer_params=fc_layer_params,
            activation=activation,
            **encoder_options(
                input_preprocessors=input_preprocessors,
                conv_layer_params=conv_layer_params,
                lstm_hidden_size=lstm_hidden_size,
            ),
        )
        add_action_heads(
            self, action_spec=action_spec, size=self.encoder.output_size, options=options
        )

    @property
    def state_spec(self) -> Any:
        """Specs of the recurrent state (``()`` when stateless)."""
        return self.encoder.state_spec

    @property
    def action_mask_key(self) -> str | None:
        """The observation key of the invalid-action mask, None without one."""
        return self._mask.key

    def action_mask(self, observation: Any) -> torch.Tensor | None:
        """The observation's invalid-action mask (see :meth:`ActionMask.split`), or None."""
        return self._mask.split(observation)[1]

    def forward(self, observation: Any) -> td.Distribution:
        """A distribution over ``[B, *action_shape]`` actions (stateless networks)."""
        observation, mask = self._mask.split(observation)
        return self.distribution(self.encoder(observation), mask)

    def step(self, observation: Any, state: Any) -> tuple[td.Distribution, Any]:
        """One time step: the action distribution and the new state (see
        :meth:`EncodingNetwork.step`)."""
        observation, mask = self._mask.split(observation)
        hidden, state = self.encoder.step(observation, state)
        return self.distribution(hidden, mask), state

    def unroll(
        self, observation: Any, state: Any, first: torch.Tensor
    ) -> tuple[td.Distribution, Any]:
        """Runs along ``[T, B, ...]`` observation sequences (see
        :meth:`EncodingNetwork.unroll`): a distribution of batch ``[T * B]`` (row
        ``t * B + b``) and the state after the last step."""
        observation, mask = self._mask.split(observation)
        hidden, state = self.encoder.unroll(observation, state, first)
        if mask is not None:
            mask = mask.reshape(-1, *mask.shape[2:])
        return self.distribution(hidden, mask), state

    def distribution(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> td.Distribution:
        """The action distribution from the encoder's ``[B, size]`` output ``hidden`` and
        the invalid-action mask as :meth:`action_mask` gives it (or None)."""
        return action_distribution(self, hidden, mask)

    def numpy_draw(self) -> NumpyDraw | None:
        """The head's draw in numpy (:mod:`alf.utils.numpy_draws`): a function from the
        encoder's ``[B, size]`` float32 output to the sampled actions and their
        log-probabilities, as ``sample`` and ``log_prob`` of :meth:`distribution`
        compute them (up to float rounding). It keeps numpy views of the head's weights
        and a copy of the standard deviation as it is now, so it is valid only while
        the parameters do not change (a collector's unroll). None where only
        torch can: several action leaves, an invalid-action mask, a ``MultiDiscrete``
        action, a squashed Normal or a state-dependent standard deviation, parameters
        that are not float32 on the CPU."""
        if self.action_mask_key is not None:
            return None
        return numpy_action_draw(self)
