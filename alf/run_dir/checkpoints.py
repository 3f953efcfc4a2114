"""A run's checkpoints: the files (``ROOT_DIR/checkpoints/ckpt-<iteration>.pt``, written
atomically) and their format, which this module alone spells.

A checkpoint is a dict (loaded with ``torch.load(weights_only=True)``: tensors and plain
data only) whose keys and owners are:

=====================================  ==================================================
``format_version``                     :data:`FORMAT_VERSION`
``iteration``, ``env_steps``           the trainer's counters (required)
``train_time_s``, ``wall_time_s``      the trainer's clocks
``torch_rng``, ``cuda_rng``,           random-number states
``world_size``, ``*_rng_per_rank``     (:func:`alf.trainers.resume.gather_rng_states`)
``bindings``                           the config (``alf.config.current_bindings()``)
``algorithm``                          ``Algorithm.checkpoint_state()``: ``module`` (the
                                       parameters and statistics) and ``optimizer``
                                       (required; by policy name for a
                                       ``MultiPolicyAlgorithm``)
``replay_buffer``                      ``RLAlgorithm.data_checkpoint_state()`` when not
                                       None (a replay buffer with ``enable_checkpoint``)
``policies``                           the run's frozen policies, when it has some
                                       (``TrainerConfig.frozen_policies``): name ->
                                       their algorithm's parameters and statistics;
                                       and a self-play league's snapshots
                                       (``league/<name>``)
=====================================  ==================================================

:class:`RunCheckpoint` is that dict as a typed record; :func:`read_checkpoint` reads a
run's newest (or a given) checkpoint for resuming, playing and offline data.

Rotation keeps the newest ``num_to_keep`` checkpoints, and also, forever, the
checkpoints of the iterations that are multiples of ``keep_every``
(``TrainerConfig.keep_checkpoint_every``) and the pinned ones: those listed in
``checkpoints/pinned.json`` (``{"pinned": [<iteration>, ...]}``, :data:`PINNED_FILE`;
:func:`pin_checkpoint` adds one, e.g. ``alf.bin.dataset --pin=N``), read at every
rotation, so a checkpoint pinned while the run trains is kept too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from alf.errors import TrainingError, UserError
from alf.run_dir import layout
from alf.run_dir.layout import RunDirWriteError, describe_write_failure

if TYPE_CHECKING:  # (no import at run time: the run directory sits below the algorithms)
    from alf.algorithms.algorithm import Algorithm

__all__ = [
    "FORMAT_VERSION",
    "PINNED_FILE",
    "REQUIRED_KEYS",
    "CheckpointError",
    "Checkpointer",
    "NonFiniteStateError",
    "non_finite_entry",
    "RunCheckpoint",
    "checkpoint_dir",
    "pin_checkpoint",
    "pinned_steps",
    "read_checkpoint",
    "read_checkpoint_file",
    "read_run_checkpoint",
    "restore_algorithm",
]

FORMAT_VERSION = 1
"""Version of the checkpoint format written by :meth:`RunCheckpoint.to_state`."""

REQUIRED_KEYS = ("iteration", "env_steps", "algorithm")
"""Top-level keys every ALF checkpoint has."""

_RNG_KEYS = ("torch_rng", "cuda_rng", "world_size", "torch_rng_per_rank", "cuda_rng_per_rank")

_NAME = re.compile(r"^ckpt-(\d+)\.pt$")

PINNED_FILE = "pinned.json"
"""The file of ``checkpoints/`` listing the pinned iterations, never rotated away."""


class CheckpointError(UserError):
    """A checkpoint that cannot be read or does not fit the configured run."""


class NonFiniteStateError(TrainingError, RuntimeError):
    """The algorithm's parameters, optimizer state or statistics hold NaN or infinite
    values, so its checkpoint was not written."""


def non_finite_entry(tree: Any, path: str = "") -> str | None:
    """The path (``module/actor.fc.weight``) of the first floating-point tensor in
    ``tree`` (nested dicts, lists and tuples) holding a NaN or infinite value, or None."""
    if isinstance(tree, torch.Tensor):
        if tree.is_floating_point() or tree.is_complex():
            return None if bool(torch.isfinite(tree).all()) else path or "(value)"
        return None
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, (list, tuple)):
        items = enumerate(tree)
    else:
        return None
    for key, value in items:
        found = non_finite_entry(value, f"{path}/{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _write_failure(err: BaseException) -> BaseException | None:
    """The failed write behind ``err``: an ``OSError`` (itself, or one it was raised
    while handling: torch's zip writer reports a failed write as a ``RuntimeError`` of its
    own), or a ``RuntimeError`` of torch's writer that says the write failed; None if
    ``err`` is something else."""
    current: BaseException | None = err
    while current is not None:
        if isinstance(current, OSError):
            return current
        current = current.__cause__ or current.__context__
    if isinstance(err, RuntimeError) and "write" in str(err).lower():
        return err
    return None


class Checkpointer:
    """Writes, lists, loads and prunes checkpoints.

    A checkpoint is written to a temporary file, flushed to disk and then renamed, so a
    crash never leaves a torn ``ckpt-N.pt``. Only after a successful write are the
    oldest checkpoints beyond ``num_to_keep`` removed. Loading uses
    ``torch.load(weights_only=True)``, so checkpoints hold only tensors and plain data.

    Checkpoints of iterations that are multiples of ``keep_every``, and the pinned ones
    (:func:`pin_checkpoint`), are never removed.

    Args:
        directory: where the checkpoints live.
        num_to_keep: how many of the newest checkpoints to keep.
        keep_every: also keep those of the multiples of this iteration count (0: none).
    """

    def __init__(self, *, directory: str, num_to_keep: int = 3, keep_every: int = 0) -> None:
        if num_to_keep < 1:
            raise ValueError(f"num_to_keep must be >= 1, got {num_to_keep}")
        if keep_every < 0:
            raise ValueError(f"keep_every must be >= 0, got {keep_every}")
        self.directory = directory
        self.num_to_keep = num_to_keep
        self.keep_every = keep_every

    def is_kept(self, step: int, pinned: Collection[int] = ()) -> bool:
        """Whether rotation never removes the checkpoint of ``step`` (a multiple of
        ``keep_every``, or one of ``pinned``)."""
        return step in pinned or (self.keep_every > 0 and step % self.keep_every == 0)

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
        """Atomically writes ``state`` as the checkpoint of ``step``; returns its path.

        Raises:
            NonFiniteStateError: ``state["algorithm"]`` (parameters, statistics,
                optimizer state) holds a non-finite value: nothing is written and no
                checkpoint is removed.
        """
        bad = non_finite_entry(state.get("algorithm"), "algorithm")
        if bad is not None:
            kept = self.latest_step()
            where = (
                f"the newest good checkpoint, '{self.path(kept)}', is kept"
                if kept is not None
                else "there is no earlier checkpoint"
            )
            raise NonFiniteStateError(
                f"iteration {step}: '{bad}' holds NaN or infinite values, so no checkpoint "
                f"was written ({where}); the training diverged or was fed non-finite data"
            )
        final = self.path(step)
        tmp = f"{final}.tmp-{os.getpid()}"
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except (OSError, RuntimeError) as err:
            cause = _write_failure(err)
            if cause is None:
                raise
            kept = self.latest_step()
            where = f"'{self.path(kept)}' is kept" if kept is not None else "none was kept"
            raise RunDirWriteError(
                f"cannot write checkpoint '{final}': {describe_write_failure(cause)}; the "
                f"newest checkpoint {where}"
            ) from err
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        pinned = pinned_steps(self.directory)
        for old in self.steps()[: -self.num_to_keep]:
            if old != step and not self.is_kept(old, pinned):
                try:
                    os.remove(self.path(old))
                except OSError as err:
                    raise RunDirWriteError(
                        f"cannot remove old checkpoint '{self.path(old)}': "
                        f"{describe_write_failure(err)}"
                    ) from err
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
        return _load_file(path, required_keys)

    def remove_stale_temporaries(self) -> None:
        """Deletes temporary files left by a process killed while writing."""
        if not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            if ".pt.tmp-" in name:
                os.remove(os.path.join(self.directory, name))


def _load_file(path: str, required_keys: Collection[str]) -> dict[str, Any]:
    """Loads the checkpoint file ``path`` (see :meth:`Checkpointer.load`)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means corrupt
        # Never torch's advice to retry with weights_only=False, unsafe for a file of
        # unknown origin: the first line that says what was refused, or else the first.
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        safe = [line for line in lines if "weights_only" not in line]
        reason = (safe or lines or [""])[0]
        if len(safe) < len(lines):
            reason = f"it asks to run code when loaded, refused: {reason}"
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
    bad = non_finite_entry(state.get("algorithm") if keys else None, "algorithm")
    if bad is not None:
        raise CheckpointError(
            f"Checkpoint '{path}' holds NaN or infinite values ('{bad}'); it has been "
            "left in place. Move it away to use an older checkpoint."
        )
    return state


