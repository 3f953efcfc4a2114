"""Hyperparameter tuning on Optuna: every trial is an ordinary ``alf.bin.train`` run.

The objective is a run's evaluation return (its last or its best evaluation). Each
evaluation is reported to Optuna as an intermediate value at the run's env steps, so a
pruner can stop unpromising trials (with a checkpoint, like any stopped run). The study
lives in ``root_dir/study.db`` (SQLite): running the same command again continues it,
relaunching the trials that were interrupted from their checkpoints.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from alf.errors import UserError
from alf.experiments.grid import split_top_level
from alf.experiments.launcher import RunSpec, run_holder, run_stopping_on_signals
from alf.experiments.launchers.base import Job, Launcher
from alf.experiments.launchers.local import LocalLauncher
from alf.run_dir import layout

__all__ = [
    "EXIT_NO_TRIAL_FINISHED",
    "SearchSpaceError",
    "StudyFileError",
    "Tuner",
    "TuneSpace",
    "check_space",
    "parse_space",
    "read_objective",
]

STUDY_FILE = "study.db"
JOURNAL_FILE = "study.journal"
"""The study of ``--storage=journal``: Optuna's journal file, which several processes
(on several machines, through a shared filesystem) can write at once."""
STUDY_NAME = "alf"
OBJECTIVES = ("last", "best")


class SearchSpaceError(UserError, ValueError):
    """A ``--space`` flag that does not parse, or a value of it its parameter refuses."""


class StudyFileError(UserError, ValueError):
    """A ``study.db`` that cannot be read as an Optuna study (corrupt, not SQLite)."""


EXIT_NO_TRIAL_FINISHED = 1
"""Exit status of a tuner whose study has no finished trial (every one failed or was
pruned)."""


@dataclass(frozen=True)
class TuneSpace:
    """One searched parameter.

    Attributes:
        name: the gin binding name, ``Name.param``.
        kind: ``uniform``, ``loguniform``, ``int``, ``logint`` or ``choice``.
        args: the bounds (numbers) or the choices (gin text).
    """

    name: str
    kind: str
    args: tuple[Any, ...]

    def distribution(self) -> Any:
        """The Optuna distribution."""
        import optuna.distributions as dist

        if self.kind == "uniform":
            return dist.FloatDistribution(self.args[0], self.args[1])
        if self.kind == "loguniform":
            return dist.FloatDistribution(self.args[0], self.args[1], log=True)
        if self.kind == "int":
            return dist.IntDistribution(self.args[0], self.args[1])
        if self.kind == "logint":
            return dist.IntDistribution(self.args[0], self.args[1], log=True)
        return dist.CategoricalDistribution(list(self.args))

    def gin_value(self, value: Any) -> str:
        """The gin text of a sampled ``value``."""
        if isinstance(value, float):
            return repr(value)
        return str(value)

    def example_value(self) -> str:
        """A value in the space, to check the binding's name before tuning."""
        return self.gin_value(self.args[0])

    def values_to_check(self) -> list[str]:
        """Gin texts of values that stand for every value the space can give: each
        choice; both bounds of ``int``/``logint``; both bounds of ``uniform``/
        ``loguniform`` and a value between them that is not a whole number (what the
        sampler gives, which an ``int`` parameter refuses)."""
        if self.kind == "choice":
            return [self.gin_value(a) for a in self.args]
        low, high = self.args
        values = [low, high]
        if self.kind in ("uniform", "loguniform"):
            inner = low + (high - low) * 0.37
            if float(inner).is_integer():
                inner = math.nextafter(inner, high)
            values.append(float(inner))
        return [self.gin_value(v) for v in values]

    def text(self) -> str:
        """The flag's canonical text."""
        return f"{self.name}={self.kind}({', '.join(str(a) for a in self.args)})"


_SPACE_RE = re.compile(r"^\s*([A-Za-z_][\w./]*\.[A-Za-z_]\w*)\s*=\s*(\w+)\s*\((.*)\)\s*$", re.S)
_KINDS = ("uniform", "loguniform", "int", "logint", "choice")


