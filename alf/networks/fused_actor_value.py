"""An actor and a value network on the same observation, evaluated together for collection.

Collection calls the policy once per batched environment step on a small batch, where
the cost is the number of torch operations rather than their arithmetic. When the actor
(:class:`~alf.networks.ActorDistributionNetwork`) and the value network
(:class:`~alf.networks.ValueNetwork`) are plain MLPs of the same hidden sizes and
activation on the same observation, :class:`FusedActorValue` computes both with one
operation per layer: the first layer as one matmul over the two networks' weights
concatenated, each later hidden layer as one batched matmul over the two stacked (as
:class:`~alf.networks.EnsembleMLP` does for twin critics). It owns no parameters: the
fused weights are built from the networks' own once per :meth:`FusedActorValue.session`
(a collector's unroll, during which the parameters stay fixed) and dropped at its end,
so parameters and checkpoints are those of the two networks alone. (Version counters
cannot tell when parameters changed: torch's fused Adam updates them without a bump.)
It computes what the two networks compute, up to float rounding (the batched matmul
may sum in another order).

:meth:`FusedActorValue.sample` also draws the actions and their log-probabilities. With
``numpy=True`` (the default) it does all of it in numpy where it can (a tanh or ReLU
MLP, float32 parameters and observations on the CPU, a ``Discrete`` or an unsquashed
``Box`` action with a state-independent standard deviation: see
:meth:`~alf.networks.ActorDistributionNetwork.numpy_draw`): for the few rows of a
collection step numpy's per-operation cost is about a microsecond against torch's few,
and a 2x64 actor and value with their draw take about 55-70 us instead of 100-120 at
16 environments (``benchmarks/README.md``). The noise still comes from torch's generator
in the same order, so a seeded run draws the same actions as the torch path up to float
rounding (:mod:`alf.utils.numpy_draws`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.distributions as td
import torch.nn as nn

from alf.networks.actor_distribution_network import ActorDistributionNetwork, NumpyDraw
from alf.networks.encoding_network import EncodingNetwork
from alf.networks.layers import Tanh, is_tracing
from alf.networks.value_network import ValueNetwork
from alf.utils.distributions import sample
from alf.utils.numpy_draws import host_array

__all__ = ["FusedActorValue", "fuse_actor_value", "why_not_fusable"]


def _activate(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` for an activation, tanh without the module call (as
    :func:`~alf.networks.encoding_network.mlp_inference`)."""
    if type(layer) is Tanh:
        return torch.tanh(x)
    return layer(x)


def _numpy_activation(layer: nn.Module) -> Callable[[np.ndarray], Any] | None:
    """``layer`` applied in place to a float32 array, for tanh and ReLU (None for others)."""
    if type(layer) is Tanh:
        return lambda x: np.tanh(x, out=x)
    if type(layer) is nn.ReLU:
        return lambda x: np.maximum(x, 0, out=x)
    return None


