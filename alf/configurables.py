"""Registering ALF's configurables with gin: a name in a config (``PPOAlgorithm``,
``create_environment``, ``@torch.optim.AdamW``) is known once its module is imported.

The command-line tools import every package (:func:`import_configurables`) before they
load a config. Worker processes (async actors, subprocess environment workers) import
only the packages they build from (an actor: :data:`ACTING_PACKAGES`; a subprocess
environment worker: ``alf.environments``), and load the parent's (already checked) config
with the others' bindings skipped: neither imports the trainer.

This module sits above every package it imports; nothing below it imports it.
"""

from __future__ import annotations

import importlib

__all__ = [
    "ACTING_PACKAGES",
    "TRAINING_ONLY_CONFIGURABLES",
    "TRAINING_PACKAGES",
    "import_configurables",
]

ACTING_PACKAGES = (
    "alf.environments",
    "alf.algorithms",
    "alf.data_transformers",
    "alf.networks",
    "alf.replay_buffers",
    "alf.unrollers",
    "alf.utils.schedules",
)
"""What builds environments and the algorithm that acts in them (an async actor)."""

TRAINING_PACKAGES = (*ACTING_PACKAGES, "alf.trainers")
"""Everything a config can name (a training run, ``alf.bin.play``, a sweep)."""

TRAINING_ONLY_CONFIGURABLES = ("SelfPlay", "StopOnPlateau", "TrainerConfig")
"""The configurables :data:`TRAINING_PACKAGES` register beyond :data:`ACTING_PACKAGES`:
the bindings an actor skips (any other unknown name is still an error there)."""


def import_configurables(packages: tuple[str, ...] = TRAINING_PACKAGES) -> None:
    """Imports ``packages`` (by default all of ALF's), registering their configurables."""
    for package in packages:
        importlib.import_module(package)