def parse_space(flag: str) -> TuneSpace:
    """Parses ``'Name.param=loguniform(1e-5, 1e-2)'`` (also ``uniform(a, b)``,
    ``int(a, b)``, ``logint(a, b)``, ``choice(v1, v2, ...)`` with gin values).

    Raises:
        SearchSpaceError: naming the flag and what is wrong.
    """
    match = _SPACE_RE.match(flag)
    usage = "expected 'Name.param=KIND(...)' with KIND one of " + ", ".join(_KINDS)
    if not match:
        raise SearchSpaceError(f"--space '{flag}': {usage}")
    name, kind, inner = match.groups()
    if kind not in _KINDS:
        raise SearchSpaceError(f"--space '{flag}': unknown kind '{kind}'; {usage}")
    try:
        args = split_top_level(inner)
    except ValueError as err:
        raise SearchSpaceError(f"--space '{flag}': {err}") from None
    if any(not a for a in args):
        raise SearchSpaceError(f"--space '{flag}': empty argument")
    if kind == "choice":
        if len(args) < 2:
            raise SearchSpaceError(f"--space '{flag}': choice needs at least two values")
        return TuneSpace(name=name, kind=kind, args=tuple(args))
    if len(args) != 2:
        raise SearchSpaceError(f"--space '{flag}': {kind} takes two bounds, low and high")
    number = int if kind in ("int", "logint") else float
    try:
        low, high = (number(a) for a in args)
    except ValueError:
        raise SearchSpaceError(
            f"--space '{flag}': the bounds of {kind} must be {number.__name__}s"
        ) from None
    if not low < high:
        raise SearchSpaceError(f"--space '{flag}': low must be below high")
    if kind in ("loguniform", "logint") and low <= 0:
        raise SearchSpaceError(f"--space '{flag}': {kind} needs a positive low bound")
    return TuneSpace(name=name, kind=kind, args=(low, high))


def check_space(
    check: Callable[[list[str]], str | None],
    conf_params: Sequence[str],
    space: Sequence[TuneSpace],
) -> None:
    """Checks every value of every searched parameter against its parameter before the
    first trial (with the other parameters at their first value).

    Args:
        check: loads the config with the given bindings; returns the error line or None
            (:func:`alf.experiments.launcher.check_bindings` with the config file).
        conf_params: the bindings given to every trial.
        space: the searched parameters.

    Raises:
        SearchSpaceError: naming the flag, the value and why it is refused (a name the
            config does not know is reported as such, without a value).
    """
    base = {s.name: s.example_value() for s in space}
    error = check([*conf_params, *(f"{name}={value}" for name, value in base.items())])
    if error:
        raise SearchSpaceError(error)
    for searched in space:
        for value in searched.values_to_check():
            values = {**base, searched.name: value}
            error = check([*conf_params, *(f"{name}={v}" for name, v in values.items())])
            if error:
                raise SearchSpaceError(f"--space '{searched.text()}': value {value}: {error}")


def read_objective(run_dir: str, objective: str) -> float | None:
    """The run's last (or best) evaluation return, None if it has none."""
    returns = [
        float(r["eval/average_return"])
        for r in layout.read_progress(run_dir)
        if "eval/average_return" in r
    ]
    returns = [r for r in returns if math.isfinite(r)]
    if not returns:
        return None
    return returns[-1] if objective == "last" else max(returns)


@dataclass
class _Trial:
    trial: Any  # optuna.trial.Trial
    process: Job
    reported_steps: set[int] | None = None  # env steps already reported
    pruned: bool = False
    evaluations: int = 0