class _NumpyActorValue:
    """The fused networks and the actor's draw in numpy, from the parameters of one
    session (see :meth:`FusedActorValue.sample`); :meth:`build` returns None where numpy
    cannot compute them."""

    def __init__(
        self,
        *,
        layers: list[tuple[np.ndarray, np.ndarray, Callable[[np.ndarray], Any]]],
        value_last: tuple[np.ndarray, np.ndarray],
        draw: NumpyDraw,
    ) -> None:
        self.layers = layers  # the first layer [in, 2w]; then [2, w, w] and [2, 1, w]
        self.value_last = value_last
        self.draw = draw

    @staticmethod
    def build(fused: FusedActorValue) -> _NumpyActorValue | None:
        """From ``fused``'s weights of the open session (views, valid while the
        parameters do not change), or None where numpy cannot compute them."""
        activations = [_numpy_activation(a) for a in fused._activations]
        draw = fused.actor.numpy_draw()
        if draw is None or any(a is None for a in activations):
            return None
        with torch.no_grad():
            weights = fused._fused_weights()
        arrays = [host_array(t) for pair in weights for t in pair]
        last = fused._value_last
        value_last = (host_array(last.weight), host_array(last.bias))
        if any(a is None for a in (*arrays, *value_last)):
            return None
        layers = list(zip(arrays[0::2], arrays[1::2], activations, strict=True))
        value_last = (value_last[0].T, value_last[1])
        return _NumpyActorValue(layers=layers, value_last=value_last, draw=draw)

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Actions, their log-probabilities and the values of ``[B, in]`` inputs."""
        batch = x.shape[0]
        (w0, b0, activate0), *rest = self.layers
        h = x @ w0
        h += b0
        activate0(h)
        h = h.reshape(batch, 2, -1).transpose(1, 0, 2)  # [2, B, w]: actor, value
        for w, b, activate in rest:
            h = np.matmul(h, w)
            h += b
            activate(h)
        weight, bias = self.value_last
        value = h[1] @ weight
        value += bias
        action, log_prob = self.draw(h[0])
        return action, log_prob, value[:, 0]


def _split_mlp(
    encoder: EncodingNetwork,
) -> tuple[list[nn.Linear], list[nn.Module], list[nn.Module]]:
    """The hidden linear layers, their activations and the layers after them."""
    layers = list(encoder.mlp)
    linears: list[nn.Linear] = []
    activations: list[nn.Module] = []
    while len(layers) >= 2 and type(layers[0]) is nn.Linear and type(layers[1]) is not nn.Linear:
        linears.append(layers.pop(0))
        activations.append(layers.pop(0))
    return linears, activations, layers


def _plain(encoder: EncodingNetwork) -> bool:
    return encoder.input_encoder is None and encoder.lstm is None and encoder.post is None


def why_not_fusable(actor: nn.Module, value: nn.Module) -> str | None:
    """Why ``actor`` and ``value`` cannot be evaluated by :class:`FusedActorValue` (None
    if they can): they must be an :class:`ActorDistributionNetwork` without an
    invalid-action mask and a :class:`ValueNetwork` (exactly these classes), both plain
    MLPs (no preprocessors, convolutions or LSTM) with the same hidden layer sizes and
    activation."""
    if type(actor) is not ActorDistributionNetwork or type(value) is not ValueNetwork:
        return "the networks are not an ActorDistributionNetwork and a ValueNetwork"
    if actor.action_mask_key is not None:
        return "the actor takes an invalid-action mask (the value network sees it as input)"
    if not (_plain(actor.encoder) and _plain(value.encoder)):
        return "a network has input preprocessors, convolutions or LSTM layers"
    a_linears, a_acts, a_rest = _split_mlp(actor.encoder)
    v_linears, v_acts, v_rest = _split_mlp(value.encoder)
    if not a_linears or a_rest or len(v_rest) != 1 or type(v_rest[0]) is not nn.Linear:
        return "a network is not hidden layers with activations (and the value's last layer)"
    if [lin.weight.shape for lin in a_linears] != [lin.weight.shape for lin in v_linears]:
        return "the networks' hidden layer sizes differ"
    for a, v in zip(a_acts, v_acts, strict=False):
        if type(a) is not type(v) or a.extra_repr() != v.extra_repr():
            return "the networks' activations differ"
    if any(list(a.parameters()) for a in (*a_acts, *v_acts)):
        return "an activation has parameters"
    return None


class FusedActorValue:
    """Evaluates an actor and a value network together, one operation per layer (see the
    module's docstring); build it with :func:`fuse_actor_value`.

    Only for inference and inside a :meth:`session` (the span of a collector's unroll,
    during which the parameters do not change): elsewhere :meth:`applies` is False and
    the caller calls the two networks as usual.

    Args:
        actor: an :class:`ActorDistributionNetwork` that :func:`why_not_fusable` accepts
            with ``value``.
        value: the :class:`ValueNetwork`.
        numpy: let :meth:`sample` compute in numpy where it can (see the module's
            docstring); False always computes with torch.

    Raises:
        ValueError: the networks cannot be fused (the reason).
    """

    def __init__(
        self, *, actor: ActorDistributionNetwork, value: ValueNetwork, numpy: bool = True
    ) -> None:
        reason = why_not_fusable(actor, value)
        if reason is not None:
            raise ValueError(f"cannot fuse the actor and value networks: {reason}")
        self.actor = actor
        self.value = value
        a_linears, self._activations, _ = _split_mlp(actor.encoder)
        v_linears, _, (v_last,) = _split_mlp(value.encoder)
        self._pairs = list(zip(a_linears, v_linears, strict=True))
        self._value_last: nn.Linear = v_last
        self.numpy = numpy
        self._depth = 0  # nested sessions open
        self._weights: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        # This session's numpy evaluation: None not built yet, False not possible.
        self._numpy_eval: _NumpyActorValue | None | bool = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_depth"], state["_weights"], state["_numpy_eval"] = 0, None, None  # no session
        return state

    def _drop_session(self) -> None:
        self._weights, self._numpy_eval = None, None

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """A span of calls during which the networks' parameters do not change (a
        collector's unroll): the fused weights are built on the first call and dropped
        when the outermost session ends. Sessions nest."""
        if self._depth == 0:
            self._drop_session()
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._drop_session()

    def applies(self) -> bool:
        """Whether the fused evaluation may be used now: inside a :meth:`session`,
        without autograd and outside tracing."""
        return self._depth > 0 and not torch.is_grad_enabled() and not is_tracing()

    def _fused_weights(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The fused weights and biases of every hidden layer, built from the networks'
        parameters once per session (parameters may change in place without a trace,
        e.g. by a fused optimizer, so nothing is kept across sessions)."""
        if self._depth == 0:
            raise RuntimeError("FusedActorValue is evaluated only inside its session()")
        if self._weights is None:
            (a0, v0), *rest = self._pairs
            weights = [
                (
                    torch.cat([a0.weight, v0.weight]).t(),  # [in, 2 * width]
                    torch.cat([a0.bias, v0.bias]),
                )
            ]
            for a, v in rest:  # [2, in, out] and [2, 1, out]
                weights.append(
                    (
                        torch.stack([a.weight.t(), v.weight.t()]),
                        torch.stack([a.bias, v.bias]).unsqueeze(1),
                    )
                )
            self._weights = weights
        return self._weights

    def __call__(self, observation: Any) -> tuple[td.Distribution, torch.Tensor]:
        """The actor's action distribution and the ``[B]`` values of a ``[B, ...]``
        observation nest."""
        return self._evaluate(self.actor.encoder.encode_input(observation))

    def _evaluate(self, x: torch.Tensor) -> tuple[td.Distribution, torch.Tensor]:
        """:meth:`__call__` of the ``[B, in]`` encoded observations."""
        batch = x.shape[0]
        (w0, b0), *rest = self._fused_weights()
        x = _activate(self._activations[0], torch.addmm(b0, x, w0))
        x = x.view(batch, 2, -1).transpose(0, 1)  # [2, B, width]: actor, value
        for (w, b), activation in zip(rest, self._activations[1:], strict=True):
            x = _activate(activation, torch.baddbmm(b, x, w))
        last = self._value_last
        value = torch.addmm(last.bias, x[1], last.weight.t()).squeeze(-1)
        return self.actor.distribution(x[0], None), value

    def sample(self, observation: Any) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """Draws actions for a ``[B, ...]`` observation nest: the actions, their ``[B]``
        log-probabilities and the ``[B]`` values, in numpy where it can (see the
        module's docstring), else from :meth:`__call__`'s distribution."""
        if self._numpy_eval is None:
            self._numpy_eval = (self.numpy and _NumpyActorValue.build(self)) or False
        x = self.actor.encoder.encode_input(observation)
        array = host_array(x) if self._numpy_eval else None
        if array is not None:
            action, log_prob, value = self._numpy_eval(array)
            return torch.from_numpy(action), torch.from_numpy(log_prob), torch.from_numpy(value)
        dist, value = self._evaluate(x)
        action = sample(dist)
        return action, dist.log_prob(action), value


def fuse_actor_value(
    actor: nn.Module, value: nn.Module, *, numpy: bool = True
) -> FusedActorValue | None:
    """A :class:`FusedActorValue` of the two networks (``numpy``: see there), or None if
    :func:`why_not_fusable` gives a reason."""
    if why_not_fusable(actor, value) is not None:
        return None
    return FusedActorValue(actor=actor, value=value, numpy=numpy)
