"""Building blocks shared by the networks: activations, initialisation, input sizes."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn as nn

from alf import nest

__all__ = ["Tanh", "flat_input_size", "is_tracing", "make_activation", "orthogonal_init"]


def is_tracing() -> bool:
    """Whether the code runs under ``torch.jit.trace`` (also the legacy ONNX exporter) or
    ``torch.export``/``torch.compile``: numpy fast paths, invisible to a trace, must then
    give way to torch operations (see :mod:`alf.export`)."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling()


class _NumpyTanh(torch.autograd.Function):
    """tanh whose forward runs numpy's vectorised kernel (CPU float32)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = torch.from_numpy(np.tanh(x.detach().numpy()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


class Tanh(nn.Module):
    """``tanh`` that is several times faster than ``torch.tanh`` on CPU float32.

    Some torch CPU builds ship a scalar (unvectorised) ``tanh`` kernel, which dominates
    the cost of small tanh MLPs: here 41 us for a 256x64 tensor against 3.5 us for numpy's.
    This module computes the forward pass with numpy on CPU float32 tensors (same values
    to one ulp) and uses torch's fused ``tanh_backward``; anywhere else (and when traced
    for export) it is ``torch.tanh``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            x.device.type != "cpu"
            or x.dtype != torch.float32
            or not x.is_contiguous()
            or is_tracing()
        ):
            return torch.tanh(x)
        if torch.is_grad_enabled() and x.requires_grad:
            return _NumpyTanh.apply(x)
        return torch.from_numpy(np.tanh(x.detach().numpy()))


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