def checkpoint_dir(root_dir: str) -> str:
    """The checkpoints folder of the run in ``root_dir``."""
    return os.path.join(root_dir, layout.CHECKPOINT_DIR)


def pinned_steps(directory: str) -> set[int]:
    """The pinned iterations of the checkpoints folder ``directory`` (empty without a
    readable :data:`PINNED_FILE`)."""
    data = layout.read_json(os.path.join(directory, PINNED_FILE)) or {}
    steps = data.get("pinned")
    if not isinstance(steps, list):
        return set()
    return {s for s in steps if isinstance(s, int) and not isinstance(s, bool)}


def pin_checkpoint(root_dir: str, step: int) -> str:
    """Pins the checkpoint of iteration ``step`` of the run in ``root_dir``: rotation
    never removes it. Returns its path.

    Raises:
        CheckpointError: the run has no checkpoint of that iteration.
        RunDirWriteError: the pin cannot be written.
    """
    checkpointer = Checkpointer(directory=checkpoint_dir(root_dir))
    path = checkpointer.path(step)
    if not os.path.isfile(path):
        raise CheckpointError(
            f"No checkpoint for iteration {step} in '{checkpointer.directory}' to pin "
            f"(available: {checkpointer.steps() or 'none'})"
        )
    pinned = sorted(pinned_steps(checkpointer.directory) | {step})
    try:
        layout.write_json_atomic(
            os.path.join(checkpointer.directory, PINNED_FILE), {"pinned": pinned}
        )
    except OSError as err:
        raise RunDirWriteError(f"cannot pin '{path}': {describe_write_failure(err)}") from err
    if not os.path.isfile(path):  # rotated away by a live run before the pin was read
        raise CheckpointError(f"Checkpoint '{path}' was removed before it could be pinned")
    return path


