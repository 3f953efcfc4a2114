"""A sum tree: non-negative values with fast vectorized updates and prefix-sum search."""

from __future__ import annotations

import math

import torch

__all__ = ["SumTree"]

_FANOUT = 64
"""Children per internal node: a wide tree has few levels, and so few torch calls."""

_TOP_SIZE = 32768
"""The largest level searched with one cumulative sum instead of a descent."""


class SumTree:
    """Non-negative values indexed ``0 .. capacity-1`` with their sums kept in a tree.

    The leaves are grouped in blocks of 64; each level above holds the sums of the
    blocks of the level below, until a level of at most 32768 sums remains (the top).
    A search takes one cumulative sum over the top and then descends one block per
    level: up to 32768 leaves are all top, up to two million need one descent. Every
    operation is vectorized over a batch of indices or values and loops only over the
    levels. Sums are stored in float64 and recomputed from their children on every
    update (never adjusted by differences), so they do not drift.

    Args:
        capacity: number of leaves.
    """

    def __init__(self, *, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be >= 1, got {capacity}")
        self._capacity = int(capacity)
        self._fanout = fanout = _FANOUT
        # Block levels (each padded to a whole number of blocks), leaves first.
        self._levels: list[torch.Tensor] = []
        size = self._capacity
        while size > _TOP_SIZE:
            padded = -(-size // fanout) * fanout
            self._levels.append(torch.zeros(padded, dtype=torch.float64))
            size = padded // fanout
        # The top level is stored after a zero, so that its cumulative sum starts at 0.
        self._top_buf = torch.zeros(size + 1, dtype=torch.float64)
        self._levels.append(self._top_buf[1:])
        self._zero = torch.zeros((), dtype=torch.float64)
        self._max_value = 0.0

    @property
    def capacity(self) -> int:
        """Number of leaves."""
        return self._capacity

    @property
    def total(self) -> float:
        """The sum of all leaves."""
        return float(self._levels[-1].sum())

    @property
    def max_value(self) -> float:
        """The largest value ever set since construction or the last :meth:`reset`.

        It never decreases when leaves are lowered again (it is not the current maximum),
        so it costs nothing to maintain; 0.0 for a fresh tree.
        """
        return self._max_value

    def _check_indices(self, indices: torch.Tensor) -> torch.Tensor:
        indices = torch.as_tensor(indices)
        if indices.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise TypeError(f"SumTree indices must be an integer tensor, got {indices.dtype}")
        indices = indices.reshape(-1).to(torch.int64)
        if indices.numel():
            low, high = torch.aminmax(indices)
            if low < 0 or high >= self._capacity:
                raise IndexError(
                    f"SumTree indices must lie in [0, {self._capacity}), got values in "
                    f"[{int(low)}, {int(high)}]"
                )
        return indices

    def update(self, indices: torch.Tensor, values: torch.Tensor | float) -> None:
        """Sets ``leaf[indices[i]] = values[i]``.

        Args:
            indices: 1-D integer tensor of leaves. When an index appears more than once,
                the last of its values wins.
            values: non-negative finite values, a tensor of the same length as
                ``indices`` or anything that broadcasts to it.

        Raises:
            ValueError: on a negative, infinite or NaN value.
            IndexError: on an index outside ``[0, capacity)``.
        """
        indices = self._check_indices(indices)
        n = indices.numel()
        if n == 0:
            return
        values = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
        if values.numel() not in (1, n):
            raise ValueError(f"SumTree.update got {n} indices but {values.numel()} values")
        values = values.expand(n)
        valid = (values >= 0) & (values < math.inf)  # also False for NaN
        if not bool(valid.all()):
            raise ValueError(
                f"SumTree values must be finite and >= 0, got {values[~valid][:5].tolist()}"
            )
        # Keep only the last write of each index: after a stable sort, the last entry of
        # every run of equal indices is the one written last.
        sorted_idx, order = torch.sort(indices, stable=True)
        last = torch.ones(n, dtype=torch.bool)
        last[:-1] = sorted_idx[1:] != sorted_idx[:-1]
        self._assign_unique(sorted_idx[last], values[order[last]])

    def _assign_unique(self, indices: torch.Tensor, values: torch.Tensor) -> None:
        """:meth:`update` without its checks: ``indices`` (int64, in range) must be
        distinct and ``values`` (float64, shaped like ``indices``) finite and >= 0."""
        if indices.numel() == 0:
            return
        self._levels[0][indices] = values
        self._max_value = max(self._max_value, float(values.max()))
        node = indices
        for below, level in zip(self._levels[:-1], self._levels[1:], strict=True):
            node = node // self._fanout
            # Parents of several updated leaves are written more than once, always with
            # the same (recomputed) sum.
            level[node] = below.view(-1, self._fanout).index_select(0, node).sum(1)

    def get(self, indices: torch.Tensor) -> torch.Tensor:
        """The float64 values of ``indices`` (a 1-D integer tensor)."""
        return self._levels[0][self._check_indices(indices)]

    def find(self, values: torch.Tensor) -> torch.Tensor:
        """Prefix-sum search: for each ``u`` the leaf ``i`` with ``cumsum(<i) <= u <
        cumsum(<=i)``.

        ``u`` is clamped to ``[0, total)`` first, so the result is always a leaf with a
        positive value (a leaf of value 0 is never returned, whatever rounding does).

        Args:
            values: tensor of ``u`` values (any float dtype).

        Returns:
            int64 tensor of leaf indices, shaped like ``values``.

        Raises:
            ValueError: if the tree's total is 0.
        """
        values = torch.as_tensor(values)
        shape = values.shape
        u = values.to(torch.float64).reshape(-1)
        zero = self._zero
        # The top: one cumulative sum, starting with the stored leading 0.
        csum = self._top_buf.cumsum(0)
        total = csum[-1]
        if not total > 0:
            raise ValueError("SumTree.find needs a positive total, but all values are 0")
        u = torch.clamp(u, min=zero, max=torch.nextafter(total, zero))
        node = torch.searchsorted(csum, u, right=True) - 1
        u = u - csum[node]
        for level in reversed(self._levels[:-1]):
            children = level.view(-1, self._fanout).index_select(0, node)
            csum = children.cumsum(1)
            # Keep u in [0, the node's sum as its children add up), so that a positive
            # child is always found whatever the rounding of the sums and differences.
            u = torch.clamp(u, min=zero, max=torch.nextafter(csum[:, -1], zero)).unsqueeze(1)
            child = torch.searchsorted(csum, u, right=True)
            u = (u - csum.gather(1, child) + children.gather(1, child)).squeeze(1)
            node = torch.add(child.squeeze(1), node, alpha=self._fanout)
        return node.reshape(shape)

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draws ``n`` leaf indices with replacement, each with probability value/total.

        Args:
            n: number of indices.
            generator: the random generator to use (torch's default one if None).

        Returns:
            ``[n]`` int64 leaf indices (never a leaf of value 0).

        Raises:
            ValueError: if the total is 0.
        """
        total = self._levels[-1].sum()
        if not total > 0:
            raise ValueError("SumTree.sample needs a positive total, but all values are 0")
        u = torch.rand(n, dtype=torch.float64, generator=generator) * total
        return self.find(u)

    def leaf_values(self) -> torch.Tensor:
        """A float64 copy of all ``capacity`` leaves."""
        return self._levels[0][: self._capacity].clone()

    def reset(self, values: torch.Tensor | None = None, max_value: float | None = None) -> None:
        """Sets every leaf at once (to 0 when ``values`` is None) and rebuilds the sums.

        Args:
            values: ``[capacity]`` non-negative finite values, or None for all zeros.
            max_value: what :attr:`max_value` becomes; by default the largest of
                ``values`` (0.0 for all zeros).

        Raises:
            ValueError: on a wrong shape or a negative or non-finite value.
        """
        leaves = self._levels[0]
        leaves.zero_()
        if values is not None:
            values = torch.as_tensor(values, dtype=torch.float64)
            if values.shape != (self._capacity,):
                raise ValueError(
                    f"SumTree.reset needs {self._capacity} values, got shape {tuple(values.shape)}"
                )
            if not bool(((values >= 0) & (values < math.inf)).all()):
                raise ValueError("SumTree values must be finite and >= 0")
            leaves[: self._capacity] = values
        for below, level in zip(self._levels[:-1], self._levels[1:], strict=True):
            sums = below.view(-1, self._fanout).sum(1)
            level.zero_()
            level[: sums.shape[0]] = sums
        if max_value is None:
            max_value = float(leaves.max())
        self._max_value = float(max_value)
