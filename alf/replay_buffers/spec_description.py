"""Plain-data descriptions of replay-buffer specs: field paths, shapes and dtypes, for
checkpoints and for checking saved data against the spec that is to receive it."""

from __future__ import annotations

from collections.abc import Sequence

import optree
import torch

from alf import nest
from alf.errors import UserError
from alf.tensor_specs import TensorSpec

__all__ = [
    "ReplayBufferError",
    "SpecDescription",
    "describe_spec",
    "dtype_name",
    "leaf_paths",
    "show_field",
    "spec_differences",
]

SpecDescription = list[tuple[str, tuple[int, ...], str]]


class ReplayBufferError(UserError, ValueError):
    """Data, arguments or a saved state that do not fit a :class:`ReplayBuffer`."""


def leaf_paths(tree: nest.Nest) -> list[str]:
    """Dotted paths of the leaves of ``tree`` in :func:`alf.nest.flatten` order, naming
    namedtuple fields by name (``rollout_info.log_prob``, ``observation.position``).

    Field names come from optree's accessors (optree >= 0.14); with an older optree,
    namedtuple fields are named by their index instead.
    """
    if not hasattr(optree, "tree_flatten_with_accessor"):
        paths, _, _ = optree.tree_flatten_with_path(tree, namespace="alf")
        return [".".join(str(p) for p in path) for path in paths]
    accessors, _, _ = optree.tree_flatten_with_accessor(tree, namespace="alf")
    return [".".join(str(getattr(entry, "field", entry.entry)) for entry in a) for a in accessors]


def show_field(path: str) -> str:
    """A field path quoted for messages (the empty path is the whole data)."""
    return f"'{path}'" if path else "the whole data (a single tensor)"


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``float32``."""
    return str(dtype).removeprefix("torch.")


def describe_spec(data_spec: nest.Nest) -> SpecDescription:
    """Describes a nest of :class:`TensorSpec` in plain data (for checkpoints).

    Args:
        data_spec: nest of :class:`TensorSpec`.

    Returns:
        One ``(path, shape, dtype)`` tuple per field in :func:`alf.nest.flatten` order,
        e.g. ``("observation.position", (3,), "float32")``.

    Raises:
        ReplayBufferError: if a leaf is not a :class:`TensorSpec`.
    """
    description = []
    for path, spec in zip(leaf_paths(data_spec), nest.flatten(data_spec), strict=True):
        if not isinstance(spec, TensorSpec):
            raise ReplayBufferError(
                f"data_spec field {show_field(path)} must be a TensorSpec, got {spec!r}"
            )
        description.append((path, tuple(int(d) for d in spec.shape), dtype_name(spec.dtype)))
    return description


def spec_differences(
    saved: Sequence[tuple[str, Sequence[int], str]],
    expected: Sequence[tuple[str, Sequence[int], str]],
) -> list[str]:
    """Human-readable differences between two :func:`describe_spec` descriptions.

    Args:
        saved: the description stored with some data (e.g. in a checkpoint).
        expected: the description of the spec that is to receive it.

    Returns:
        One line per field that differs in shape or dtype, is missing from ``saved``, or
        is extra in ``saved``; empty if the two describe the same fields.
    """
    saved_map = {path: (tuple(shape), dtype) for path, shape, dtype in saved}
    expected_map = {path: (tuple(shape), dtype) for path, shape, dtype in expected}
    lines = []
    for path, (shape, dtype) in expected_map.items():
        if path not in saved_map:
            lines.append(
                f"{path or '<data>'}: missing from the saved data "
                f"(expected shape {shape}, dtype {dtype})"
            )
            continue
        saved_shape, saved_dtype = saved_map[path]
        if (saved_shape, saved_dtype) != (shape, dtype):
            lines.append(
                f"{path or '<data>'}: saved shape {saved_shape}, dtype {saved_dtype} vs "
                f"expected shape {shape}, dtype {dtype}"
            )
    for path, (shape, dtype) in saved_map.items():
        if path not in expected_map:
            lines.append(
                f"{path or '<data>'}: extra field in the saved data "
                f"(shape {shape}, dtype {dtype}), not in the expected spec"
            )
    return lines