@dataclass
class RunCheckpoint:
    """What one checkpoint of a run holds (see the module docstring for the keys).

    Attributes:
        iteration: training iterations done.
        env_steps: environment steps taken (over all ranks).
        algorithm: ``Algorithm.checkpoint_state()``.
        train_time_s: seconds spent in training iterations, over all sessions.
        wall_time_s: wall-clock seconds of training, over all sessions.
        rng: the random-number states, by key.
        bindings: the config's bindings (None in checkpoints written without them).
        data: ``RLAlgorithm.data_checkpoint_state()`` (None: nothing saved).
        policies: the frozen policies' parameters and statistics, by name.
        path: the file it was read from (None for one not yet written).
    """

    iteration: int
    env_steps: int
    algorithm: dict[str, Any]
    train_time_s: float = 0.0
    wall_time_s: float = 0.0
    rng: dict[str, Any] = field(default_factory=dict)
    bindings: dict[str, str] | None = None
    data: Any = None
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    path: str | None = None

    @property
    def module_state(self) -> dict[str, Any]:
        """The algorithm's parameters and statistics alone (no optimizer state), as
        ``algorithm.load_state_dict`` takes them."""
        return self.algorithm["module"]

    def to_state(self) -> dict[str, Any]:
        """The dict written to the checkpoint file."""
        state: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "train_time_s": self.train_time_s,
            "wall_time_s": self.wall_time_s,
            **self.rng,
            "bindings": self.bindings,
            "algorithm": self.algorithm,
        }
        if self.bindings is None:
            del state["bindings"]
        if self.data is not None:
            state["replay_buffer"] = self.data
        if self.policies:
            state["policies"] = self.policies
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any], path: str | None = None) -> RunCheckpoint:
        """The record of a loaded checkpoint dict (which has :data:`REQUIRED_KEYS`)."""
        train_time_s = float(state.get("train_time_s", 0.0))
        return cls(
            iteration=int(state["iteration"]),
            env_steps=int(state["env_steps"]),
            algorithm=state["algorithm"],
            train_time_s=train_time_s,
            wall_time_s=float(state.get("wall_time_s", train_time_s)),
            rng={key: state[key] for key in _RNG_KEYS if key in state},
            bindings=dict(state["bindings"]) if "bindings" in state else None,
            data=state.get("replay_buffer"),
            policies=dict(state.get("policies", {})),
            path=path,
        )


