"""Convolutional encoders of image observations.

:data:`NATURE_CONV_LAYERS` is the torso of the Nature DQN (Mnih et al., 2015). It is also
a gin constant, so a config can write::

    EncodingNetwork.conv_layer_params = %NATURE_CONV_LAYERS
    EncodingNetwork.fc_layer_params = (512,)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gin
import torch
import torch.nn as nn

from alf import nest
from alf.config import configurable
from alf.networks.layers import make_activation, orthogonal_init
from alf.tensor_specs import TensorSpec

__all__ = ["NATURE_CONV_LAYERS", "ConvEncoder", "ConvLayerParams", "conv_output_shape"]

ConvLayerParams = Sequence[Sequence[int]]
"""``(out_channels, kernel_size, stride)`` or ``(out_channels, kernel_size, stride,
padding)`` per convolution."""

NATURE_CONV_LAYERS: tuple[tuple[int, int, int], ...] = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
"""The Nature-DQN convolutions (followed by a 512-unit fully connected layer there).
On an ``84 x 84`` image they give a ``64 x 7 x 7`` feature map."""

gin.constant("NATURE_CONV_LAYERS", NATURE_CONV_LAYERS)


def _parse_layer(params: Sequence[int]) -> tuple[int, int, int, int]:
    if len(params) not in (3, 4) or not all(isinstance(p, int) for p in params):
        raise ValueError(
            "Each conv layer must be (out_channels, kernel_size, stride) or "
            f"(out_channels, kernel_size, stride, padding) integers, got {params!r}"
        )
    channels, kernel, stride, padding = (*params, 0) if len(params) == 3 else params
    if channels < 1 or kernel < 1 or stride < 1 or padding < 0:
        raise ValueError(f"Invalid conv layer {params!r}")
    return channels, kernel, stride, padding


def conv_output_shape(
    image_shape: Sequence[int], conv_layer_params: ConvLayerParams
) -> tuple[int, int, int]:
    """The ``(channels, height, width)`` after the convolutions of ``conv_layer_params``
    on a ``(channels, height, width)`` (or ``(height, width)``) image.

    Raises:
        ValueError: a layer's kernel does not fit in its input.
    """
    if len(image_shape) == 2:
        image_shape = (1, *image_shape)
    channels, height, width = image_shape
    for params in conv_layer_params:
        out_channels, kernel, stride, padding = _parse_layer(params)
        height = (height + 2 * padding - kernel) // stride + 1
        width = (width + 2 * padding - kernel) // stride + 1
        if height < 1 or width < 1:
            raise ValueError(
                f"Conv layer {tuple(params)} does not fit the image: the image "
                f"{tuple(image_shape)} shrinks to nothing with conv layers "
                f"{[tuple(p) for p in conv_layer_params]}"
            )
        channels = out_channels
    return channels, height, width


def _single_image_spec(input_spec: Any) -> TensorSpec:
    leaves = nest.flatten(input_spec)
    if len(leaves) != 1 or len(leaves[0].shape) not in (2, 3):
        raise ValueError(
            "Convolutions need a single image observation of shape [C, H, W] (or [H, W]), "
            f"got {input_spec}. For nested observations, give the image its own encoder "
            "with input_preprocessors, e.g. {'image': ConvEncoder, 'vector': None}."
        )
    return leaves[0]


@configurable
class ConvEncoder(nn.Module):
    """``[B, C, H, W]`` images -> convolutions -> flattened ``[B, output_size]`` features,
    optionally followed by fully connected layers.

    Integer (e.g. ``uint8``) images are cast to float32 but not scaled: scaling to
    ``[0, 1]`` is the job of the ``ImageScale`` data transformer. A ``[H, W]`` image is
    treated as one channel. Weights are orthogonal with gain ``sqrt(2)``, biases zero.

    It can encode the image leaf of a nested observation as one of
    :class:`~alf.networks.EncodingNetwork`'s ``input_preprocessors``, where it is called
    as ``ConvEncoder(input_spec=image_spec)``.

    Args:
        input_spec: spec of one image (or a nest with exactly one image leaf).
        conv_layer_params: ``(out_channels, kernel_size, stride[, padding])`` per layer;
            by default :data:`NATURE_CONV_LAYERS`.
        fc_layer_params: sizes of fully connected layers after the flattened features.
        activation: name of the activation after every layer.
        channels_last: the images are ``[H, W, C]`` (e.g. a board game's planes, as
            PettingZoo's classic games give them): they are permuted to ``[C, H, W]``.
    """

    def __init__(
        self,
        *,
        input_spec: Any,
        conv_layer_params: ConvLayerParams = NATURE_CONV_LAYERS,
        fc_layer_params: Sequence[int] = (),
        activation: str = "relu",
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        spec = _single_image_spec(input_spec)
        if not conv_layer_params:
            raise ValueError("conv_layer_params must name at least one conv layer")
        shape = tuple(spec.shape)
        if channels_last:
            if len(shape) != 3:
                raise ValueError(
                    f"ConvEncoder.channels_last needs [H, W, C] images, got the shape {shape}"
                )
            shape = (shape[2], shape[0], shape[1])
        self._channels_last = channels_last
        self._add_channel = len(shape) == 2
        out_shape = conv_output_shape(shape, conv_layer_params)
        layers: list[nn.Module] = []
        in_channels = 1 if self._add_channel else shape[0]
        for params in conv_layer_params:
            channels, kernel, stride, padding = _parse_layer(params)
            conv = nn.Conv2d(in_channels, channels, kernel, stride=stride, padding=padding)
            layers += [orthogonal_init(conv, 2**0.5), make_activation(activation)]
            in_channels = channels
        layers.append(nn.Flatten())
        size = out_shape[0] * out_shape[1] * out_shape[2]
        for width in fc_layer_params:
            layers += [orthogonal_init(nn.Linear(size, width), 2**0.5), make_activation(activation)]
            size = width
        self.layers = nn.Sequential(*layers)
        self.feature_map_shape = out_shape
        self.output_size = size

    def forward(self, image: Any) -> torch.Tensor:
        """``[B, C, H, W]`` (or ``[B, H, W]``) images -> ``[B, output_size]``."""
        x = image if isinstance(image, torch.Tensor) else nest.flatten(image)[0]
        if not x.dtype.is_floating_point:
            x = x.float()
        if self._add_channel:
            x = x.unsqueeze(1)
        elif self._channels_last:
            x = x.permute(0, 3, 1, 2)
        return self.layers(x)
