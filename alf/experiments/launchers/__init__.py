"""Launchers of runs for the sweep, the tuner and PBT: local child processes, Slurm jobs
(``submitit``) or Ray actors (:func:`~alf.experiments.launchers.base.make_launcher`)."""

from alf.experiments.launchers.base import (
    LAUNCHERS,
    Job,
    Launcher,
    LauncherError,
    LaunchOptions,
    make_launcher,
)
from alf.experiments.launchers.flags import add_launcher_flags, launch_options

__all__ = [
    "LAUNCHERS",
    "Job",
    "LaunchOptions",
    "Launcher",
    "LauncherError",
    "add_launcher_flags",
    "launch_options",
    "make_launcher",
]