def read_checkpoint(root_dir: str, step: int | None = None) -> RunCheckpoint:
    """The checkpoint of iteration ``step`` (default: the newest) of the run in
    ``root_dir``.

    Raises:
        CheckpointError: the run has no such checkpoint, or it cannot be read or is not
            an ALF checkpoint (the message names the file).
    """
    checkpointer = Checkpointer(directory=checkpoint_dir(root_dir))
    if step is None:
        step = checkpointer.latest_step()
        if step is None:
            raise CheckpointError(f"No checkpoint in '{checkpointer.directory}'")
    state = checkpointer.load(step, REQUIRED_KEYS)
    return RunCheckpoint.from_state(state, checkpointer.path(step))


def read_checkpoint_file(path: str) -> RunCheckpoint:
    """The checkpoint in the file ``path`` (any name, e.g. a copied ``ckpt-N.pt``).

    Raises:
        CheckpointError: there is no such file, or it cannot be read or is not an ALF
            checkpoint (the message names the file).
    """
    if not os.path.isfile(path):
        raise CheckpointError(f"Checkpoint file '{path}' not found")
    return RunCheckpoint.from_state(_load_file(path, REQUIRED_KEYS), path)


def read_run_checkpoint(root_dir: str, checkpoint: int | str | None = None) -> RunCheckpoint:
    """The checkpoint ``checkpoint`` names: an iteration of the run in ``root_dir``
    (:func:`read_checkpoint`), a checkpoint file's path (:func:`read_checkpoint_file`),
    or None for the run's newest.

    Raises:
        CheckpointError: no such checkpoint, or it cannot be read (naming the file).
    """
    if isinstance(checkpoint, str):
        return read_checkpoint_file(os.path.abspath(os.path.expanduser(checkpoint)))
    return read_checkpoint(root_dir, checkpoint)


def restore_algorithm(
    algorithm: Algorithm, checkpoint: RunCheckpoint, *, with_optimizer: bool = True
) -> None:
    """Loads the checkpoint's algorithm part into ``algorithm``: parameters, statistics
    and (``with_optimizer``) the optimizer state.

    Raises:
        CheckpointError: the checkpoint does not fit ``algorithm`` (naming the file).
    """
    try:
        if with_optimizer:
            algorithm.load_checkpoint_state(checkpoint.algorithm)
        else:
            algorithm.load_state_dict(checkpoint.module_state)
    except (RuntimeError, KeyError, ValueError) as err:
        # torch lists every mismatch on a line of its own: name the first, count the rest.
        details = [line.strip() for line in str(err).splitlines() if line.strip()]
        reason = details[1] if len(details) > 1 else (details[0] if details else "")
        more = f" (and {len(details) - 2} more)" if len(details) > 2 else ""
        raise CheckpointError(
            f"Checkpoint '{checkpoint.path}' does not fit the configured algorithm (was it "
            f"written with a different config?): {reason}{more}"
        ) from err
