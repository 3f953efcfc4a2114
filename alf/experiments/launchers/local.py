"""The local launcher: runs as ``alf.bin.train`` child processes of the controller
(:func:`alf.experiments.launcher.launch`), which never outlive it."""

from __future__ import annotations

from alf.experiments.launcher import RunProcess, RunSpec, launch

__all__ = ["LocalLauncher"]


class LocalLauncher:
    """Runs as child processes of this one; adopts a live training found in a run dir."""

    def launch(self, spec: RunSpec) -> RunProcess:
        """Starts ``spec`` as a child process, or adopts the live one training there."""
        return launch(spec)
