"""The files of a population (``alf.bin.pbt``'s ``root_dir``) and the steps on them that
the controller repeats safely after any crash.

A population's directory holds::

    pbt.json           the controller's state: the settings it was started with, the
                       round and its phase (train, exploit, done), each member's current
                       hyperparameters, the exploit plan of the round being exploited,
                       and the lineage (authoritative; written atomically)
    lineage.jsonl      the lineage, one JSON object per member and round (a copy of
                       pbt.json's, rewritten atomically with it)
    member-<i>/        ordinary run directories, one per member, each with the
                       ``mutable_bindings.json`` (:data:`alf.config.MUTABLE_BINDINGS_FILE`)
                       that lets its resume change its mutable bindings
    .pbt.lock          flock'ed by the controller running the population

Every step leaves pbt.json as it was or as the next state, never in between; a step
interrupted before its state was written is done again (its effects are the same
twice: a copied checkpoint is copied again, decided plans are decided again from the
same files with the same seeded random draws).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import Any

from alf import config as alf_config
from alf.errors import UserError
from alf.run_dir import layout

__all__ = [
    "DONE",
    "EXPLOIT",
    "LINEAGE_FILE",
    "LOCK_FILE",
    "STATE_FILE",
    "TRAIN",
    "Exploit",
    "PopulationSettings",
    "PopulationState",
    "PopulationStateError",
    "SEED_BINDING",
    "copy_checkpoint",
    "member_dir",
    "newest_checkpoint",
    "write_mutable_bindings",
]

STATE_FILE = "pbt.json"
LINEAGE_FILE = "lineage.jsonl"
LOCK_FILE = ".pbt.lock"
STATE_VERSION = 1

TRAIN, EXPLOIT, DONE = "train", "exploit", "done"
"""The phases of a round: its members train; the bottom of the population copies the
top (after every round but the last); the population has trained all its rounds."""

SEED_BINDING = "TrainerConfig.random_seed"
"""A member keeps its own seed when it resumes from another member's checkpoint, so
this binding is mutable in every member besides the ``--mutate`` ones."""

_CHECKPOINT = re.compile(r"^ckpt-(\d+)\.pt$")  # alf.run_dir.checkpoints' names (no torch here)


class PopulationStateError(UserError, ValueError):
    """A population directory that cannot be continued by this command: its ``pbt.json``
    is unreadable, holds another population, or the directory holds other files."""


def member_dir(root_dir: str, index: int) -> str:
    """The run directory of member ``index``."""
    return os.path.join(root_dir, f"member-{index}")


@dataclass(frozen=True, kw_only=True)
class PopulationSettings:
    """What defines a population: a rerun must give the same.

    Attributes:
        conf: the gin config file (absolute).
        conf_params: bindings given to every member.
        mutations: the ``--mutate`` flags (canonical texts).
        population: the number of members.
        interval: env steps of each member per round.
        num_env_steps: env steps of each member in all.
        seed: member ``i`` trains with ``TrainerConfig.random_seed = seed + i``; the
            controller's draws are seeded with it too.
        quantile: the fraction of the population in the top and in the bottom.
        perturb: the factors of the explore step.
        resample_probability: the chance a value is drawn afresh instead.
    """

    conf: str
    conf_params: tuple[str, ...]
    mutations: tuple[str, ...]
    population: int
    interval: int
    num_env_steps: int
    seed: int
    quantile: float
    perturb: tuple[float, ...]
    resample_probability: float

    @property
    def num_rounds(self) -> int:
        """Rounds of training (the last may be shorter than :attr:`interval`)."""
        return math.ceil(self.num_env_steps / self.interval)

    def budget(self, round_index: int) -> int:
        """A member's ``TrainerConfig.num_env_steps`` in round ``round_index``."""
        return min((round_index + 1) * self.interval, self.num_env_steps)

    def member_seed(self, index: int) -> int:
        """Member ``index``'s ``TrainerConfig.random_seed``."""
        return self.seed + index

    def to_json(self) -> dict[str, Any]:
        """The settings as JSON data."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PopulationSettings:
        """The settings of :meth:`to_json`'s data (KeyError/TypeError if malformed)."""
        data = dict(data)
        for name in ("conf_params", "mutations", "perturb"):
            data[name] = tuple(data[name])
        return cls(**data)

    def differences(self, other: PopulationSettings) -> list[str]:
        """The names of the settings in which ``other`` differs."""
        mine, theirs = self.to_json(), other.to_json()
        return [name for name in mine if mine[name] != theirs[name]]


@dataclass(kw_only=True)
class Exploit:
    """One member's exploit and explore step, decided at the end of a round.

    Attributes:
        member: the member that copies.
        donor: the member it copies.
        step: the iteration of the donor's checkpoint it copies.
        hyperparameters: its hyperparameters for the next round (the donor's, perturbed).
    """

    member: int
    donor: int
    step: int
    hyperparameters: dict[str, int | float]


