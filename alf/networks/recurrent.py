"""Recurrent layers and the helpers that step stateless and recurrent networks alike.

A network is *recurrent* when its ``state_spec`` is a non-empty nest of
:class:`~alf.tensor_specs.TensorSpec`. Recurrent networks are stepped one time step at a
time with ``step(observation, state) -> (output, new_state)`` on ``[B, ...]`` inputs; the
caller resets the state to zeros where an episode starts (FIRST steps). Training runs
them along whole ``[T, B, ...]`` sequences with ``unroll(observation, state, first)``,
which resets the state itself where ``first`` is set and gives the same outputs as
stepping (:func:`unroll_network` does either for stateless and recurrent networks alike).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from alf import nest
from alf.tensor_specs import TensorSpec

__all__ = [
    "LSTMStack",
    "is_recurrent",
    "require_stateless",
    "state_spec_of",
    "step_network",
    "unroll_network",
]

LSTMState = tuple[tuple[torch.Tensor, torch.Tensor], ...]


class LSTMStack(nn.Module):
    """Stacked LSTM layers, stepped one time step at a time (:meth:`forward`, for
    collection) or run along whole sequences (:meth:`unroll`, for training).

    The state is a tuple with one ``(h, c)`` pair per layer, each ``[B, hidden_size]``
    float32. A zero state is the usual initial state of an LSTM, so stepping from zeros
    equals starting a fresh sequence. Both paths use the same ``nn.LSTMCell`` weights
    and give the same outputs (up to float rounding).

    Args:
        input_size: size of the ``[B, input_size]`` input.
        hidden_sizes: hidden size of each layer.
    """

    def __init__(self, *, input_size: int, hidden_sizes: Sequence[int]) -> None:
        super().__init__()
        if not hidden_sizes or any(int(h) < 1 for h in hidden_sizes):
            raise ValueError(f"LSTM hidden sizes must be positive, got {tuple(hidden_sizes)}")
        cells = []
        for hidden in hidden_sizes:
            cells.append(nn.LSTMCell(input_size, int(hidden)))
            input_size = int(hidden)
        self.cells = nn.ModuleList(cells)
        self.output_size = input_size
        self._state_spec = tuple(
            (TensorSpec((int(h),)), TensorSpec((int(h),))) for h in hidden_sizes
        )

    @property
    def state_spec(self) -> tuple[tuple[TensorSpec, TensorSpec], ...]:
        """``((h_spec, c_spec), ...)``, one pair per layer."""
        return self._state_spec

    def forward(self, x: torch.Tensor, state: LSTMState) -> tuple[torch.Tensor, LSTMState]:
        """One time step: ``[B, input_size]`` and the state -> ``[B, output_size]`` (the
        last layer's ``h``) and the new state."""
        if len(state) != len(self.cells):
            raise ValueError(
                f"Expected the state of {len(self.cells)} LSTM layers, got {len(state)}"
            )
        new_state = []
        for cell, (h, c) in zip(self.cells, state, strict=True):
            h, c = cell(x, (h, c))
            new_state.append((h, c))
            x = h
        return x, tuple(new_state)

    def _params(self, cell: nn.LSTMCell) -> list[torch.Tensor]:
        return [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]

    def unroll(
        self, x: torch.Tensor, state: LSTMState, first: torch.Tensor
    ) -> tuple[torch.Tensor, LSTMState]:
        """Runs the layers along ``[T, B, input_size]`` sequences with one fused LSTM call
        per layer; the state entering step ``t`` of sequence ``b`` is zero where
        ``first[t, b]`` (an episode starts there), as stepping with
        :meth:`forward` and zeroing the state at FIRST steps would give.

        Without a reset after the first row the sequences run as they are. Otherwise each
        sequence is split at its resets into segments and all the segments are run as
        one packed batch (a segment starts from zeros, or from ``state`` when it opens its
        sequence; the packed layout holds exactly ``T * B`` rows, no padding).

        Args:
            x: ``[T, B, input_size]`` inputs.
            state: the state before step 0 (``[B, hidden]`` tensors).
            first: ``[T, B]`` bool, True where the state is reset before the step.

        Returns:
            ``[T, B, output_size]`` outputs (the last layer's ``h``) and the state after
            step ``T - 1``.
        """
        if len(state) != len(self.cells):
            raise ValueError(
                f"Expected the state of {len(self.cells)} LSTM layers, got {len(state)}"
            )
        length, batch = first.shape
        keep = ~first[0]
        state = nest.zero_rows(state, keep)
        if length == 1 or not bool(first[1:].any()):
            new_state = []
            for cell, (h, c) in zip(self.cells, state, strict=True):
                # torch.lstm is the kernel behind nn.LSTM (cuDNN on GPUs).
                x, h, c = torch.lstm(
                    x,
                    (h[None], c[None]),
                    self._params(cell),
                    True,
                    1,
                    0.0,
                    self.training,
                    False,
                    False,
                )
                new_state.append((h[0], c[0]))
            return x, tuple(new_state)
        return self._unroll_segments(x, state, first)

    def _unroll_segments(
        self, x: torch.Tensor, state: LSTMState, first: torch.Tensor
    ) -> tuple[torch.Tensor, LSTMState]:
        length, batch = first.shape
        device = x.device
        # Elements in sequence-major order (b * T + t); a segment starts at t = 0 and at
        # every reset.
        starts = first.t().reshape(-1).clone()
        starts[::length] = True
        segment = starts.long().cumsum(0) - 1
        start_index = starts.nonzero().squeeze(1)
        num_segments = start_index.numel()
        position = torch.arange(length * batch, device=device) - start_index[segment]
        lengths = torch.bincount(segment, minlength=num_segments)
        # PackedSequence layout: segments sorted by decreasing length; the rows of time
        # step p are the batch_sizes[p] segments longer than p, in that order.
        lengths_sorted, order = lengths.sort(descending=True, stable=True)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(num_segments, device=device)
        max_length = int(lengths_sorted[0])
        ends = torch.bincount(lengths, minlength=max_length + 1)[:max_length]
        batch_sizes = num_segments - ends.cumsum(0)
        offsets = batch_sizes.cumsum(0) - batch_sizes
        row = offsets[position] + rank[segment]
        data = x.transpose(0, 1).reshape(length * batch, -1)
        packed = torch.empty_like(data).index_copy(0, row, data)
        opening = rank[segment[::length]]  # sorted index of each sequence's first segment
        closing = rank[segment[length - 1 :: length]]  # and of its last one
        batch_sizes = batch_sizes.cpu()
        new_state = []
        for cell, (h, c) in zip(self.cells, state, strict=True):
            h0 = h.new_zeros(num_segments, h.shape[1]).index_copy(0, opening, h)
            c0 = c.new_zeros(num_segments, c.shape[1]).index_copy(0, opening, c)
            packed, h_n, c_n = torch.lstm(
                packed,
                batch_sizes,
                (h0[None], c0[None]),
                self._params(cell),
                True,
                1,
                0.0,
                self.training,
                False,
            )
            new_state.append((h_n[0, closing], c_n[0, closing]))
        out = packed[row].reshape(batch, length, -1).transpose(0, 1)
        return out, tuple(new_state)


def state_spec_of(network: nn.Module) -> Any:
    """The ``state_spec`` of ``network``, ``()`` for a network without one."""
    return getattr(network, "state_spec", ())


def is_recurrent(network: nn.Module) -> bool:
    """Whether ``network`` has a non-empty ``state_spec``."""
    return len(nest.flatten(state_spec_of(network))) > 0


def step_network(network: nn.Module, inputs: Any, state: Any) -> tuple[Any, Any]:
    """``network.step(inputs, state)`` for a recurrent network, ``(network(inputs),
    state)`` for a stateless one (which need not have a ``step`` method)."""
    if is_recurrent(network):
        return network.step(inputs, state)
    return network(inputs), state


def unroll_network(
    network: nn.Module, inputs: Any, state: Any, first: torch.Tensor
) -> tuple[Any, Any]:
    """Runs ``network`` along ``[T, B, ...]`` sequences of ``inputs``.

    A recurrent network's ``unroll(inputs, state, first)`` (the state is reset where
    ``first``); a stateless network is called once on the ``T * B`` rows. Either way the
    output covers the rows in time-major order (row ``t * B + b``), e.g. a distribution
    of batch ``[T * B]``, and ``state`` is the state after the last step (``()`` for a
    stateless network).
    """
    if is_recurrent(network):
        return network.unroll(inputs, state, first)
    flat = nest.map_structure(lambda x: x.reshape(-1, *x.shape[2:]), inputs)
    return network(flat), state


def require_stateless(algorithm: str, **networks: nn.Module) -> None:
    """Raises a clear ``ValueError`` if any of ``networks`` is recurrent.

    Args:
        algorithm: name of the algorithm, for the message.
        **networks: the networks to check, by the name of their constructor argument.
    """
    for name, network in networks.items():
        if is_recurrent(network):
            raise ValueError(
                f"{algorithm} does not support recurrent networks, but its {name} "
                f"({type(network).__name__}) has the state {state_spec_of(network)} "
                "(e.g. from lstm_hidden_size). Recurrent networks are supported by the "
                "on-policy actor-critic algorithms (ActorCriticAlgorithm, PPOAlgorithm, "
                "AppoAlgorithm); SacAlgorithm and DqnAlgorithm take a recurrent observation "
                "encoder instead (encoder_ctor, e.g. an EncodingNetwork with lstm_hidden_size)."
            )
