"""Population-based training (Jaderberg et al. 2017): a population of ordinary runs
trained in rounds; after each round the bottom of the population copies the newest
checkpoint of a member of the top and perturbs its hyperparameters.

Members are run directories ``root_dir/member-<i>/`` trained by ``alf.bin.train``
through a :class:`Launcher` (local child processes, Slurm jobs or Ray actors: see
:mod:`alf.experiments.launchers`). Round ``r`` raises each member's
``TrainerConfig.num_env_steps`` to ``(r + 1) * interval`` and resumes it; a member is
ranked by its latest evaluation return (the one at the end of the round). The round's
state machine and its files are described in :mod:`alf.experiments.pbt_state`: every
step can be interrupted (Ctrl-C, ``kill -9`` of the controller or of a member) and the
same command continues where it stopped.
"""

from __future__ import annotations

import fcntl
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

from alf.experiments.launcher import (
    RunSpec,
    reached_budget,
    run_progress,
    run_stopping_on_signals,
)
from alf.experiments.launchers.base import Job, Launcher
from alf.experiments.launchers.local import LocalLauncher
from alf.experiments.pbt_space import Mutation, MutationError
from alf.experiments.pbt_state import (
    DONE,
    EXPLOIT,
    LOCK_FILE,
    STATE_FILE,
    TRAIN,
    Exploit,
    PopulationSettings,
    PopulationState,
    PopulationStateError,
    copy_checkpoint,
    member_dir,
    newest_checkpoint,
    write_mutable_bindings,
)
from alf.experiments.tune import read_objective
from alf.run_dir import layout

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "Job",
    "Launcher",
    "LocalLauncher",
    "MAX_RELAUNCHES",
    "Population",
    "plan_exploit",
    "rank_members",
]

EXIT_FAILED = 1
"""Exit status of a population stopped by a member's failure (named in :attr:`failure`)."""
EXIT_INTERRUPTED = 130
"""Exit status of a population stopped by Ctrl-C / SIGTERM (its members checkpointed)."""
MAX_RELAUNCHES = 3
"""How often one command resumes a member that stopped before the end of its round
without failing (killed, stopped from outside) before it gives up."""


_FLAGS = {"conf_params": "--conf_param", "mutations": "--mutate"}
"""The flags of the settings whose name is not their flag's."""


def rank_members(scores: Sequence[float | None]) -> list[int]:
    """Member indices, best first: by score (None last), ties by index."""
    return sorted(
        range(len(scores)),
        key=lambda i: (scores[i] is None, -(scores[i] or 0.0), i),
    )


