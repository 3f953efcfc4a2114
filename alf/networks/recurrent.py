"""Recurrent layers and the helpers that step stateless and recurrent networks alike.

A network is *recurrent* when its ``state_spec`` is a non-empty nest of
:class:`~alf.tensor_specs.TensorSpec`. Recurrent networks are stepped one time step at a
time with ``step(observation, state) -> (output, new_state)`` on ``[B, ...]`` inputs; the
caller resets the state to zeros where an episode starts (FIRST steps).
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
]

LSTMState = tuple[tuple[torch.Tensor, torch.Tensor], ...]


class LSTMStack(nn.Module):
    """Stacked LSTM layers stepped one time step at a time.

    The state is a tuple with one ``(h, c)`` pair per layer, each ``[B, hidden_size]``
    float32. A zero state is the usual initial state of an LSTM, so stepping from zeros
    equals starting a fresh sequence.

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
                "on-policy actor-critic algorithms (ActorCriticAlgorithm, PPOAlgorithm) only."
            )
