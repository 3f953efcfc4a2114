"""Building blocks shared by the networks: activations, initialisation, input sizes."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from alf import nest

__all__ = ["Tanh", "flat_input_size", "is_tracing", "make_activation", "orthogonal_init"]


def is_tracing() -> bool:
    """Whether the code runs under ``torch.jit.trace`` (also the legacy ONNX exporter) or
    ``torch.export``/``torch.compile``: numpy fast paths, invisible to a trace, must then
    give way to torch operations (see :mod:`alf.export`)."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling()


class Tanh(nn.Tanh):
    """``torch.tanh`` as a module (the activation named ``"tanh"``).

    ALF once computed its forward pass with numpy, when a torch CPU build's scalar tanh
    kernel made small tanh MLPs slow; with torch 2.13 ``torch.tanh`` is as fast or
    faster at every batch size ALF uses (``benchmarks/collection/tanh.py``), so it is plain torch.
    """


_ACTIVATIONS = {
    "tanh": Tanh,
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


def orthogonal_init(layer: nn.Module, gain: float) -> nn.Module:
    """Orthogonal weights with ``gain`` and zero bias (the usual choice for PPO/A2C), for
    an ``nn.Linear`` or a convolution."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer
