"""Encoders of (nested) observations: optional per-input preprocessors or convolutions,
an MLP, optional LSTM layers and an optional last linear layer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optree
import torch
import torch.nn as nn

from alf import nest
from alf.config import configurable
from alf.networks.conv_encoder import ConvEncoder, ConvLayerParams
from alf.networks.layers import (
    Tanh,
    flat_input_size,
    make_activation,
    orthogonal_init,
)
from alf.networks.recurrent import LSTMStack
from alf.tensor_specs import zeros_from_spec

__all__ = [
    "ConcatEncoder",
    "EncodingNetwork",
    "Tanh",
    "encoder_options",
    "flat_input_size",
    "make_activation",
    "mlp_inference",
    "orthogonal_init",
]


def _flatten_leaves(inputs: Any) -> list[torch.Tensor]:
    return [x.reshape(x.shape[0], -1) for x in nest.flatten(inputs)]


def _output_size(module: nn.Module, input_spec: Any) -> int:
    size = getattr(module, "output_size", None)
    if isinstance(size, int):
        return size
    # A module given already built may live on an accelerator: probe it there.
    device = next((t.device for t in (*module.parameters(), *module.buffers())), None)
    with torch.no_grad():
        out = module(zeros_from_spec(input_spec, (2,), device))
    return int(out.reshape(2, -1).shape[1])


class ConcatEncoder(nn.Module):
    """Encodes each part of a nested input with its own preprocessor, then flattens and
    concatenates the results into ``[B, output_size]`` float32.

    ``preprocessors`` is a nest shaped like ``input_spec`` (or like a prefix of it: a
    leaf of ``preprocessors`` may stand for a whole sub-nest of the input) whose leaves
    are

    * ``None``: the input part is flattened as it is;
    * an ``nn.Module``: applied to the ``[B, ...]`` input part;
    * any other callable: a constructor, called as ``ctor(input_spec=part_spec)``
      (e.g. :class:`~alf.networks.ConvEncoder` or a ``functools.partial`` of it).

    A module's output size is its ``output_size`` attribute, or is measured by running it
    on a zero input.

    Args:
        input_spec: nest of specs of one input.
        preprocessors: the nest of preprocessors described above.
    """

    def __init__(self, *, input_spec: Any, preprocessors: Any) -> None:
        super().__init__()
        leaves, self._treespec = optree.tree_flatten(
            preprocessors, none_is_leaf=True, namespace="alf"
        )
        try:
            part_specs = self._treespec.flatten_up_to(input_spec)
        except (ValueError, TypeError) as err:
            raise ValueError(
                "input_preprocessors must be a nest shaped like the observation "
                f"{input_spec}, with a module, a constructor or None for each part; got "
                f"{preprocessors} ({err})"
            ) from None
        self.encoders = nn.ModuleList()
        self._is_identity: list[bool] = []
        size = 0
        for leaf, spec in zip(leaves, part_specs, strict=True):
            if leaf is None:
                module: nn.Module = nn.Identity()
                size += flat_input_size(spec)
            else:
                module = leaf if isinstance(leaf, nn.Module) else leaf(input_spec=spec)
                if not isinstance(module, nn.Module):
                    raise TypeError(
                        f"The preprocessor {leaf!r} built {type(module).__name__}, not an nn.Module"
                    )
                size += _output_size(module, spec)
            self.encoders.append(module)
            self._is_identity.append(leaf is None)
        self.output_size = size

    def forward(self, inputs: Any) -> torch.Tensor:
        """``[B, ...]`` input nest -> ``[B, output_size]``."""
        parts = self._treespec.flatten_up_to(inputs)
        outputs: list[torch.Tensor] = []
        for module, identity, part in zip(self.encoders, self._is_identity, parts, strict=True):
            if identity:
                outputs.extend(_flatten_leaves(part))
            else:
                y = module(part)
                outputs.append(y.reshape(y.shape[0], -1))
        outputs = [y if y.dtype.is_floating_point else y.float() for y in outputs]
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1)


@configurable
class EncodingNetwork(nn.Module):
    """Encodes a (nested) observation into ``[B, output_size]`` features.

    The layers, in order:

    1. the input encoding: by default every observation leaf is flattened and the leaves
       concatenated; with ``conv_layer_params``, a :class:`~alf.networks.ConvEncoder` on
       a single ``[C, H, W]`` image observation; with ``input_preprocessors``, a
       :class:`ConcatEncoder` (one preprocessor per part of a nested observation, e.g. a
       ``ConvEncoder`` for an image and ``None`` for a vector). Integer inputs are cast to
       float32, not scaled;
    2. fully connected layers of ``fc_layer_params``;
    3. with ``lstm_hidden_size``, one LSTM layer per size;
    4. with ``last_layer_size``, a final linear layer (no activation).

    A network without LSTM layers is stateless: ``net(observation)`` encodes a batch. With
    LSTM layers it is recurrent: :attr:`state_spec` is ``((h, c), ...)`` (one
    ``[hidden]`` float32 pair per layer) and it is stepped with :meth:`step`. ``step``
    works for stateless networks too (the state is ``()`` and is returned unchanged).

    Actor, value, critic and Q networks build their encoder from this class without
    passing ``conv_layer_params``, ``input_preprocessors`` or ``lstm_hidden_size`` unless
    given them, so gin bindings such as ``EncodingNetwork.conv_layer_params =
    %NATURE_CONV_LAYERS`` reach all of them (scope them, e.g.
    ``actor/EncodingNetwork.lstm_hidden_size``, with ``@actor/ActorDistributionNetwork``).

    Args:
        input_spec: nest of :class:`TensorSpec` of one observation.
        input_preprocessors: nest of preprocessors (see :class:`ConcatEncoder`).
        conv_layer_params: ``(out_channels, kernel_size, stride[, padding])`` per conv
            layer, applied to a single image observation; e.g.
            :data:`~alf.networks.NATURE_CONV_LAYERS`. Not together with
            ``input_preprocessors``.
        fc_layer_params: sizes of the hidden fully connected layers.
        activation: name of the activation of every hidden layer (conv and fc).
        lstm_hidden_size: None (no LSTM), or the hidden size of one LSTM layer, or a
            sequence of hidden sizes of stacked LSTM layers.
        last_layer_size: if given, a final linear layer of this size (no activation).
        last_layer_gain: orthogonal-init gain of that final layer.
    """

    def __init__(
        self,
        *,
        input_spec: Any,
        input_preprocessors: Any = None,
        conv_layer_params: ConvLayerParams | None = None,
        fc_layer_params: Sequence[int] = (64, 64),
        activation: str = "tanh",
        lstm_hidden_size: int | Sequence[int] | None = None,
        last_layer_size: int | None = None,
        last_layer_gain: float = 1.0,
    ) -> None:
        super().__init__()
        self._input_spec = input_spec
        self._single_input = len(nest.flatten(input_spec)) == 1
        if input_preprocessors is not None and conv_layer_params:
            raise ValueError(
                "Give EncodingNetwork either conv_layer_params (for a single image "
                "observation) or input_preprocessors (e.g. a ConvEncoder for the image "
                "part of a nested observation), not both"
            )
        self.input_encoder: nn.Module | None = None
        if input_preprocessors is not None:
            self.input_encoder = ConcatEncoder(
                input_spec=input_spec, preprocessors=input_preprocessors
            )
            size = self.input_encoder.output_size
        elif conv_layer_params:
            self.input_encoder = ConvEncoder(
                input_spec=input_spec,
                conv_layer_params=conv_layer_params,
                fc_layer_params=(),
                activation=activation,
            )
            size = self.input_encoder.output_size
        else:
            size = flat_input_size(input_spec)
        make_activation(activation)  # a clear error for an unknown name
        layers: list[nn.Module] = []
        for width in fc_layer_params:
            layers += [orthogonal_init(nn.Linear(size, width), 2**0.5), make_activation(activation)]
            size = width
        self.lstm: LSTMStack | None = None
        self.post: nn.Module | None = None
        if lstm_hidden_size is not None:
            sizes = (lstm_hidden_size,) if isinstance(lstm_hidden_size, int) else lstm_hidden_size
            self.lstm = LSTMStack(input_size=size, hidden_sizes=tuple(sizes))
            size = self.lstm.output_size
            if last_layer_size is not None:
                self.post = orthogonal_init(nn.Linear(size, last_layer_size), last_layer_gain)
                size = last_layer_size
        elif last_layer_size is not None:
            layers.append(orthogonal_init(nn.Linear(size, last_layer_size), last_layer_gain))
            size = last_layer_size
        self.mlp = nn.Sequential(*layers)
        self.output_size = size

    @property
    def state_spec(self) -> Any:
        """Nest of specs of the recurrent state: ``((h, c), ...)`` per LSTM layer, or
        ``()`` when stateless."""
        return () if self.lstm is None else self.lstm.state_spec

    @property
    def flattens_only(self) -> bool:
        """Whether the network only flattens and concatenates its input (no layers)."""
        return self.input_encoder is None and len(self.mlp) == 0 and self.lstm is None

    def encode_input(self, observation: Any) -> torch.Tensor:
        """The ``[B, in]`` float input of the MLP for a ``[B, ...]`` observation nest: the
        input preprocessors' output, or the flattened and concatenated leaves (what
        :class:`~alf.networks.fused_actor_value.FusedActorValue` evaluates from)."""
        if self.input_encoder is not None:
            return self.input_encoder(observation)
        if self._single_input:
            x = (
                observation
                if isinstance(observation, torch.Tensor)
                else nest.flatten(observation)[0]
            )
            x = x.reshape(x.shape[0], -1)
        else:
            x = torch.cat(_flatten_leaves(observation), dim=-1)
        return x if x.dtype.is_floating_point else x.float()

    def forward(self, observation: Any) -> torch.Tensor:
        """Encodes a ``[B, ...]`` observation nest into ``[B, output_size]`` (stateless
        networks; a recurrent one is stepped with :meth:`step`)."""
        if self.lstm is not None:
            raise TypeError("This EncodingNetwork has LSTM layers: call step(observation, state)")
        x = self.encode_input(observation)
        if torch.is_grad_enabled():
            return self.mlp(x)
        return mlp_inference(self.mlp, x)

    def step(self, observation: Any, state: Any) -> tuple[torch.Tensor, Any]:
        """One time step: a ``[B, ...]`` observation and the state (a nest of ``[B, ...]``
        tensors of :attr:`state_spec`) -> ``[B, output_size]`` and the new state.

        The caller resets the state to zeros where an episode starts."""
        if self.lstm is None:
            return self(observation), state
        x = self.encode_input(observation)
        x = self.mlp(x) if torch.is_grad_enabled() else mlp_inference(self.mlp, x)
        x, state = self.lstm(x, state)
        if self.post is not None:
            x = self.post(x)
        return x, state

    def unroll(self, observation: Any, state: Any, first: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Runs the network along ``[T, B, ...]`` observation sequences: the input
        encoding and MLP on all ``T * B`` rows at once, then the LSTM layers with one
        fused call each (:meth:`LSTMStack.unroll`), resetting the state where ``first``.

        Gives what stepping with :meth:`step` (state zeroed at FIRST steps) gives.

        Args:
            observation: nest of ``[T, B, ...]`` observations.
            state: the state before step 0 (``[B, ...]`` tensors of :attr:`state_spec`).
            first: ``[T, B]`` bool, True where an episode starts (the state is reset).

        Returns:
            ``[T * B, output_size]`` outputs (row ``t * B + b``) and the state after the
            last step.
        """
        length, batch = first.shape
        flat = nest.map_structure(lambda x: x.reshape(-1, *x.shape[2:]), observation)
        if self.lstm is None:
            return self(flat), state
        x = self.mlp(self.encode_input(flat))
        x, state = self.lstm.unroll(x.reshape(length, batch, -1), state, first)
        x = x.reshape(length * batch, -1)
        if self.post is not None:
            x = self.post(x)
        return x, state


def encoder_options(**options: Any) -> dict[str, Any]:
    """The ``options`` that are not None, to pass to :class:`EncodingNetwork`: leaving the
    others out lets gin bindings of ``EncodingNetwork`` supply them."""
    return {name: value for name, value in options.items() if value is not None}


def mlp_inference(mlp: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``mlp(x)`` without autograd, calling the kernels of its linear and tanh layers
    directly: for the small batches of collection, torch's per-module call machinery
    costs about as much as the arithmetic."""
    for layer in mlp:
        kind = type(layer)
        if kind is nn.Linear:
            x = torch.addmm(layer.bias, x, layer.weight.t())
        elif kind is Tanh:
            x = torch.tanh(x)
        else:
            x = layer(x)
    return x
