"""Invalid-action masks: where a network finds them and how they reach its logits.

An environment with invalid actions returns a ``Dict`` observation with a boolean (or
0/1) entry under :func:`~alf.tensor_specs.action_mask_key` (default ``"action_mask"``),
true for the actions allowed at that step: ``[n]`` for a ``Discrete(n)`` action, and the
elements' values concatenated (``[sum(nvec)]``) for a ``MultiDiscrete(nvec)`` one (a
``MultiBinary(k)`` counts as ``MultiDiscrete([2] * k)``).

The networks that choose discrete actions (:class:`ActorDistributionNetwork`,
:class:`QNetwork`) strip that key from their input spec before building their encoder,
so the mask is **not** an input feature: it only sets the logits of invalid actions to
the most negative finite value (probability zero in sampling, greedy modes, log-probs and
entropies) or, for Q values, is handed to the algorithm (:meth:`ActionMask.split`) for its
argmax and maximum. Other networks (e.g. the value network) see the mask as an ordinary
observation part.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from alf import nest
from alf.errors import UserError
from alf.tensor_specs import BoundedTensorSpec, action_mask_key, describe_spec

__all__ = ["ActionMask", "ActionMaskError", "discrete_sizes"]


class ActionMaskError(UserError, ValueError):
    """An observation's action mask does not fit the action space."""


def discrete_sizes(spec: BoundedTensorSpec) -> np.ndarray:
    """The number of values of each element of a discrete spec (shaped like the spec)."""
    low = np.broadcast_to(np.asarray(spec.minimum), spec.shape)
    high = np.broadcast_to(np.asarray(spec.maximum), spec.shape)
    return (high - low + 1).astype(np.int64)


class ActionMask:
    """The action mask of a network's observations, if it has one.

    Args:
        owner: the network's name, for error messages.
        input_spec: nest of specs of one observation.
        action_spec: nest of specs of one action.

    Raises:
        ActionMaskError: the observation has a mask but the action is not one discrete
            spec, or the mask's shape does not fit it.
    """

    def __init__(self, *, owner: str, input_spec: Any, action_spec: Any) -> None:
        key = action_mask_key()
        self.key = key if isinstance(input_spec, dict) and key in input_spec else None
        self.input_spec = input_spec
        self._index: torch.Tensor | None = None
        if self.key is None:
            return
        self.input_spec = {k: v for k, v in input_spec.items() if k != self.key}
        mask_shape = tuple(input_spec[self.key].shape)
        where = f"{owner}: observation[{self.key!r}] (the action mask, action_mask_key.name)"
        single = len(nest.flatten(action_spec)) == 1 and not isinstance(
            action_spec, (dict, tuple, list)
        )
        if not (single and action_spec.is_discrete):
            raise ActionMaskError(
                f"{where} needs a Discrete or MultiDiscrete action space, got "
                f"{describe_spec(action_spec)}"
            )
        sizes = discrete_sizes(action_spec)
        expected = (int(sizes.sum()),)
        if mask_shape != expected:
            raise ActionMaskError(
                f"{where} has shape {mask_shape}, but {describe_spec(action_spec)} needs "
                f"shape {expected}" + (" (the elements' values concatenated)" if sizes.ndim else "")
            )
        if sizes.ndim:
            width = int(sizes.max())
            flat = sizes.reshape(-1)
            positions = [i * width + j for i, n in enumerate(flat) for j in range(int(n))]
            self._index = torch.tensor(positions, dtype=torch.int64)
            self._layout = (*action_spec.shape, width)

    @property
    def active(self) -> bool:
        """Whether the observations carry a mask."""
        return self.key is not None

    def split(self, observation: Any) -> tuple[Any, torch.Tensor | None]:
        """``observation`` without the mask, and the mask as ``[B, n]`` booleans (a
        scalar discrete action) or ``[B, *shape, m]`` in the logits' layout (a
        multi-element one; values an element does not have are false); None without a
        mask."""
        if self.key is None:
            return observation, None
        mask = observation[self.key].bool()
        rest = {k: v for k, v in observation.items() if k != self.key}
        if self._index is None:
            return rest, mask
        full = mask.new_zeros((mask.shape[0], int(np.prod(self._layout))))
        full[:, self._index.to(mask.device)] = mask
        return rest, full.reshape(mask.shape[0], *self._layout)