def plan_exploit(
    scores: Sequence[float | None], *, quantile: float, rng: random.Random
) -> list[tuple[int, int]]:
    """Which members copy whom: each of the bottom ``ceil(quantile * N)`` members (at
    most ``N // 2``, so no donor copies) copies one drawn uniformly from the top as many;
    returns ``(member, donor)`` pairs."""
    order = rank_members(scores)
    count = max(1, min(math.ceil(quantile * len(scores)), len(scores) // 2))
    top, bottom = order[:count], order[len(order) - count :]
    return [(member, rng.choice(top)) for member in sorted(bottom)]


@dataclass
class _Member:
    """A member's training in the current round of this command."""

    index: int
    run_dir: str
    state: str = "pending"  # pending, running, done, stopped, failed
    job: Job | None = None
    relaunches: int = 0
    error: str = ""


class Population:
    """Trains a population round by round.

    Args:
        settings: the population's settings.
        mutations: the mutable hyperparameters (in the order of ``settings.mutations``).
        root_dir: the population's directory.
        jobs: members trained at once.
        threads: torch threads per member (unless the config sets them).
        launcher: starts the members (default: local child processes).
        out: where lines are printed.
        poll_s: seconds between looks at the running members.
    """

    def __init__(
        self,
        *,
        settings: PopulationSettings,
        mutations: Sequence[Mutation],
        root_dir: str,
        jobs: int = 1,
        threads: int = 1,
        launcher: Launcher | None = None,
        out: Callable[[str], None] = print,
        poll_s: float = 0.5,
    ) -> None:
        if jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {jobs}")
        self.settings = settings
        self.mutations = list(mutations)
        self.root_dir = os.path.abspath(os.path.expanduser(root_dir))
        self.jobs = jobs
        self.threads = threads
        self.launcher: Launcher = launcher or LocalLauncher()
        self.out = out
        self.poll_s = poll_s
        self.failure = ""
        """Why the population stopped on a member's failure, one line (empty: it did not)."""
        self._stop = False
        self._members: list[_Member] = []
        self._lock: IO[str] | None = None

    # ------------------------------------------------------------------ state
    def check_root_dir(self) -> PopulationState | None:
        """The population's saved state (None for a new one), without writing anything.

        Raises:
            PopulationStateError: ``root_dir`` holds another population, an unreadable
                ``pbt.json``, or files of something else.
        """
        state = PopulationState.load(self.root_dir)
        if state is not None:
            changed = state.settings.differences(self.settings)
            if changed:
                flags = [_FLAGS.get(name, f"--{name}") for name in changed]
                raise PopulationStateError(
                    f"root_dir '{self.root_dir}' holds a population with a different "
                    f"{', '.join(flags)}; rerun its own command to continue it, or use "
                    "another --root_dir"
                )
            return state
        if os.path.isdir(self.root_dir) and set(os.listdir(self.root_dir)) - {LOCK_FILE}:
            raise PopulationStateError(
                f"root_dir '{self.root_dir}' is not empty and holds no {STATE_FILE}; use an "
                "empty or new --root_dir"
            )
        return None

    def _open(self) -> PopulationState:
        """Takes the population's lock and loads (or creates) its state."""
        os.makedirs(self.root_dir, exist_ok=True)
        self._lock = open(os.path.join(self.root_dir, LOCK_FILE), "a+")  # noqa: SIM115
        try:  # (closed by _release: the lock never outlives the command)
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise PopulationStateError(
                f"another alf.bin.pbt runs the population in '{self.root_dir}'"
            ) from None
        state = self.check_root_dir()
        if state is None:
            rng = random.Random(f"alf.pbt:{self.settings.seed}:initial")
            values = [m.initial_values(self.settings.population, rng) for m in self.mutations]
            state = PopulationState(
                settings=self.settings,
                hyperparameters=[
                    {m.name: column[i] for m, column in zip(self.mutations, values, strict=True)}
                    for i in range(self.settings.population)
                ],
            )
        state.save(self.root_dir)  # first: a directory with members has a pbt.json
        for index in range(self.settings.population):
            write_mutable_bindings(
                member_dir(self.root_dir, index), [m.key for m in self.mutations]
            )
        return state

    def _release(self) -> None:
        """Releases the population's lock (on any end of :meth:`run`)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _spec(self, state: PopulationState, index: int) -> RunSpec:
        hyperparameters = state.hyperparameters[index]
        return RunSpec(
            run_dir=member_dir(self.root_dir, index),
            conf=self.settings.conf,
            conf_params=(
                *self.settings.conf_params,
                f"TrainerConfig.num_env_steps={self.settings.budget(state.round)}",
                "TrainerConfig.num_iterations=0",
                f"TrainerConfig.random_seed={self.settings.member_seed(index)}",
                *(m.binding(hyperparameters[m.name]) for m in self.mutations),
            ),
            threads=self.threads,
        )

    def _describe(self, hyperparameters: dict[str, int | float]) -> str:
        return ", ".join(m.binding(hyperparameters[m.name]) for m in self.mutations)

    # ------------------------------------------------------------------- loop
    def request_stop(self) -> None:
        """Stops the round: the running members checkpoint and exit (rerun to continue)."""
        self._stop = True

    def run(self) -> int:
        """Trains the population to its last round (or a stop); returns 0,
        :data:`EXIT_FAILED` (a member failed: :attr:`failure`) or
        :data:`EXIT_INTERRUPTED`.

        Raises:
            PopulationStateError: see :meth:`check_root_dir`; a donor's checkpoint gone.
            MutationError: the members never used a ``--mutate`` binding.
        """
        try:
            state = self._open()
            return self._run_rounds(state)
        finally:
            self._release()

    def _run_rounds(self, state: PopulationState) -> int:
        total = self.settings.num_rounds
        self.out(
            f"pbt: population of {self.settings.population} in {self.root_dir}: round "
            f"{min(state.round + 1, total)} of {total} ({state.phase}), "
            f"{self.settings.interval:,} env steps per round, {self.jobs} at once"
        )
        while state.phase != DONE:
            if state.phase == TRAIN:
                code = self._train_round(state)
                if code is not None:
                    return code
                self._end_round(state)
            else:
                self._exploit(state)
        self._print_result(state)
        return 0

    def run_with_signals(self) -> int:
        """:meth:`run` with SIGINT/SIGTERM stopping the round cleanly (a second one
        kills the members without checkpoints)."""
        return run_stopping_on_signals(
            self.run,
            request_stop=self.request_stop,
            running=lambda: [m.job for m in self._members if m.state == "running" and m.job],
            announce=lambda name: self.out(
                f"pbt: {name}: stopping the members (each writes a checkpoint); rerun the "
                "command to continue"
            ),
        )

    def _train_round(self, state: PopulationState) -> int | None:
        """Trains every member to the round's budget; None when all did, else the exit
        status (a failure, a stop)."""
        budget = self.settings.budget(state.round)
        self._members = [
            _Member(index=i, run_dir=member_dir(self.root_dir, i))
            for i in range(self.settings.population)
        ]
        for member in self._members:
            status = layout.read_status(member.run_dir) or {}
            if status.get("state") == layout.RunStatus.FINISHED and reached_budget(
                status, (budget, 0)
            ):
                member.state = "done"
        done = sum(m.state == "done" for m in self._members)
        self.out(
            f"pbt: round {state.round + 1}/{self.settings.num_rounds}: training to "
            f"{budget:,} env steps ({done} of {len(self._members)} members already there)"
        )
        while True:
            for member in self._members:
                if member.state == "running":
                    self._reap(member, state)
            failed = [m for m in self._members if m.state == "failed"]
            if failed and not self.failure:
                self.failure = f"member-{failed[0].index} failed in round {state.round + 1}: "
                self.failure += f"{failed[0].error} (log: {failed[0].job.log_path})"
                self.request_stop()
            running = [m for m in self._members if m.state == "running"]
            if self._stop:
                for member in running:
                    member.job.terminate()
                if not running:
                    return EXIT_FAILED if self.failure else EXIT_INTERRUPTED
            else:
                pending = [m for m in self._members if m.state == "pending"]
                for member in pending[: max(0, self.jobs - len(running))]:
                    self._start(member, state)
                if all(m.state == "done" for m in self._members):
                    return None
            time.sleep(self.poll_s)

    def _start(self, member: _Member, state: PopulationState) -> None:
        member.job = self.launcher.launch(self._spec(state, member.index))
        member.state = "running"
        name = f"member-{member.index}"
        if member.job.adopted:
            self.out(f"pbt: adopted {name}: pid {member.job.pid} still trains in it")
        else:
            shown = self._describe(state.hyperparameters[member.index])
            self.out(f"pbt: started {name}: {shown} (log: {member.job.log_path})")

    def _reap(self, member: _Member, state: PopulationState) -> None:
        """Looks at a running member: done, failed, or to be resumed."""
        job = member.job
        code = job.poll()
        if code is None:
            return
        name = f"member-{member.index}"
        status = layout.read_status(member.run_dir) or {}
        reached = status.get("state")
        if job.killed:  # a second Ctrl-C
            job.after_kill()
            member.state = "stopped"
        elif code == 0 and reached == layout.RunStatus.FINISHED:
            member.state = "done"
            score = read_objective(member.run_dir, "last")
            shown = "no evaluation" if score is None else f"last eval {score:.2f}"
            self.out(f"pbt: {name} finished round {state.round + 1}: {shown}")
        elif self._stop:
            member.state = "stopped"
        elif reached == layout.RunStatus.FAILED or (
            code > 0 and reached not in (layout.RunStatus.STOPPED, "interrupted")
        ):
            member.state, member.error = "failed", job.last_error_line()
            self.out(f"pbt: FAILED {name} (exit {code}): {member.error}")
        elif member.relaunches >= MAX_RELAUNCHES:
            member.state = "failed"
            member.error = f"stopped {member.relaunches + 1} times before the end of the round"
        else:  # killed or stopped from outside, or an adopted run that stopped
            member.relaunches += 1
            member.state = "pending"
            why = f"killed by signal {-code}" if code < 0 else f"{reached or 'ended'}"
            self.out(f"pbt: {name} {why} before the end of the round; resuming it")

    def _scores(self) -> list[float | None]:
        return [
            read_objective(member_dir(self.root_dir, i), "last")
            for i in range(self.settings.population)
        ]

    def _end_round(self, state: PopulationState) -> None:
        """Records the round in the lineage and decides its exploit step (none after
        the last round); the state goes to :data:`EXPLOIT` or :data:`DONE`."""
        self._check_mutations_used()
        scores = self._scores()
        last = state.round + 1 >= self.settings.num_rounds
        plan = [] if last else self._plan(state, scores)
        by_member = {step.member: step for step in plan}
        ranks = {index: rank for rank, index in enumerate(rank_members(scores))}
        records = []
        for index, score in enumerate(scores):
            step = by_member.get(index)
            run_dir = member_dir(self.root_dir, index)
            records.append(
                {
                    "round": state.round,
                    "member": index,
                    "env_steps": run_progress(run_dir)["env_steps"],
                    "hyperparameters": state.hyperparameters[index],
                    "score": score,
                    "rank": ranks[index],
                    "copied_from": None if step is None else step.donor,
                    "checkpoint": None if step is None else self._checkpoint_name(step),
                    "next_hyperparameters": None
                    if last
                    else (step.hyperparameters if step else state.hyperparameters[index]),
                }
            )
        state.lineage = [r for r in state.lineage if r["round"] != state.round] + records
        state.plan, state.phase = plan, DONE if last else EXPLOIT
        state.save(self.root_dir)
        shown = ", ".join(
            f"member-{i} {'-' if s is None else f'{s:.2f}'}" for i, s in enumerate(scores)
        )
        self.out(f"pbt: round {state.round + 1} scores (last eval): {shown}")

    def _checkpoint_name(self, step: Exploit) -> str:
        return f"member-{step.donor}/{layout.CHECKPOINT_DIR}/ckpt-{step.step}.pt"

    def _plan(self, state: PopulationState, scores: list[float | None]) -> list[Exploit]:
        """The round's exploit steps: seeded by the population's seed and the round, so
        the same files give the same plan."""
        rng = random.Random(f"alf.pbt:{self.settings.seed}:round-{state.round}")
        plan = []
        for member, donor in plan_exploit(scores, quantile=self.settings.quantile, rng=rng):
            step = newest_checkpoint(member_dir(self.root_dir, donor))
            if step is None:
                raise PopulationStateError(f"member-{donor} has no checkpoint to copy")
            hyperparameters = {
                m.name: m.perturb(
                    state.hyperparameters[donor][m.name],
                    rng,
                    factors=self.settings.perturb,
                    resample_probability=self.settings.resample_probability,
                )
                for m in self.mutations
            }
            plan.append(
                Exploit(member=member, donor=donor, step=step, hyperparameters=hyperparameters)
            )
        return plan

    def _exploit(self, state: PopulationState) -> None:
        """Carries out the round's plan (again, if it was interrupted): the bottom
        members take their donors' checkpoints and new hyperparameters; then the next
        round starts."""
        for step in state.plan:
            copy_checkpoint(
                member_dir(self.root_dir, step.donor),
                step.step,
                member_dir(self.root_dir, step.member),
            )
            before = self._describe(state.hyperparameters[step.member])
            state.hyperparameters[step.member] = dict(step.hyperparameters)
            self.out(
                f"pbt: member-{step.member} copies {self._checkpoint_name(step)}: {before} "
                f"-> {self._describe(step.hyperparameters)}"
            )
        state.round, state.phase, state.plan = state.round + 1, TRAIN, []
        state.save(self.root_dir)

    def _check_mutations_used(self) -> None:
        """Refuses ``--mutate`` bindings the members never used (not in their operative
        ``config.gin``): the population would mutate nothing."""
        used = layout.read_bindings(member_dir(self.root_dir, 0))
        unused = [m for m in self.mutations if m.key not in used]
        if used and unused:
            raise MutationError(
                f"--mutate '{unused[0].text()}': the members never used {unused[0].key} (it "
                f"is not in {member_dir(self.root_dir, 0)}/{layout.CONFIG_FILE}); mutate a "
                "parameter the config uses"
            )

    def _print_result(self, state: PopulationState) -> None:
        scores = self._scores()
        best = rank_members(scores)[0]
        shown = "no evaluation" if scores[best] is None else f"last eval {scores[best]:.2f}"
        self.out(
            f"pbt: all {self.settings.num_rounds} rounds done; best member-{best} ({shown}, "
            f"run dir {member_dir(self.root_dir, best)}):"
        )
        for m in self.mutations:
            self.out(f"{m.name} = {m.gin_value(state.hyperparameters[best][m.name])}")
