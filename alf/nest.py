"""Operations on nested structures (namedtuples, dicts, lists, tuples) over ``optree``.

``None`` is treated as an empty node, so optional fields of a namedtuple (for example
an algorithm without recurrent state) are simply skipped by every operation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import optree
import torch

Nest = Any

__all__ = [
    "Nest",
    "flatten",
    "is_single",
    "pack_sequence_as",
    "map_structure",
    "map_structure_with_path",
    "stack",
    "assert_same_structure",
    "batch_size",
    "zero_rows",
]


def flatten(nest: Nest) -> list[Any]:
    """Returns the leaves of ``nest`` in a deterministic order."""
    return optree.tree_leaves(nest, namespace="alf")


def is_single(nest: Nest) -> bool:
    """Whether ``nest`` is one leaf rather than a structure of them."""
    leaves = flatten(nest)
    return len(leaves) == 1 and leaves[0] is nest


def pack_sequence_as(structure: Nest, leaves: Sequence[Any]) -> Nest:
    """Builds a nest shaped like ``structure`` from a flat list of leaves."""
    treespec = optree.tree_structure(structure, namespace="alf")
    return optree.tree_unflatten(treespec, list(leaves))


def map_structure(fn: Callable[..., Any], nest: Nest, *rest: Nest) -> Nest:
    """Applies ``fn`` to corresponding leaves of ``nest`` and ``rest``."""
    return optree.tree_map(fn, nest, *rest, namespace="alf")


def map_structure_with_path(fn: Callable[..., Any], nest: Nest, *rest: Nest) -> Nest:
    """Like :func:`map_structure` but ``fn(path, *leaves)`` gets a dotted path string."""

    def _fn(path: tuple, *leaves: Any) -> Any:
        return fn(".".join(str(p) for p in path), *leaves)

    return optree.tree_map_with_path(_fn, nest, *rest, namespace="alf")


def stack(nests: Sequence[Nest], dim: int = 0) -> Nest:
    """Stacks a list of identically structured nests of tensors along ``dim``."""
    return map_structure(lambda *xs: torch.stack(xs, dim=dim), *nests)


def assert_same_structure(a: Nest, b: Nest) -> None:
    """Raises ``ValueError`` naming the difference if ``a`` and ``b`` differ in structure."""
    sa = optree.tree_structure(a, namespace="alf")
    sb = optree.tree_structure(b, namespace="alf")
    if sa != sb:
        raise ValueError(f"Nests have different structures:\n  {sa}\n  {sb}")


def batch_size(nest: Nest) -> int:
    """The size of the first dimension of the first tensor leaf in ``nest``."""
    for leaf in flatten(nest):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return leaf.shape[0]
    raise ValueError("The nest has no tensor with a batch dimension")


def zero_rows(nest: Nest, keep: torch.Tensor) -> Nest:
    """Sets row ``i`` of every ``[B, ...]`` tensor leaf to zero where ``keep[i]`` is False
    (``torch.where``, so NaN or inf in a dropped row does not survive)."""

    def zero(x: torch.Tensor) -> torch.Tensor:
        mask = keep.reshape(-1, *([1] * (x.dim() - 1)))
        return torch.where(mask, x, torch.zeros((), dtype=x.dtype))

    return map_structure(zero, nest)
