"""Moving nests of tensors between the host and an accelerator."""

from __future__ import annotations

from typing import Any

import torch

from alf import nest

__all__ = ["to_device"]


def _move(x: Any, device: torch.device) -> Any:
    if not isinstance(x, torch.Tensor) or x.device == device:
        return x
    if device.type == "cuda" and x.device.type == "cpu":
        # Page-locked memory lets the copy run asynchronously with the host.
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)


def to_device(data: Any, device: torch.device | str) -> Any:
    """``data`` (a nest of tensors) on ``device``; tensors already there are returned as
    they are.

    Host-to-GPU copies go through pinned memory with ``non_blocking=True`` (the GPU
    stream orders them before any kernel that reads them); copies back to the host are
    synchronous.
    """
    device = torch.device(device)
    return nest.map_structure(lambda x: _move(x, device), data)
