"""Specifications of tensors: shapes and dtypes that size every buffer up front."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from alf import nest
from alf.config import configurable
from alf.errors import UserError

__all__ = [
    "TensorSpec",
    "BoundedTensorSpec",
    "UnsupportedActionSpaceError",
    "action_bounds",
    "action_mask_key",
    "describe_spec",
    "require_scalar_discrete",
    "from_gym_space",
    "UnsupportedSpaceError",
    "sample_uniform",
    "zeros_from_spec",
]


class UnsupportedActionSpaceError(UserError, ValueError):
    """An algorithm or network was given an action space it cannot handle (the message
    names both)."""


@configurable
def action_mask_key(name: str | None = "action_mask") -> str | None:
    """The Dict observation key that carries an environment's invalid-action mask.

    One setting for the whole run (the networks strip this key from their input and
    apply it to the action distribution; the environments check it is never all false
    where an action is taken). Bind ``action_mask_key.name = "legal_actions"`` to use
    another key, or ``None`` to treat every observation key as an ordinary input.
    """
    return name


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one tensor, without its batch dimensions.

    Attributes:
        shape: shape of a single element.
        dtype: its torch dtype.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    def zeros(
        self, outer_dims: tuple[int, ...] = (), device: torch.device | str | None = None
    ) -> torch.Tensor:
        """A zero tensor of shape ``outer_dims + shape`` on ``device`` (None: torch's
        default device, the CPU unless changed)."""
        return torch.zeros(tuple(outer_dims) + tuple(self.shape), dtype=self.dtype, device=device)

    @property
    def is_discrete(self) -> bool:
        """Whether the dtype is an integer type."""
        return not self.dtype.is_floating_point

    @property
    def numel(self) -> int:
        """Number of scalars in one element."""
        return int(np.prod(self.shape)) if self.shape else 1


@dataclass(frozen=True)
class BoundedTensorSpec(TensorSpec):
    """A :class:`TensorSpec` whose values lie in ``[minimum, maximum]`` (inclusive).

    ``minimum`` and ``maximum`` are numpy arrays broadcastable to ``shape``.
    """

    minimum: np.ndarray | float = 0.0
    maximum: np.ndarray | float = 0.0

    @property
    def num_actions(self) -> int:
        """For a scalar discrete spec, the number of distinct values."""
        if not self.is_discrete or self.shape != ():
            raise ValueError(f"num_actions needs a scalar discrete spec, got {self}")
        return int(np.max(self.maximum) - np.min(self.minimum) + 1)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BoundedTensorSpec):
            return False
        return (
            self.shape == other.shape
            and self.dtype == other.dtype
            and np.array_equal(self.minimum, other.minimum)
            and np.array_equal(self.maximum, other.maximum)
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def __repr__(self) -> str:
        """One line, whatever the shape: a bound that is the same everywhere is shown as
        that number, another as its first and last values (error messages print specs)."""
        return (
            f"BoundedTensorSpec(shape={self.shape}, dtype={self.dtype}, "
            f"minimum={_bound_repr(self.minimum)}, maximum={_bound_repr(self.maximum)})"
        )


def _bound_repr(bound: np.ndarray | float) -> str:
    values = np.asarray(bound).ravel()
    if values.size == 0:
        return "[]"
    if np.all(values == values[0]):
        return repr(values[0].item())
    return np.array2string(values, threshold=6, edgeitems=2, separator=", ").replace("\n", "")


_NP_TO_TORCH = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float32,  # ALF computes in float32
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int64,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int64,
    np.dtype(np.bool_): torch.bool,
}


def from_gym_space(space: gym.Space) -> nest.Nest:
    """Converts a gymnasium space to a nest of tensor specs.

    ``Box`` becomes a :class:`BoundedTensorSpec` (float32, or the integer dtype of the
    box), ``Discrete`` a scalar int64 bounded spec, ``MultiBinary``/``MultiDiscrete``
    int64 bounded specs; ``Dict`` becomes a dict and ``Tuple`` a tuple of specs.

    Raises:
        TypeError: for a space type ALF cannot represent.
    """
    if isinstance(space, gym.spaces.Box):
        np_dtype = np.dtype(space.dtype)
        if np_dtype in _NP_TO_TORCH:
            dtype = _NP_TO_TORCH[np_dtype]
        elif np.issubdtype(np_dtype, np.integer):
            dtype = torch.int64
        else:
            dtype = torch.float32
        return BoundedTensorSpec(
            shape=tuple(space.shape),
            dtype=dtype,
            minimum=np.asarray(space.low, dtype=np.float64),
            maximum=np.asarray(space.high, dtype=np.float64),
        )
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        return BoundedTensorSpec(
            shape=(), dtype=torch.int64, minimum=start, maximum=start + int(space.n) - 1
        )
    if isinstance(space, gym.spaces.MultiDiscrete):
        return BoundedTensorSpec(
            shape=tuple(space.shape),
            dtype=torch.int64,
            minimum=np.asarray(space.start),
            maximum=np.asarray(space.start) + np.asarray(space.nvec) - 1,
        )
    if isinstance(space, gym.spaces.MultiBinary):
        return BoundedTensorSpec(
            shape=tuple(int(n) for n in np.atleast_1d(space.n)),
            dtype=torch.int64,
            minimum=0,
            maximum=1,
        )
    if isinstance(space, gym.spaces.Dict):
        return {key: _from_gym_subspace(sub, key) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_from_gym_subspace(sub, i) for i, sub in enumerate(space.spaces))
    raise UnsupportedSpaceError(
        f"ALF cannot convert gymnasium space {space!r} to a tensor spec (it takes Box, "
        "Discrete, MultiDiscrete, MultiBinary, and Dict or Tuple of them)"
    )


class UnsupportedSpaceError(TypeError):
    """A gymnasium space ALF cannot represent; :attr:`path` is the Dict key (or Tuple
    index) path to it within the whole space (empty at the top)."""

    def __init__(self, message: str, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.path = path
        self.detail = message


def _from_gym_subspace(space: gym.Space, key: str | int) -> nest.Nest:
    """:func:`from_gym_space` of the entry ``key`` of a Dict or Tuple space; an error
    names the entry (``observation key 'mission'``) and how to drop a Dict key."""
    try:
        return from_gym_space(space)
    except UnsupportedSpaceError as err:
        path = (key, *err.path)
        where = "".join(f"[{k!r}]" for k in path)
        message = err.detail + f", at {where} of the space"
        if isinstance(path[-1], str) and all(isinstance(k, str) for k in path):
            message += (
                f"; to leave the '{path[-1]}' entry out, wrap the environment: "
                f"suite_gym.load.wrappers = [@DropObservationKeys] and "
                f"DropObservationKeys.keys = ['{'/'.join(path)}']"
            )
        error = UnsupportedSpaceError(message, path)
        error.detail = err.detail
        raise error from None


def zeros_from_spec(
    spec: nest.Nest,
    outer_dims: tuple[int, ...] = (),
    device: torch.device | str | None = None,
) -> nest.Nest:
    """A nest of zero tensors shaped by ``spec`` with leading ``outer_dims``, on
    ``device`` (None: torch's default device). States and placeholders built for an
    algorithm on an accelerator must pass its device."""
    return nest.map_structure(lambda s: s.zeros(outer_dims, device), spec)


def sample_uniform(spec: nest.Nest, batch_size: int, mask: torch.Tensor | None = None) -> nest.Nest:
    """``[batch_size, ...]`` values drawn uniformly from a nest of bounded specs
    (integers and floats in ``[minimum, maximum]``; a float draw may round to the
    maximum).

    ``mask`` (``[batch_size, n]``, for a single scalar discrete spec of ``n`` values):
    draw uniformly among the values whose entry is true (all of them in a row that
    allows none), the way an invalid-action mask (:func:`action_mask_key`) allows.
    """
    if mask is not None:
        if not (isinstance(spec, BoundedTensorSpec) and spec.is_discrete and spec.shape == ()):
            raise UnsupportedActionSpaceError(
                f"a uniform draw under an action mask needs a scalar Discrete action space, "
                f"got {describe_spec(spec)}"
            )
        allowed = mask.bool()
        allowed = allowed | ~allowed.any(-1, keepdim=True)
        index = torch.multinomial(allowed.float(), 1).squeeze(-1)
        return (index + int(np.asarray(spec.minimum))).to(spec.dtype)

    def draw(s: BoundedTensorSpec) -> torch.Tensor:
        shape = (batch_size, *s.shape)
        low = torch.as_tensor(np.asarray(s.minimum), dtype=torch.float64).expand(s.shape)
        high = torch.as_tensor(np.asarray(s.maximum), dtype=torch.float64).expand(s.shape)
        if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
            raise ValueError(f"Cannot sample uniformly from unbounded {s}")
        u = torch.rand(shape, dtype=torch.float64)
        if s.is_discrete:
            return (low + torch.floor(u * (high - low + 1))).clamp(max=high).to(s.dtype)
        return (low + u * (high - low)).to(s.dtype)

    return nest.map_structure(draw, spec)


def _describe_leaf(spec: TensorSpec) -> str:
    if not isinstance(spec, BoundedTensorSpec):
        return f"TensorSpec(shape={spec.shape}, dtype={spec.dtype})"
    low, high = np.asarray(spec.minimum), np.asarray(spec.maximum)
    if spec.is_discrete and spec.shape == ():
        start = int(low)
        suffix = f", start={start}" if start else ""
        return f"Discrete({int(high) - start + 1}{suffix})"
    if spec.is_discrete:
        low_b = np.broadcast_to(low, spec.shape)
        high_b = np.broadcast_to(high, spec.shape)
        if (low_b == 0).all() and (high_b == 1).all():
            return f"MultiBinary({list(spec.shape)})"
        nvec = (high_b - low_b + 1).astype(np.int64).tolist()
        starts = low_b.astype(np.int64)
        suffix = f", start={starts.tolist()}" if starts.any() else ""
        return f"MultiDiscrete({nvec}{suffix})"
    return f"Box(shape={spec.shape})"


def describe_spec(spec: nest.Nest) -> str:
    """A nest of action specs named as the Gymnasium space it came from, e.g.
    ``Dict(choice: Discrete(3, start=1), amount: Box(shape=(1,)))`` (for error
    messages)."""
    if isinstance(spec, dict):
        return "Dict(" + ", ".join(f"{k}: {describe_spec(v)}" for k, v in spec.items()) + ")"
    if isinstance(spec, (tuple, list)):
        return "Tuple(" + ", ".join(describe_spec(v) for v in spec) + ")"
    return _describe_leaf(spec)


def require_scalar_discrete(algorithm: str, action_spec: nest.Nest) -> None:
    """Raises :class:`UnsupportedActionSpaceError` naming ``algorithm`` and the space
    unless ``action_spec`` is one scalar discrete spec (a ``Discrete(n, start)``)."""
    if not (
        isinstance(action_spec, BoundedTensorSpec)
        and action_spec.is_discrete
        and action_spec.shape == ()
    ):
        raise UnsupportedActionSpaceError(
            f"{algorithm} supports only a Discrete action space (any start), got "
            f"{describe_spec(action_spec)}; use PPOAlgorithm, AppoAlgorithm or "
            "ActorCriticAlgorithm for MultiDiscrete, MultiBinary and Dict/Tuple actions"
        )


def action_bounds(spec: BoundedTensorSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low, high)`` float32 tensors of ``spec.shape`` (bounds broadcast per element)."""
    low, high = (
        torch.as_tensor(np.asarray(b), dtype=torch.float32).expand(spec.shape).clone()
        for b in (spec.minimum, spec.maximum)
    )
    return low, high
