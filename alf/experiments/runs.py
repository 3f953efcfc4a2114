"""Reading run directories and grouping them into seeds of one configuration.

A run is any directory with a ``config.gin`` or a ``progress.jsonl`` (see
:mod:`alf.run_dir.layout`): an ALF run, a run of a sweep (``D/<grid point>/seed-<k>/``)
or a run of another framework written in the same format, whose ``run_info.json`` names
its ``framework``, ``env_name``, ``algorithm`` and ``seed``. Runs are grouped by their
configuration without the seed: every ``config.gin`` binding but
``TrainerConfig.random_seed``, or (without a config) the ``run_info.json`` fields
``framework``, ``env_name``, ``algorithm``, ``hyperparameters`` and ``num_env_steps``.

A run trained on offline data alone takes no env steps: its evaluations are placed by
training iteration instead (:attr:`Run.x_unit`). A run whose ``run_info.json`` records
``reference_returns`` (a dataset's random and expert returns, see
:mod:`alf.run_dir.metadata`) has D4RL-normalised scores (:meth:`Run.normalized`).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from alf.errors import UserError
from alf.run_dir import layout
from alf.run_dir.metadata import read_reference_returns

__all__ = [
    "ALGORITHM_BINDING",
    "ENV_BINDING",
    "EVAL_RETURN",
    "SEED_BINDING",
    "Run",
    "RunGroup",
    "UnreadableRunError",
    "group_runs",
    "load_run",
    "load_runs",
    "no_run_error",
]

SEED_BINDING = "TrainerConfig.random_seed"
ENV_BINDING = "create_environment.env_name"
ALGORITHM_BINDING = "TrainerConfig.algorithm_ctor"
EVAL_RETURN = "eval/average_return"

# run_info.json fields that identify the configuration of a run without config.gin.
_INFO_KEY_FIELDS = ("framework", "env_name", "algorithm", "hyperparameters", "num_env_steps")
_SEED_DIR_RE = re.compile(r"^seed-(-?\d+)$")
_T = TypeVar("_T")
_MAX_LABEL_BINDINGS = 3


@dataclass(kw_only=True)
class Run:
    """One run directory as read from its files.

    Attributes:
        path: the run directory (absolute).
        group_key: what identifies its configuration without the seed.
        env: environment name (``'?'`` if unknown).
        algorithm: algorithm name, e.g. ``PPOAlgorithm`` or ``SB3 PPO``.
        seed: the random seed, None if unknown.
        grid_point: the name of its grid point: the parent directory for a
            ``seed-<k>`` directory, else the run directory's own name.
        bindings: the ``config.gin`` bindings (empty without one).
        metadata: ``run_info.json`` (empty without one).
        eval_steps: env steps of the evaluations, increasing.
        eval_elapsed_s: wall-clock seconds of training at each evaluation (NaN if not
            recorded).
        eval_returns: average evaluation return at each evaluation (finite ones only).
        nonfinite_evals: evaluation records whose return is NaN or infinite (left out of
            the curve and every statistic).
        env_steps: the last recorded env steps (0 without any record).
        wall_time_s: the last recorded wall-clock seconds of training.
        final_episode_std: the standard deviation of the episode returns of the latest
            evaluation (``eval/return_std``; NaN where not recorded).
        status: ``status.json``'s state (``running``, ``finished``, ``stopped``,
            ``failed``, ``interrupted``), or ``unknown``.
        label: the readable name of its group (set by :func:`group_runs`).
        x_unit: what :attr:`eval_steps` counts: ``env_steps``, or ``iterations`` for a
            run that trained on offline data alone (all its evaluations at 0 env steps).
        reference_returns: ``(random, expert)`` returns of the dataset it trained on
            (``run_info.json``'s ``reference_returns``), None if not recorded.
    """

    path: str
    group_key: tuple[Any, ...]
    env: str
    algorithm: str
    seed: int | None
    grid_point: str
    bindings: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    eval_steps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    eval_elapsed_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    eval_returns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    nonfinite_evals: int = 0
    env_steps: int = 0
    wall_time_s: float = 0.0
    final_episode_std: float = float("nan")
    status: str = "unknown"
    label: str = ""
    x_unit: str = "env_steps"
    reference_returns: tuple[float, float] | None = None

    @property
    def has_eval(self) -> bool:
        """Whether the run has at least one evaluation record with a finite return."""
        return len(self.eval_returns) > 0

    def no_eval_reason(self) -> str:
        """Why the run has no usable evaluation, for a note: ``no evaluation yet`` or
        that its evaluations are all non-finite."""
        if self.nonfinite_evals:
            n = self.nonfinite_evals
            return f"its {n} evaluation{'' if n == 1 else 's'} are non-finite (NaN or inf)"
        return f"no evaluation yet ({self.status})"

    @property
    def final_return(self) -> float:
        """The return of the latest evaluation (NaN without one)."""
        return float(self.eval_returns[-1]) if self.has_eval else float("nan")

    @property
    def best_return(self) -> float:
        """The best evaluation return (NaN without one)."""
        return float(np.max(self.eval_returns)) if self.has_eval else float("nan")

    @property
    def steps_per_s(self) -> float:
        """Env steps per wall-clock second (NaN before any record)."""
        return self.env_steps / self.wall_time_s if self.wall_time_s > 0 else float("nan")

    def normalized(self, returns: Any) -> Any:
        """D4RL's normalised score of ``returns`` (a float or an array):
        ``100 * (R - random) / (expert - random)``; NaN without reference returns."""
        if self.reference_returns is None:
            return np.full(np.shape(returns), np.nan) if np.ndim(returns) else float("nan")
        low, high = self.reference_returns
        scores = 100.0 * (np.asarray(returns, dtype=float) - low) / (high - low)
        return scores if np.ndim(returns) else float(scores)


@dataclass(kw_only=True)
class RunGroup:
    """The seeds of one configuration.

    Attributes:
        key: the configuration (see :attr:`Run.group_key`).
        label: a short readable name, unique among the groups loaded together.
        env: environment name.
        algorithm: algorithm name.
        runs: the runs, sorted by seed then path.
    """

    key: tuple[Any, ...]
    label: str
    env: str
    algorithm: str
    runs: list[Run]

    @property
    def evaluated(self) -> list[Run]:
        """The runs with at least one evaluation (those that enter the statistics)."""
        return [r for r in self.runs if r.has_eval]


def _strip_quotes(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _algorithm_name(ctor: str) -> str:
    name = ctor.strip().lstrip("@")
    if name.endswith("()"):
        name = name[:-2]
    return name


def _as_int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _x_unit(records: Sequence[dict[str, Any]]) -> str:
    """``iterations`` when the run's evaluations all took place at 0 env steps and after
    some iterations (training on offline data alone), else ``env_steps``."""
    evals = [r for r in records if isinstance(r.get(EVAL_RETURN), (int, float))]
    if evals and all(r.get("env_steps") == 0 for r in evals):
        if any(_is_number(r.get("iteration")) and r["iteration"] > 0 for r in evals):
            return "iterations"
    return "env_steps"


def _eval_curve(
    records: Sequence[dict[str, Any]], x_unit: str = "env_steps"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(x, elapsed s, return) of the evaluations with a finite return, by x (env steps,
    or iterations for ``x_unit="iterations"``), and how many evaluations had a
    non-finite one; an x evaluated twice (a resumed run redoing work after its
    checkpoint) keeps the later record."""
    key = "iteration" if x_unit == "iterations" else "env_steps"
    by_step: dict[int, tuple[float, float]] = {}
    for record in records:
        value, step = record.get(EVAL_RETURN), record.get(key)
        if not isinstance(value, (int, float)) or not isinstance(step, (int, float)):
            continue
        elapsed = record.get("elapsed_s")
        elapsed = float(elapsed) if isinstance(elapsed, (int, float)) else float("nan")
        by_step[int(step)] = (elapsed, float(value))
    steps = [s for s in sorted(by_step) if math.isfinite(by_step[s][1])]
    return (
        np.asarray(steps, dtype=np.int64),
        np.asarray([by_step[s][0] for s in steps], dtype=float),
        np.asarray([by_step[s][1] for s in steps], dtype=float),
        len(by_step) - len(steps),
    )


class UnreadableRunError(UserError, ValueError):
    """A run directory whose ``config.gin`` or ``progress.jsonl`` cannot be read (not
    UTF-8 text, no permission)."""


def _read_run_file(path: str, name: str, read: Callable[[str], _T]) -> _T:
    """``read(path)``, with a file of the run that is not UTF-8 text or not readable
    raised as :class:`UnreadableRunError` naming the file."""
    try:
        return read(path)
    except UnicodeDecodeError as err:
        byte = err.object[err.start : err.start + 1].hex()
        why = f"is not UTF-8 text (byte 0x{byte})"
    except OSError as err:
        why = f"cannot be read ({err.strerror or err})"
    raise UnreadableRunError(f"{os.path.join(path, name)} {why}")


def load_run(path: str) -> Run:
    """Reads the run directory ``path`` (a run being written is fine)."""
    path = os.path.abspath(path)
    bindings = _read_run_file(path, layout.CONFIG_FILE, layout.read_bindings)
    metadata = layout.read_json(os.path.join(path, layout.METADATA_FILE)) or {}
    name = os.path.basename(path)
    seed_dir = _SEED_DIR_RE.match(name)
    grid_point = os.path.basename(os.path.dirname(path)) if seed_dir else name
    framework = str(metadata.get("framework", "alf") or "alf")

    if bindings:
        key: tuple[Any, ...] = (
            "config",
            tuple(sorted((k, v) for k, v in bindings.items() if k != SEED_BINDING)),
        )
        env = _strip_quotes(bindings.get(ENV_BINDING, "?"))
        algorithm = _algorithm_name(bindings.get(ALGORITHM_BINDING, "?"))
        seed = _as_int(bindings.get(SEED_BINDING))
    elif metadata:
        fields = {k: metadata[k] for k in _INFO_KEY_FIELDS if k in metadata}
        key = ("run_info", json.dumps(fields, sort_keys=True, default=str))
        env = str(metadata.get("env_name", "?"))
        algorithm = str(metadata.get("algorithm", "?"))
        seed = _as_int(metadata.get("seed"))
    else:
        key = ("directory", os.path.dirname(path) if seed_dir else path)
        env, algorithm, seed = "?", "?", None
    if framework.lower() != "alf":
        algorithm = f"{framework.upper()} {algorithm}"
    if seed is None and seed_dir:
        seed = int(seed_dir.group(1))

    records = _read_run_file(path, layout.PROGRESS_FILE, layout.read_progress)
    x_unit = _x_unit(records)
    steps, elapsed, returns, nonfinite = _eval_curve(records, x_unit)
    env_steps = max((r["env_steps"] for r in records if _is_number(r.get("env_steps"))), default=0)
    wall = max((r["elapsed_s"] for r in records if _is_number(r.get("elapsed_s"))), default=0.0)
    status = layout.read_status(path) or {}
    return Run(
        path=path,
        group_key=key,
        env=env,
        algorithm=algorithm,
        seed=seed,
        grid_point=grid_point,
        bindings=bindings,
        metadata=metadata,
        eval_steps=steps,
        eval_elapsed_s=elapsed,
        eval_returns=returns,
        nonfinite_evals=nonfinite,
        env_steps=int(env_steps),
        wall_time_s=float(wall),
        final_episode_std=_final_episode_std(records),
        status=str(status.get("state", "unknown")),
        x_unit=x_unit,
        reference_returns=read_reference_returns(metadata),
    )


def _final_episode_std(records: list[dict[str, Any]]) -> float:
    """``eval/return_std`` of the latest evaluation with a finite return (NaN if none
    records it)."""
    for record in reversed(records):
        value = record.get("eval/average_return")
        if _is_number(value) and np.isfinite(value):
            std = record.get("eval/return_std")
            return float(std) if _is_number(std) else float("nan")
    return float("nan")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_runs(paths: Iterable[str], *, skipped: Callable[[str], None] | None = None) -> list[Run]:
    """Every run directory at or under ``paths``, read.

    Args:
        paths: directories holding runs.
        skipped: called with one line for each run left out because a file of it cannot
            be read (a ``config.gin`` that is not UTF-8 text...); None: such a run raises.

    Raises:
        UnreadableRunError: a run's file cannot be read and ``skipped`` is None.
    """
    runs = []
    for path in layout.find_run_dirs(paths):
        try:
            runs.append(load_run(path))
        except UnreadableRunError as err:
            if skipped is None:
                raise
            skipped(str(err))
    return runs


def no_run_error(paths: Iterable[str]) -> str | None:
    """The message for the first of ``paths`` holding no run directory, None if each
    holds one (for the command-line tools' argument checks)."""
    for path in paths:
        if layout.find_run_dirs([path]):
            continue
        full = os.path.expanduser(path)
        why = ""
        if not os.path.exists(full):
            why = " (no such directory)"
        elif not os.path.isdir(full):
            why = " (not a directory)"
        return (
            f"no run directory ({layout.CONFIG_FILE} or {layout.PROGRESS_FILE}) under '{path}'{why}"
        )
    return None


def _group_bindings(runs: Sequence[Run]) -> dict[str, Any]:
    """The bindings of a group's runs together (seeds started by a newer ALF may list
    more of them)."""
    return {k: v for r in runs for k, v in r.bindings.items()}


def _differing_bindings(groups: Sequence[list[Run]]) -> list[str]:
    """Binding names whose value is not the same in every one of ``groups``."""
    bindings = [_group_bindings(g) for g in groups]
    names = sorted(set().union(*bindings)) if bindings else []
    skip = {SEED_BINDING, ENV_BINDING, ALGORITHM_BINDING}
    return [n for n in names if n not in skip and len({b.get(n) for b in bindings}) > 1]


def _config_label(runs: list[Run], names: list[str]) -> str:
    label = f"{runs[0].env} {runs[0].algorithm}"
    bindings = _group_bindings(runs)
    shown = [f"{n}={bindings.get(n, '(unset)')}" for n in names[:_MAX_LABEL_BINDINGS]]
    if len(names) > _MAX_LABEL_BINDINGS:
        shown.append(f"+{len(names) - _MAX_LABEL_BINDINGS} more")
    return f"{label} {', '.join(shown)}" if shown else label


def _labels(groups: list[list[Run]]) -> list[str]:
    """Labels: the shared grid point name when it names one group only, else environment
    and algorithm plus the bindings that differ from the groups of the same pair."""
    points = [{r.grid_point for r in g} for g in groups]
    point_count: dict[str, int] = {}
    for p in points:
        if len(p) == 1:
            point_count[next(iter(p))] = point_count.get(next(iter(p)), 0) + 1
    by_pair: dict[tuple[str, str], list[int]] = {}
    for i, g in enumerate(groups):
        by_pair.setdefault((g[0].env, g[0].algorithm), []).append(i)
    labels = []
    for i, g in enumerate(groups):
        if len(points[i]) == 1 and point_count[next(iter(points[i]))] == 1:
            labels.append(next(iter(points[i])))
            continue
        same_pair = [groups[j] for j in by_pair[(g[0].env, g[0].algorithm)]]
        names = _differing_bindings(same_pair) if len(same_pair) > 1 else []
        labels.append(_config_label(g, names))
    seen: dict[str, int] = {}
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
    counter: dict[str, int] = {}
    unique = []
    for label in labels:
        if seen[label] > 1:
            counter[label] = counter.get(label, 0) + 1
            label = f"{label} #{counter[label]}"
        unique.append(label)
    return unique


def _matching_key(key: tuple[Any, ...], groups: dict[tuple[Any, ...], list[Run]]) -> tuple:
    """The key of the group a run of ``key`` belongs to: an existing one whose config
    agrees with it on every binding both have and differs only by ``TrainerConfig``
    settings that one of them lacks (a run written by a newer ALF lists the defaults of
    run settings added since, e.g. trackers: no difference in configuration), else
    ``key`` itself."""
    if key in groups or key[0] != "config":
        return key
    bindings = dict(key[1])
    for other in groups:
        if other[0] == "config" and _agree(bindings, dict(other[1]), lenient=False):
            return other
    return key


def _agree(bindings: dict[str, Any], other: dict[str, Any], *, lenient: bool) -> bool:
    """Whether two runs' bindings are one configuration: equal on every binding both
    have, and a binding only one has is a ``TrainerConfig`` setting (or anything, when
    ``lenient``)."""
    shared = bindings.keys() & other.keys()
    only_one = bindings.keys() ^ other.keys()
    return (
        bool(shared)
        and all(bindings[k] == other[k] for k in shared)
        and (lenient or all(k.startswith("TrainerConfig.") for k in only_one))
    )


def _point_of(runs: list[Run]) -> str | None:
    """The sweep-point directory holding every run of ``runs`` as ``seed-<k>``, if one does."""
    points = {
        os.path.dirname(r.path) if _SEED_DIR_RE.match(os.path.basename(r.path)) else None
        for r in runs
    }
    return next(iter(points)) if len(points) == 1 else None


def _merge_seeds_of_one_point(by_key: dict[tuple[Any, ...], list[Run]]) -> None:
    """Merges, in place, groups of one sweep-point directory that differ only by bindings
    one of them lacks (seeds started by different ALF versions: a newer one lists the
    defaults of parameters added since), when each is the other's only such partner;
    any ambiguity leaves them apart. (A point whose config file was changed to bind a
    new parameter between seeds cannot be told from this: start such runs in a new
    directory.)"""

    def partners(key: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        point = _point_of(by_key[key])
        if point is None or key[0] != "config":
            return []
        return [
            other
            for other in by_key
            if other != key
            and other[0] == "config"
            and _point_of(by_key[other]) == point
            and all(
                _agree(dict(a.group_key[1]), dict(b.group_key[1]), lenient=True)
                for a in by_key[key]
                for b in by_key[other]
            )
        ]

    merged = True
    while merged:
        merged = False
        for key in list(by_key):
            found = partners(key)
            if len(found) == 1 and partners(found[0]) == [key]:
                by_key[found[0]].extend(by_key.pop(key))
                merged = True
                break


def group_runs(runs: Iterable[Run]) -> list[RunGroup]:
    """The runs grouped by configuration without the seed, ordered by environment, then
    label; sets each run's :attr:`Run.label`."""
    by_key: dict[tuple[Any, ...], list[Run]] = {}
    for run in sorted(runs, key=lambda r: r.path):
        by_key.setdefault(_matching_key(run.group_key, by_key), []).append(run)
    _merge_seeds_of_one_point(by_key)
    members = [
        sorted(rs, key=lambda r: (r.seed is None, r.seed if r.seed is not None else 0, r.path))
        for rs in by_key.values()
    ]
    groups = []
    for runs_of_group, label in zip(members, _labels(members), strict=True):
        for run in runs_of_group:
            run.label = label
        groups.append(
            RunGroup(
                key=runs_of_group[0].group_key,
                label=label,
                env=runs_of_group[0].env,
                algorithm=runs_of_group[0].algorithm,
                runs=runs_of_group,
            )
        )
    return sorted(groups, key=lambda g: (g.env, g.label))
