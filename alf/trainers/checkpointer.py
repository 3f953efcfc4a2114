"""Atomic checkpoints in ``ROOT_DIR/checkpoints/ckpt-<iteration>.pt``."""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from typing import Any

import torch

__all__ = ["CheckpointError", "Checkpointer"]

_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


class CheckpointError(Exception):
    """A checkpoint that cannot be read or does not fit the configured run."""


class Checkpointer:
    """Writes, lists, loads and prunes checkpoints.

    A checkpoint is written to a temporary file, flushed to disk and then renamed, so a
    crash never leaves a torn ``ckpt-N.pt``. Only after a successful write are the
    oldest checkpoints beyond ``num_to_keep`` removed. Loading uses
    ``torch.load(weights_only=True)``, so checkpoints hold only tensors and plain data.

    Args:
        directory: where the checkpoints live.
        num_to_keep: how many of the newest checkpoints to keep.
    """

    def __init__(self, *, directory: str, num_to_keep: int = 3) -> None:
        if num_to_keep < 1:
            raise ValueError(f"num_to_keep must be >= 1, got {num_to_keep}")
        self.directory = directory
        self.num_to_keep = num_to_keep

    def path(self, step: int) -> str:
        """Path of the checkpoint of iteration ``step``."""
        return os.path.join(self.directory, f"ckpt-{step}.pt")

    def steps(self) -> list[int]:
        """Iterations with a checkpoint, oldest first (temporary files are ignored)."""
        if not os.path.isdir(self.directory):
            return []
        found = (_NAME.match(name) for name in os.listdir(self.directory))
        return sorted(int(m.group(1)) for m in found if m)

    def latest_step(self) -> int | None:
        """The newest checkpointed iteration, or None."""
        steps = self.steps()
        return steps[-1] if steps else None

    def save(self, step: int, state: dict[str, Any]) -> str:
        """Atomically writes ``state`` as the checkpoint of ``step``; returns its path."""
        os.makedirs(self.directory, exist_ok=True)
        final = self.path(step)
        tmp = f"{final}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        for old in self.steps()[: -self.num_to_keep]:
            if old != step:
                os.remove(self.path(old))
        return final

    def load(self, step: int | None = None, required_keys: Collection[str] = ()) -> dict[str, Any]:
        """Loads the checkpoint of ``step`` (default: the newest).

        Args:
            step: the iteration of the checkpoint, None for the newest.
            required_keys: top-level keys the checkpoint must have.

        Raises:
            CheckpointError: there is no such checkpoint, it cannot be read, or it lacks
                one of ``required_keys``.
        """
        if step is None:
            step = self.latest_step()
            if step is None:
                raise CheckpointError(f"No checkpoint in '{self.directory}'")
        path = self.path(step)
        if not os.path.isfile(path):
            raise CheckpointError(
                f"No checkpoint for iteration {step} in '{self.directory}' "
                f"(available: {self.steps() or 'none'})"
            )
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unpickling failure means corrupt
            # Only the first line: torch's full text may suggest weights_only=False,
            # which is unsafe for a file of unknown origin.
            reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise CheckpointError(
                f"Checkpoint '{path}' cannot be read ({type(err).__name__}: {reason}). It "
                "is corrupt or was not written by ALF; it has been left in place. Move it "
                "away to resume from an older checkpoint."
            ) from err
        keys = set(state) if isinstance(state, dict) else set()
        missing = sorted(set(required_keys) - keys)
        if missing:
            raise CheckpointError(
                f"Checkpoint '{path}' is not an ALF checkpoint (missing {', '.join(missing)}); "
                "it has been left in place."
            )
        return state

    def remove_stale_temporaries(self) -> None:
        """Deletes temporary files left by a process killed while writing."""
        if not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            if ".pt.tmp-" in name:
                os.remove(os.path.join(self.directory, name))