class Tuner:
    """Runs an Optuna study whose trials are ALF runs in ``root_dir/trial-<n>/``.

    Args:
        conf: the gin config file.
        root_dir: the study's directory (``study.db`` and the trials' run dirs).
        space: the searched parameters.
        trials: the study's total number of trials (finished, pruned and failed count).
        conf_params: bindings given to every trial (before the sampled ones).
        objective: ``"last"`` or ``"best"`` evaluation return.
        jobs: trials at once.
        pruner: ``"median"`` or ``"none"``.
        prune_startup_trials: trials finished before the pruner acts.
        prune_warmup_steps: env steps of a trial before it can be pruned.
        seed: the sampler's seed.
        out: where lines are printed.
        launcher: starts the trials (default: local child processes).
        storage: where the study lives: ``None`` (``root_dir/study.db``, SQLite),
            ``"journal"`` (``root_dir/study.journal``, Optuna's journal file, safe for
            several processes) or an RDB URL (``postgresql://...``, ``mysql://...``).
    """

    def __init__(
        self,
        *,
        conf: str,
        root_dir: str,
        space: Sequence[TuneSpace],
        trials: int,
        conf_params: Sequence[str] = (),
        objective: str = "last",
        jobs: int = 1,
        pruner: str = "median",
        prune_startup_trials: int = 3,
        prune_warmup_steps: int = 0,
        seed: int = 0,
        out: Callable[[str], None] = print,
        launcher: Launcher | None = None,
        storage: str | None = None,
    ) -> None:
        if trials < 1:
            raise ValueError(f"--trials must be >= 1, got {trials}")
        if jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {jobs}")
        if objective not in OBJECTIVES:
            raise ValueError(f"--objective must be one of {OBJECTIVES}, got '{objective}'")
        if pruner not in ("median", "none"):
            raise ValueError(f"--pruner must be 'median' or 'none', got '{pruner}'")
        names = [s.name for s in space]
        if not space or len(set(names)) != len(names):
            raise ValueError("--space: give each searched parameter once (at least one)")
        self.conf = os.path.abspath(os.path.expanduser(conf))
        self.root_dir = os.path.abspath(os.path.expanduser(root_dir))
        self.space = list(space)
        self.num_trials = trials
        self.conf_params = tuple(conf_params)
        self.objective = objective
        self.jobs = jobs
        self.out = out
        self._pruner_name = pruner
        self._prune_startup_trials = prune_startup_trials
        self._prune_warmup_steps = prune_warmup_steps
        self._seed = seed
        self.launcher: Launcher = launcher or LocalLauncher()
        self.storage = storage
        self._stop = False
        self._running: list[_Trial] = []
        self._resume: list[tuple[Any, set[int]]] = []  # open trials to launch again
        self.first_failure = ""
        """The first trial failure of this command, as a line (empty: none)."""

    # ------------------------------------------------------------------ study
    def _open_study(self) -> Any:
        import sqlite3

        import optuna
        from sqlalchemy.exc import SQLAlchemyError  # optuna's storage layer

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        os.makedirs(self.root_dir, exist_ok=True)
        pruner = (
            optuna.pruners.MedianPruner(
                n_startup_trials=self._prune_startup_trials,
                n_warmup_steps=self._prune_warmup_steps,
            )
            if self._pruner_name == "median"
            else optuna.pruners.NopPruner()
        )
        path, storage = self._storage()
        self._where = path
        try:
            study = optuna.create_study(
                storage=storage,
                study_name=STUDY_NAME,
                direction="maximize",
                load_if_exists=True,
                sampler=optuna.samplers.TPESampler(seed=self._seed),
                pruner=pruner,
            )
        except (SQLAlchemyError, sqlite3.Error) as err:
            reason = str(getattr(err, "orig", None) or err).splitlines()[0]
            raise StudyFileError(
                f"study file '{path}' cannot be read as an Optuna study ({reason}); "
                "move it away to start a new study"
            ) from None
        identity = {
            "conf": self.conf,
            "space": [s.text() for s in self.space],
            "objective": self.objective,
        }
        saved = {key: study.user_attrs.get(key) for key in identity}
        if all(v is None for v in saved.values()):
            for key, value in identity.items():
                study.set_user_attr(key, value)
        elif saved != identity:
            changed = ", ".join(k for k in identity if saved[k] != identity[k])
            raise ValueError(
                f"root_dir '{self.root_dir}' holds a study with a different {changed}; "
                "use another --root_dir"
            )
        return study

    def _storage(self) -> tuple[str, Any]:
        """The study's location as shown, and the storage Optuna opens."""
        if self.storage is None:
            path = os.path.join(self.root_dir, STUDY_FILE)
            return path, f"sqlite:///{path}"
        if self.storage == "journal":
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

            path = os.path.join(self.root_dir, JOURNAL_FILE)
            # The open(O_EXCL) lock, unlike flock, holds on NFS.
            backend = JournalFileBackend(path, lock_obj=JournalFileOpenLock(path))
            return path, JournalStorage(backend)
        return self.storage, self.storage

    def _bindings(self, params: dict[str, Any]) -> tuple[str, ...]:
        return tuple(f"{s.name}={s.gin_value(params[s.name])}" for s in self.space)

    def _run_dir(self, number: int) -> str:
        return os.path.join(self.root_dir, f"trial-{number:04d}")

    def _launch(self, trial: Any, reported_steps: set[int]) -> None:
        spec = RunSpec(
            run_dir=self._run_dir(trial.number),
            conf=self.conf,
            conf_params=(*self.conf_params, *self._bindings(trial.params)),
        )
        process = self.launcher.launch(spec)  # adopts a training still going on there
        self._running.append(
            _Trial(trial=trial, process=process, reported_steps=set(reported_steps))
        )
        shown = ", ".join(self._bindings(trial.params))
        verb = f"adopted (pid {process.pid} still trains in it)" if process.adopted else "started"
        self.out(f"tune: trial {trial.number} {verb}: {shown} (log: {process.log_path})")

    def _settle_finished(self, study: Any, trial: Any) -> bool:
        """Tells the study the result of an open trial whose run finished while no tuner
        watched it (the tuner was killed); returns whether it did."""
        from optuna.trial import TrialState

        run_dir = self._run_dir(trial.number)
        status = layout.read_status(run_dir) or {}
        if run_holder(run_dir) is not None or status.get("state") != layout.RunStatus.FINISHED:
            return False
        value = read_objective(run_dir, self.objective)
        if value is None:
            study.tell(trial, state=TrialState.FAIL)
            self.out(f"tune: trial {trial.number} had finished without an evaluation: failed")
        else:
            study.tell(trial, value)
            self.out(
                f"tune: trial {trial.number} had finished while no tuner watched it: "
                f"{self.objective} eval {value:.2f}"
            )
        return True

    # ------------------------------------------------------------------- loop
    def request_stop(self) -> None:
        """Stops launching trials and asks the running ones to checkpoint and exit
        (they stay open in the study and are resumed by the next run of the command)."""
        self._stop = True

    def run(self, poll_s: float = 0.5) -> int:
        """Runs trials until the study has :attr:`num_trials`; returns 0,
        :data:`EXIT_NO_TRIAL_FINISHED` when no trial of the study finished (130 when
        stopped).

        Raises:
            StudyFileError: ``study.db`` is not an Optuna study.
            ValueError: ``root_dir`` holds the study of another config or space.
        """
        import optuna
        from optuna.trial import TrialState

        study = self._open_study()
        distributions = {s.name: s.distribution() for s in self.space}
        # Trials left open by an interrupted tuner: told now if their run finished,
        # else resumed from their checkpoints (or adopted, if their process still runs).
        # Optuna has no public way back from a stored trial to a reportable one; its
        # trial id is what its Trial objects are made of. Evaluations reported before
        # the interruption are not reported again.
        stale = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.RUNNING]
        resume = self._resume
        for frozen in stale:
            trial = optuna.trial.Trial(study, frozen._trial_id)
            if not self._settle_finished(study, trial):
                resume.append((trial, set(frozen.intermediate_values)))
        done = len(study.get_trials(deepcopy=False)) - len(resume)
        self.out(
            f"tune: study {self._where}: {done} trials done, "
            f"{len(resume)} to resume, {max(0, self.num_trials - done - len(resume))} to start"
        )
        while True:
            self._poll(study)
            if self._stop:
                for item in self._running:
                    item.process.terminate()
                if not self._running:
                    break
            else:
                while len(self._running) < self.jobs and (
                    resume or len(study.get_trials(deepcopy=False)) < self.num_trials
                ):
                    trial, known = resume.pop(0) if resume else (study.ask(distributions), set())
                    self._launch(trial, known)
                if not self._running:
                    break
            time.sleep(poll_s)
        finished = self._print_best(study)
        if self._stop:
            return 130
        return 0 if finished else EXIT_NO_TRIAL_FINISHED

    def run_with_signals(self) -> int:
        """:meth:`run` with SIGINT/SIGTERM stopping the study cleanly (a second one kills
        the trials without checkpoints)."""
        return run_stopping_on_signals(
            self.run,
            request_stop=self.request_stop,
            running=lambda: [item.process for item in self._running],
            announce=lambda name: self.out(
                f"tune: {name}: stopping the running trials (each writes a checkpoint)"
            ),
        )

    def _poll(self, study: Any) -> None:
        from optuna.trial import TrialState

        for item in list(self._running):
            run_dir = item.process.spec.run_dir
            self._report_evaluations(item, run_dir)
            code = item.process.poll()
            if code is None:
                continue
            self._running.remove(item)
            number = item.trial.number
            state = (layout.read_status(run_dir) or {}).get("state")
            if item.process.killed:  # a second Ctrl-C
                item.process.after_kill()
                self.out(f"tune: trial {number} killed (resumed by the next tune command)")
            elif (
                item.process.adopted
                and not (item.pruned or self._stop)
                and state
                in (
                    layout.RunStatus.STOPPED,
                    "interrupted",
                )
            ):
                self._resume.append((item.trial, item.reported_steps or set()))
                self.out(f"tune: adopted trial {number} stopped ({state}); resuming it")
            elif item.pruned:
                study.tell(item.trial, state=TrialState.PRUNED)
                self.out(f"tune: trial {number} pruned after {item.evaluations} evaluations")
            elif code == 0 and state == layout.RunStatus.FINISHED:
                value = read_objective(run_dir, self.objective)
                if value is None:
                    study.tell(item.trial, state=TrialState.FAIL)
                    self.out(f"tune: trial {number} has no evaluation; counted as failed")
                else:
                    study.tell(item.trial, value)
                    self.out(f"tune: trial {number} finished: {self.objective} eval {value:.2f}")
            elif self._stop or state == layout.RunStatus.STOPPED:
                self.out(f"tune: trial {number} stopped (resumed by the next tune command)")
            else:
                study.tell(item.trial, state=TrialState.FAIL)
                failure = (
                    f"trial {number} FAILED (exit {code}): {item.process.last_error_line()} "
                    f"(log: {item.process.log_path})"
                )
                self.first_failure = self.first_failure or failure
                self.out(f"tune: {failure}")

    def _report_evaluations(self, item: _Trial, run_dir: str) -> None:
        evals = [r for r in layout.read_progress(run_dir) if "eval/average_return" in r]
        new = False
        for record in evals:
            step, value = int(record["env_steps"]), float(record["eval/average_return"])
            if step in item.reported_steps or not math.isfinite(value):
                continue
            item.trial.report(value, step=step)
            item.reported_steps.add(step)
            new = True
        item.evaluations = len(evals)
        if new and not item.pruned and not self._stop and item.trial.should_prune():
            item.pruned = True
            item.process.terminate()

    def _print_best(self, study: Any) -> bool:
        """Prints the trial counts and the best trial; returns whether one finished."""
        from optuna.trial import TrialState

        complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
        counts = {
            state.name.lower(): sum(t.state == state for t in study.get_trials(deepcopy=False))
            for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        }
        self.out("tune: " + ", ".join(f"{n} {name}" for name, n in counts.items()) + " trials")
        if not complete:
            self.out("tune: no trial has finished yet")
            return False
        best = study.best_trial
        self.out(
            f"tune: best trial {best.number} ({self.objective} evaluation return "
            f"{best.value:.2f}, run dir {os.path.join(self.root_dir, f'trial-{best.number:04d}')}):"
        )
        for binding in self._bindings(best.params):
            name, value = binding.split("=", 1)
            self.out(f"{name} = {value}")
        return True
