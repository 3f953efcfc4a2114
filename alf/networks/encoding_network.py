"""Multi-layer perceptron encoders over (nested) observations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from alf import nest
from alf.config import configurable

__all__ = ["EncodingNetwork", "make_activation", "flat_input_size"]

_ACTIVATIONS = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "leaky_relu": nn.LeakyReLU,
}


def make_activation(name: str) -> nn.Module:
    """An activation module by name (``tanh``, ``relu``, ``elu``, ``gelu``, ``silu``...)."""
    try:
        return _ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(
            f"Unknown activation '{name}'; choose one of {sorted(_ACTIVATIONS)}"
        ) from None


def flat_input_size(input_spec: Any) -> int:
    """Total number of scalars in one element of the (nested) ``input_spec``."""
    return sum(spec.numel for spec in nest.flatten(input_spec))


def orthogonal_init(layer: nn.Linear, gain: float) -> nn.Linear:
    """Orthogonal weights with ``gain`` and zero bias (the usual choice for PPO/A2C)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


@configurable
class EncodingNetwork(nn.Module):
    """Flattens and concatenates every observation leaf, then applies an MLP.

    Args:
        input_spec: nest of :class:`TensorSpec` of one observation.
        fc_layer_params: sizes of the hidden layers.
        activation: name of the hidden activation.
        last_layer_size: if given, a final linear layer of this size (no activation).
        last_layer_gain: orthogonal-init gain of that final layer.
    """

    def __init__(
        self,
        *,
        input_spec: Any,
        fc_layer_params: Sequence[int] = (64, 64),
        activation: str = "tanh",
        last_layer_size: int | None = None,
        last_layer_gain: float = 1.0,
    ) -> None:
        super().__init__()
        self._input_spec = input_spec
        self._single_input = len(nest.flatten(input_spec)) == 1
        layers: list[nn.Module] = []
        size = flat_input_size(input_spec)
        for width in fc_layer_params:
            layers += [orthogonal_init(nn.Linear(size, width), 2**0.5), make_activation(activation)]
            size = width
        if last_layer_size is not None:
            layers.append(orthogonal_init(nn.Linear(size, last_layer_size), last_layer_gain))
            size = last_layer_size
        self.mlp = nn.Sequential(*layers)
        self.output_size = size

    def forward(self, observation: Any) -> torch.Tensor:
        """Encodes a ``[B, ...]`` observation nest into ``[B, output_size]``."""
        if self._single_input:
            x = (
                observation
                if isinstance(observation, torch.Tensor)
                else nest.flatten(observation)[0]
            )
            x = x.reshape(x.shape[0], -1)
        else:
            leaves = nest.flatten(observation)
            x = torch.cat([leaf.reshape(leaf.shape[0], -1) for leaf in leaves], dim=-1)
        if not x.dtype.is_floating_point:
            x = x.float()
        return self.mlp(x)
