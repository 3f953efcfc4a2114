"""Sweeps: every grid point x seed trained as its own ``alf.bin.train`` process.

Runs live in ``root_dir/<grid point>/seed-<k>/`` (ordinary run directories). Running the
same sweep again skips finished runs and resumes the others from their checkpoints.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from alf.experiments.grid import GridPoint, expand_grid
from alf.experiments.launcher import (
    RunSpec,
    reached_budget,
    requested_budget,
    run_progress,
    run_stopping_on_signals,
)
from alf.experiments.launchers.base import Job, Launcher
from alf.experiments.launchers.local import LocalLauncher
from alf.run_dir import layout

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "Sweep", "SweepRun", "parse_seeds"]

EXIT_FAILED = 1
"""Exit status of a sweep in which some run failed (or was stopped from outside)."""
EXIT_INTERRUPTED = 130
"""Exit status of a sweep stopped by Ctrl-C / SIGTERM (its runs checkpointed)."""


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` (or a range ``"0-4"``) -> ``[0, 1, 2]``; raises ValueError."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, sep, high = part.partition("-")
        try:
            if sep and low:
                seeds.extend(range(int(low), int(high) + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise ValueError(f"--seeds '{text}': expected integers like 0,1,2 or 0-4") from None
    if not seeds:
        raise ValueError(f"--seeds '{text}': no seed given")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds '{text}': a seed is given twice")
    return seeds


@dataclass
class SweepRun:
    """One grid point x seed of a sweep and what became of it.

    Attributes:
        point: the grid point.
        seed: its ``TrainerConfig.random_seed``.
        spec: how it is launched.
        state: ``pending``, ``running``, ``done``, ``failed`` or ``stopped``.
        process: the child while it runs.
        exit_code: the child's exit code once it ended.
        error: the child's error line when it failed.
        skipped: it had already finished when the sweep started.
    """

    point: GridPoint
    seed: int
    spec: RunSpec
    state: str = "pending"
    process: Job | None = None
    exit_code: int | None = None
    error: str = ""
    skipped: bool = False

    @property
    def name(self) -> str:
        """``<grid point>/seed-<k>``."""
        return f"{self.point.name}/seed-{self.seed}"


class Sweep:
    """Runs every grid point x seed, at most ``jobs`` at once.

    Args:
        conf: the gin config file.
        root_dir: the sweep's directory.
        seeds: the random seeds.
        grid: ``--grid`` flags, ``'Name.param=[a, b]'``.
        conf_params: bindings given to every run (before the grid's and the seed's).
        jobs: runs at once (>= 1).
        threads: torch threads per run (unless the config sets them).
        status_interval_s: seconds between status tables while runs go.
        out: where lines are printed.
        launcher: starts the runs (default: local child processes).
    """

    def __init__(
        self,
        *,
        conf: str,
        root_dir: str,
        seeds: Sequence[int],
        grid: Sequence[str] = (),
        conf_params: Sequence[str] = (),
        jobs: int = 1,
        threads: int = 1,
        status_interval_s: float = 60.0,
        out: Callable[[str], None] = print,
        launcher: Launcher | None = None,
    ) -> None:
        if jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {jobs}")
        self.root_dir = os.path.abspath(os.path.expanduser(root_dir))
        self.jobs = jobs
        self.launcher: Launcher = launcher or LocalLauncher()
        self.status_interval_s = status_interval_s
        self.out = out
        self._stop = False
        conf = os.path.abspath(os.path.expanduser(conf))
        default_name = os.path.splitext(os.path.basename(conf))[0]
        self.points = expand_grid(grid, default_name)
        self.runs = [
            SweepRun(
                point=point,
                seed=seed,
                spec=RunSpec(
                    run_dir=os.path.join(self.root_dir, point.name, f"seed-{seed}"),
                    conf=conf,
                    conf_params=(
                        *conf_params,
                        *point.bindings,
                        f"TrainerConfig.random_seed={seed}",
                    ),
                    threads=threads,
                ),
            )
            for point in self.points
            for seed in seeds
        ]

    def request_stop(self) -> None:
        """Stops starting runs and asks the running ones to checkpoint and exit."""
        self._stop = True

    def run(self, poll_s: float = 0.5) -> int:
        """Runs the sweep to its end (or a stop); returns the exit status: 0 when every
        run finished, :data:`EXIT_FAILED` if one failed, :data:`EXIT_INTERRUPTED` when
        stopped."""
        for run in self.runs:
            status = layout.read_status(run.spec.run_dir) or {}
            # A finished run is done unless the budget asked for now is larger: then it
            # is launched again and trains on from its checkpoint.
            if status.get("state") == layout.RunStatus.FINISHED and reached_budget(
                status, requested_budget(run.spec.conf, run.spec.conf_params)
            ):
                run.state, run.skipped = "done", True
        skipped = sum(run.skipped for run in self.runs)
        self.out(
            f"sweep: {len(self.runs)} runs ({len(self.points)} grid points x "
            f"{len(self.runs) // max(1, len(self.points))} seeds) in {self.root_dir}, "
            f"{self.jobs} at once; {skipped} already finished"
        )
        next_table = time.monotonic() + self.status_interval_s
        while True:
            self._reap()
            if self._stop:
                for run in self._running():
                    run.process.terminate()
            else:
                self._start_pending()
            if not self._running() and (self._stop or not self._pending()):
                break
            if time.monotonic() >= next_table:
                self.print_table()
                next_table = time.monotonic() + self.status_interval_s
            time.sleep(poll_s)
        self.print_table()
        return self._exit_status()

    def run_with_signals(self) -> int:
        """:meth:`run` with SIGINT/SIGTERM stopping the sweep cleanly (a second one kills
        the runs without checkpoints)."""
        return run_stopping_on_signals(
            self.run,
            request_stop=self.request_stop,
            running=lambda: [run.process for run in self._running()],
            announce=lambda name: self.out(
                f"sweep: {name}: stopping every run (each writes a checkpoint); again to kill them"
            ),
        )

    # ---------------------------------------------------------------- internals
    def _running(self) -> list[SweepRun]:
        return [run for run in self.runs if run.state == "running"]

    def _pending(self) -> list[SweepRun]:
        return [run for run in self.runs if run.state == "pending"]

    def _start_pending(self) -> None:
        for run in self._pending()[: max(0, self.jobs - len(self._running()))]:
            run.process = self.launcher.launch(run.spec)
            run.state = "running"
            if run.process.adopted:
                self.out(
                    f"sweep: adopted {run.name}: pid {run.process.pid} (of an earlier sweep, "
                    f"or started by hand) still trains in it (log: {run.process.log_path})"
                )
            else:
                self.out(f"sweep: started {run.name} (log: {run.process.log_path})")

    def _reap(self) -> None:
        for run in self._running():
            code = run.process.poll()
            if code is None:
                continue
            run.exit_code = code
            if run.process.killed:  # a second Ctrl-C
                run.process.after_kill()
                run.state = "stopped"
                self.out(f"sweep: killed {run.name} (no new checkpoint; rerun to resume)")
                continue
            status = layout.read_status(run.spec.run_dir) or {}
            state = status.get("state")
            if run.process.adopted and not self._stop and state != layout.RunStatus.FINISHED:
                if state in (layout.RunStatus.STOPPED, "interrupted"):
                    run.state = "pending"  # it stopped with its old sweep: resume it
                    self.out(f"sweep: adopted {run.name} stopped ({state}); resuming it")
                    continue
            if code == 0 and state == layout.RunStatus.FINISHED:
                run.state = "done"
                self.out(f"sweep: finished {run.name}: {self._describe(run)}")
            elif code == 0 or state == layout.RunStatus.STOPPED:
                run.state = "stopped"
                self.out(f"sweep: stopped {run.name} (checkpoint written; rerun to resume)")
            else:
                run.state = "failed"
                run.error = run.process.last_error_line()
                self.out(
                    f"sweep: FAILED {run.name} (exit {code}): {run.error} "
                    f"(log: {run.process.log_path})"
                )

    def _describe(self, run: SweepRun) -> str:
        progress = run_progress(run.spec.run_dir)
        text = f"{progress['env_steps']:,} env steps"
        if progress["budget"]:
            text += f" ({100.0 * progress['env_steps'] / progress['budget']:.0f}%)"
        if progress["last_eval"] is not None:
            text += (
                f", last eval {progress['last_eval']:.1f} at {progress['last_eval_env_steps']:,}"
            )
        return text

    def print_table(self) -> None:
        """Prints a line per run: state, env steps (and percent of the budget), last
        evaluation."""
        width = max(len(run.name) for run in self.runs)
        for run in self.runs:
            state = "done (skipped)" if run.skipped else run.state
            line = f"  {run.name:<{width}}  {state:<14}"
            if run.state != "pending" or os.path.isdir(run.spec.run_dir):
                line += f"  {self._describe(run)}"
            if run.state == "failed":
                line += f"  log: {run.process.log_path if run.process else ''}"
            self.out(line)

    def _exit_status(self) -> int:
        if self._stop:
            return EXIT_INTERRUPTED
        if any(run.state != "done" for run in self.runs):
            return EXIT_FAILED
        return 0