@dataclass(kw_only=True)
class PopulationState:
    """The controller's state, as stored in ``pbt.json``.

    Attributes:
        settings: the population's settings.
        round: the current round (0-based).
        phase: :data:`TRAIN`, :data:`EXPLOIT` or :data:`DONE`.
        hyperparameters: each member's hyperparameters for the current round, by
            ``--mutate`` binding name.
        plan: the exploit steps of the round (phase :data:`EXPLOIT`).
        lineage: one record per member and finished round (see ``docs``).
    """

    settings: PopulationSettings
    hyperparameters: list[dict[str, int | float]]
    round: int = 0
    phase: str = TRAIN
    plan: list[Exploit] = field(default_factory=list)
    lineage: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The state as JSON data."""
        return {
            "version": STATE_VERSION,
            "settings": self.settings.to_json(),
            "round": self.round,
            "phase": self.phase,
            "hyperparameters": self.hyperparameters,
            "plan": [dataclasses.asdict(step) for step in self.plan],
            "lineage": self.lineage,
        }

    def save(self, root_dir: str) -> None:
        """Writes ``pbt.json``, then ``lineage.jsonl`` from it (each atomically)."""
        layout.write_json_atomic(os.path.join(root_dir, STATE_FILE), self.to_json())
        self.write_lineage(root_dir)

    def write_lineage(self, root_dir: str) -> None:
        """Writes ``lineage.jsonl`` (atomically) from :attr:`lineage`."""
        text = "".join(json.dumps(record, sort_keys=True) + "\n" for record in self.lineage)
        layout.write_text_atomic(os.path.join(root_dir, LINEAGE_FILE), text)

    @classmethod
    def load(cls, root_dir: str) -> PopulationState | None:
        """The state in ``root_dir``'s ``pbt.json``, None without one.

        Raises:
            PopulationStateError: the file cannot be read as a population's state.
        """
        path = os.path.join(root_dir, STATE_FILE)
        if not os.path.exists(path):
            return None
        data = layout.read_json(path)
        try:
            if data is None or data.get("version") != STATE_VERSION:
                raise ValueError("not a JSON object of this version")
            state = cls(
                settings=PopulationSettings.from_json(data["settings"]),
                hyperparameters=[dict(h) for h in data["hyperparameters"]],
                round=int(data["round"]),
                phase=str(data["phase"]),
                plan=[Exploit(**step) for step in data["plan"]],
                lineage=list(data["lineage"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise PopulationStateError(
                f"'{path}' cannot be read as the state of a population ({err}); move it "
                "away, or use another --root_dir"
            ) from None
        if state.phase not in (TRAIN, EXPLOIT, DONE):
            raise PopulationStateError(f"'{path}': unknown phase '{state.phase}'")
        return state


def newest_checkpoint(run_dir: str) -> int | None:
    """The iteration of the newest checkpoint of the run in ``run_dir``, None if none."""
    try:
        names = os.listdir(os.path.join(run_dir, layout.CHECKPOINT_DIR))
    except OSError:
        return None
    steps = [int(m.group(1)) for m in map(_CHECKPOINT.match, names) if m]
    return max(steps) if steps else None


def copy_checkpoint(source_dir: str, step: int, target_dir: str) -> str:
    """Makes the donor's checkpoint ``ckpt-<step>.pt`` of ``source_dir`` the only
    checkpoint of ``target_dir`` (so the target resumes from it); returns its path.

    The copy goes through a temporary file (named as the trainer's, which removes one a
    crash left) and a rename; then the target's other checkpoints are removed. Doing it
    twice gives the same result.

    Raises:
        PopulationStateError: the donor's checkpoint is gone.
    """
    name = f"ckpt-{step}.pt"
    source = os.path.join(source_dir, layout.CHECKPOINT_DIR, name)
    directory = os.path.join(target_dir, layout.CHECKPOINT_DIR)
    target = os.path.join(directory, name)
    if not os.path.isfile(source):
        raise PopulationStateError(
            f"the checkpoint to copy, '{source}', is gone; the population cannot go on"
        )
    os.makedirs(directory, exist_ok=True)
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        shutil.copyfile(source, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)
    for other in os.listdir(directory):
        if _CHECKPOINT.match(other) and other != name:
            os.remove(os.path.join(directory, other))
    return target


def write_mutable_bindings(run_dir: str, keys: list[str]) -> None:
    """Records in ``run_dir`` the bindings its resume may change (the ``--mutate`` keys
    and the seed, :data:`SEED_BINDING`); creates the directory."""
    os.makedirs(run_dir, exist_ok=True)
    layout.write_json_atomic(
        os.path.join(run_dir, alf_config.MUTABLE_BINDINGS_FILE),
        {"bindings": sorted({*keys, SEED_BINDING}), "owner": "alf.bin.pbt"},
    )
