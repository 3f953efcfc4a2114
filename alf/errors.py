"""ALF's error base: every error ALF raises on purpose derives from :class:`AlfError`.

Two kinds decide how a command ends (``alf.bin.train`` and the other tools exit with
the error's :attr:`AlfError.exit_code` after printing its one-line message):

* :class:`UserError` (exit status 2): an input the user can fix, e.g. a config, an
  environment id, a checkpoint, a ``root_dir`` or a command-line value.
* :class:`TrainingError` (exit status 3): training started and could not go on, e.g. the
  loss diverged, an actor or environment worker died, or a rank of a data-parallel run
  was lost. The run's last checkpoint is kept.

Errors that also mean a standard Python kind keep that base too (``ValueError`` for a
bad value, ``RuntimeError`` for a failure while running), so code that caught them by
that kind still does. This module imports nothing from ALF.
"""

from __future__ import annotations

__all__ = [
    "DISTRIBUTION",
    "EXIT_TRAINING_ERROR",
    "EXIT_USER_ERROR",
    "AlfError",
    "TrainingError",
    "UserError",
    "install_hint",
]

DISTRIBUTION = "alf-rl"
"""ALF's name on the package index (the import name is ``alf``; ``alf`` on PyPI is an
unrelated package)."""


def install_hint(extra: str) -> str:
    """The command that installs an extra, for error messages:
    ``pip install 'alf-rl[export]'`` (in a clone: ``pip install -e '.[export]'``)."""
    return f"pip install '{DISTRIBUTION}[{extra}]' (in a clone of ALF: pip install -e '.[{extra}]')"

EXIT_USER_ERROR = 2
"""Exit status of a command that stopped on a :class:`UserError`."""

EXIT_TRAINING_ERROR = 3
"""Exit status of a command that stopped on a :class:`TrainingError`."""


class AlfError(Exception):
    """Base of the errors ALF raises on purpose; the message is one line naming the
    culprit (a setting, a file, an environment, a process)."""

    exit_code: int = 1
    """The exit status of a command that stops on this error."""


class UserError(AlfError):
    """An input the user can fix: config, environment, checkpoint, directory, flag."""

    exit_code = EXIT_USER_ERROR


class TrainingError(AlfError):
    """Training started and could not go on; the last checkpoint is kept."""

    exit_code = EXIT_TRAINING_ERROR
