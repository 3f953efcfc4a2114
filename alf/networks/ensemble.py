"""Ensembles of identically shaped MLPs evaluated with one batched matmul per layer."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn as nn

from alf.networks.layers import make_activation

__all__ = ["EnsembleMLP"]


class EnsembleMLP(nn.Module):
    """``num_replicas`` independent MLPs of the same shape, computed together.

    Each layer's weights are one ``[R, in, out]`` tensor, so the twin critics of SAC or
    TD3 cost one ``baddbmm`` per layer instead of one matmul per critic and layer.
    Weights are initialised like ``nn.Linear`` (uniform in ``±1/sqrt(fan_in)``),
    independently for every replica.

    Args:
        input_size: size of the (flat) input.
        fc_layer_params: hidden layer sizes.
        output_size: size of each replica's output.
        num_replicas: number of MLPs.
        activation: name of the hidden activation.
    """

    def __init__(
        self,
        *,
        input_size: int,
        fc_layer_params: Sequence[int],
        output_size: int,
        num_replicas: int = 1,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
        self.num_replicas = num_replicas
        sizes = [input_size, *fc_layer_params, output_size]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(
                nn.Parameter(torch.empty(num_replicas, fan_in, fan_out).uniform_(-bound, bound))
            )
            self.biases.append(
                nn.Parameter(torch.empty(num_replicas, 1, fan_out).uniform_(-bound, bound))
            )
        self.activation = make_activation(activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, input_size]`` (shared by all replicas) or ``[R, B, input_size]`` ->
        ``[R, B, output_size]``."""
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.num_replicas, -1, -1)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(bias, x, weight)
            if i < last:
                x = self.activation(x)
        return x
