"""Statistics over seeds: IQM, mean, standard deviation and bootstrap confidence
intervals, for final scores (:func:`iqm_interval_estimates`) and for learning curves
(:func:`align_curves`, :func:`curve_band`).

Final-score intervals are stratified-bootstrap percentile intervals computed by
`rliable <https://github.com/google-research/rliable>`_
(``library.get_interval_estimates`` with ``metrics.aggregate_iqm``) when it can be
imported, else by :func:`numpy_stratified_bootstrap`, which draws the same resamples
from the same seed (rliable draws its indices from NumPy's global generator, which
:func:`iqm_interval_estimates` seeds and then restores).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MIN_SEEDS_FOR_CI",
    "probability_of_improvement",
    "AGGREGATES",
    "BOOTSTRAP_REPS",
    "BOOTSTRAP_SEED",
    "CONFIDENCE",
    "CurveBand",
    "IntervalEstimates",
    "align_curves",
    "curve_band",
    "iqm",
    "iqm_interval_estimates",
    "mean_std",
    "numpy_stratified_bootstrap",
]

BOOTSTRAP_REPS = 2000
"""Default number of bootstrap resamples."""
BOOTSTRAP_SEED = 0
"""Default seed of the bootstrap's random generator (results are deterministic)."""
CONFIDENCE = 0.95
"""Coverage of the confidence intervals."""
AGGREGATES = ("mean", "iqm")

_MAX_GRID_POINTS = 500
_CHUNK_ELEMENTS = 4_000_000


def iqm(values: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """Interquartile mean: the mean of the values left after dropping
    ``floor(n / 4)`` of the lowest and of the highest (as ``scipy.stats.trim_mean``
    with ``proportiontocut=0.25``).

    Args:
        values: the scores.
        axis: the axis to reduce; None flattens.

    Returns:
        The IQM (a float when ``axis`` is None).
    """
    values = np.asarray(values, dtype=float)
    if axis is None:
        values, axis = values.ravel(), 0
    values = np.moveaxis(values, axis, -1)
    n = values.shape[-1]
    cut = int(0.25 * n)
    trimmed = np.sort(values, axis=-1)[..., cut : n - cut]
    result = trimmed.mean(axis=-1)
    return float(result) if result.ndim == 0 else result


def mean_std(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof=1``; 0 for a single value)."""
    values = np.asarray(values, dtype=float)
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return float(np.mean(values)), std


def numpy_stratified_bootstrap(
    scores: np.ndarray,
    statistic: Callable[[np.ndarray], float],
    *,
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Stratified-bootstrap percentile interval of ``statistic`` over runs.

    Each resample draws, for every task independently, ``num_runs`` runs with
    replacement (indices from ``numpy.random.RandomState(seed)``, one
    ``(num_runs, num_tasks)`` draw per resample, as rliable does).

    Args:
        scores: ``(num_runs, num_tasks)`` scores.
        statistic: maps a ``(num_runs, num_tasks)`` array to a number.
        reps: number of resamples.
        seed: seed of the random generator.
        confidence: coverage of the interval.

    Returns:
        (low, high).
    """
    scores = np.asarray(scores, dtype=float)
    num_runs, num_tasks = scores.shape
    rng = np.random.RandomState(seed)
    runs = rng.randint(0, num_runs, size=(reps, num_runs, num_tasks))
    tasks = np.arange(num_tasks)[None, :]
    values = np.array([statistic(scores[runs[i], tasks]) for i in range(reps)])
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


@dataclass(kw_only=True)
class IntervalEstimates:
    """IQMs with their confidence intervals, and how they were computed.

    Attributes:
        point: IQM by name.
        low: lower end of the interval by name.
        high: upper end of the interval by name.
        method: one line naming the method and library (for a report's footer).
        library: ``rliable <version>`` or ``numpy``.
    """

    point: dict[str, float]
    low: dict[str, float]
    high: dict[str, float]
    method: str
    library: str


def _one_line(err: BaseException) -> str:
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= 200 else text[:197] + "..."


@functools.cache
def _load_rliable() -> tuple[object, object, str] | str:
    """(library, metrics, version) of rliable, or why it cannot be used (remembered: a
    failed import is not cached by Python and can take seconds)."""
    try:
        import rliable
        from rliable import library, metrics
    except Exception as err:  # a broken dependency (e.g. arch vs pandas) is as good as none
        return _one_line(err)
    try:
        version = importlib.metadata.version("rliable")
    except importlib.metadata.PackageNotFoundError:
        version = str(getattr(rliable, "__version__", ""))
    return library, metrics, version


@contextlib.contextmanager
def _seeded_global_numpy(seed: int) -> Iterator[None]:
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _rliable_estimates(
    arrays: Mapping[str, np.ndarray],
    loaded: tuple[object, object, str],
    reps: int,
    seed: int,
    confidence: float,
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    library, metrics, _ = loaded

    def func(x: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(x)])  # type: ignore[attr-defined]

    point, low, high = {}, {}, {}
    for name, array in arrays.items():
        # rliable's StratifiedBootstrap draws from NumPy's global generator.
        with _seeded_global_numpy(seed):
            points, intervals = library.get_interval_estimates(  # type: ignore[attr-defined]
                {name: array}, func, reps=reps, confidence_interval_size=confidence
            )
        point[name] = float(np.ravel(points[name])[0])
        low[name], high[name] = (float(v) for v in np.ravel(intervals[name])[:2])
    return point, low, high


def iqm_interval_estimates(
    scores: Mapping[str, np.ndarray | Sequence[float]],
    *,
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
    use_rliable: bool = True,
) -> IntervalEstimates:
    """IQM and its stratified-bootstrap percentile interval for each entry of ``scores``.

    Args:
        scores: per name, the final scores of its runs: 1-D (one task, so the strata
            are the seeds) or ``(num_runs, num_tasks)``.
        reps: bootstrap resamples.
        seed: seed of the resampling (the result is deterministic).
        confidence: coverage of the intervals.
        use_rliable: False computes with NumPy even when rliable is available.

    Returns:
        The estimates, with the method used.
    """
    arrays = {}
    for name, values in scores.items():
        array = np.asarray(values, dtype=float)
        arrays[name] = array[:, None] if array.ndim == 1 else array
    loaded = _load_rliable() if use_rliable else "not requested"
    pct = f"{confidence:.0%}"
    how = f"IQM {pct} CI: stratified bootstrap over seeds, percentile method, {reps} resamples"
    if isinstance(loaded, tuple):
        try:
            point, low, high = _rliable_estimates(arrays, loaded, reps, seed, confidence)
        except Exception as err:  # an incompatible arch release fails only when called
            loaded = f"its get_interval_estimates failed: {_one_line(err)}"
        else:
            library_name = f"rliable {loaded[2]}".strip()
            method = (
                f"{how} (seed {seed}), computed by {library_name} "
                "(library.get_interval_estimates with metrics.aggregate_iqm)"
            )
    if not isinstance(loaded, tuple):
        library_name = "numpy"
        point, low, high = {}, {}, {}
        for name, array in arrays.items():
            point[name] = iqm(array)
            low[name], high[name] = numpy_stratified_bootstrap(
                array, iqm, reps=reps, seed=seed, confidence=confidence
            )
        method = (
            f"{how} (seed {seed}), computed by alf.experiments.stats (NumPy; rliable not "
            f"usable: {loaded})"
        )
    return IntervalEstimates(point=point, low=low, high=high, method=method, library=library_name)


def align_curves(
    xs: Sequence[np.ndarray], ys: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Puts the curves of several seeds on one x grid.

    When every curve was evaluated at the same x values up to the end of the shortest
    one, the grid is those values and nothing is interpolated. Otherwise the grid is
    the union of the curves' x values from the latest first point to the earliest last
    point (at most 500 evenly spaced points) and each curve is interpolated linearly.
    Either way the grid stops at the shortest curve's last point, so runs in progress
    can be aggregated.

    Args:
        xs: per seed, increasing x values (NaNs are dropped with their y).
        ys: per seed, the values at ``xs``.

    Returns:
        (grid, values of shape ``(num_seeds, len(grid))``, whether it was exact).
        The grid is empty when the curves do not overlap.
    """
    curves = []
    for x, y in zip(xs, ys, strict=True):
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        keep = np.isfinite(x) & np.isfinite(y)
        order = np.argsort(x[keep], kind="stable")
        curves.append((x[keep][order], y[keep][order]))
    if not curves or any(len(x) == 0 for x, _ in curves):
        return np.zeros(0), np.zeros((len(curves), 0)), True
    end = min(x[-1] for x, _ in curves)
    start = max(x[0] for x, _ in curves)
    heads = [x[x <= end] for x, _ in curves]
    if all(len(h) == len(heads[0]) and np.array_equal(h, heads[0]) for h in heads):
        grid = heads[0]
        return grid, np.stack([y[: len(grid)] for _, y in curves]), True
    if start > end:
        return np.zeros(0), np.zeros((len(curves), 0)), False
    grid = np.unique(np.concatenate([x[(x >= start) & (x <= end)] for x, _ in curves]))
    if len(grid) > _MAX_GRID_POINTS:
        grid = np.linspace(start, end, _MAX_GRID_POINTS)
    return grid, np.stack([np.interp(grid, x, y) for x, y in curves]), False


@dataclass(kw_only=True)
class CurveBand:
    """An aggregate curve over seeds with its bootstrap band.

    Attributes:
        x: the grid.
        center: mean or IQM over seeds at each x.
        low: lower end of the band.
        high: upper end of the band.
    """

    x: np.ndarray
    center: np.ndarray
    low: np.ndarray
    high: np.ndarray


def _aggregate(values: np.ndarray, aggregate: str, axis: int) -> np.ndarray:
    if aggregate == "mean":
        return values.mean(axis=axis)
    if aggregate == "iqm":
        return np.asarray(iqm(values, axis=axis))
    raise ValueError(f"aggregate must be one of {AGGREGATES}, got {aggregate!r}")


def curve_band(
    x: np.ndarray,
    values: np.ndarray,
    *,
    aggregate: str = "mean",
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> CurveBand:
    """Mean or IQM over seeds at each x, with a percentile-bootstrap band over seeds.

    A resample draws ``num_seeds`` whole curves with replacement: the indices are
    ``numpy.random.default_rng(seed).integers(0, num_seeds, size=(reps, num_seeds))``,
    the same resampled seeds for every x.

    Args:
        x: the grid (see :func:`align_curves`).
        values: ``(num_seeds, len(x))``.
        aggregate: ``mean`` or ``iqm``.
        reps: bootstrap resamples.
        seed: seed of the resampling.
        confidence: coverage of the band.

    Returns:
        The curve and its band.
    """
    values = np.asarray(values, dtype=float)
    num_seeds, num_points = values.shape
    center = _aggregate(values, aggregate, axis=0)
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, num_seeds, size=(reps, num_seeds))
    tail = 100 * (1 - confidence) / 2
    low, high = np.empty(num_points), np.empty(num_points)
    chunk = max(1, _CHUNK_ELEMENTS // max(1, reps * num_seeds))
    for begin in range(0, num_points, chunk):
        part = values[:, begin : begin + chunk][indices]  # (reps, seeds, points)
        stats = _aggregate(part, aggregate, axis=1)
        low[begin : begin + chunk], high[begin : begin + chunk] = np.percentile(
            stats, [tail, 100 - tail], axis=0
        )
    return CurveBand(x=np.asarray(x), center=center, low=low, high=high)


MIN_SEEDS_FOR_CI = 5
"""Seeds per group below which a bootstrap interval is shown with a caveat (with 2 seeds
the stratified bootstrap's IQM interval is little more than their range), and below
which no probability of improvement is computed."""


def probability_of_improvement(
    x: Sequence[float],
    y: Sequence[float],
    *,
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
    use_rliable: bool = True,
) -> tuple[float, float, float, str]:
    """P(X > Y) (ties count half) between the final scores of two groups of seeds on one
    task, with its stratified-bootstrap percentile interval (Agarwal et al. 2021).

    Returns:
        ``(estimate, low, high, library)``; rliable's
        ``metrics.probability_of_improvement`` when it is usable, else NumPy's.
    """
    a = np.asarray(x, dtype=float)[:, None]
    b = np.asarray(y, dtype=float)[:, None]
    loaded = _load_rliable() if use_rliable else "not requested"
    if isinstance(loaded, tuple):
        library, metrics, version = loaded
        try:
            with _seeded_global_numpy(seed):
                points, intervals = library.get_interval_estimates(  # type: ignore[attr-defined]
                    {"pair": (a, b)},
                    metrics.probability_of_improvement,  # type: ignore[attr-defined]
                    reps=reps,
                    confidence_interval_size=confidence,
                )
            low, high = (float(v) for v in np.ravel(intervals["pair"])[:2])
            return float(np.ravel(points["pair"])[0]), low, high, f"rliable {version}".strip()
        except Exception:  # an incompatible release: NumPy below
            pass

    def estimate(xa: np.ndarray, ya: np.ndarray) -> float:
        wins = (xa[:, None, 0] > ya[None, :, 0]).mean()
        ties = (xa[:, None, 0] == ya[None, :, 0]).mean()
        return float(wins + 0.5 * ties)

    rng = np.random.default_rng(seed)
    draws = [
        estimate(a[rng.integers(0, len(a), len(a))], b[rng.integers(0, len(b), len(b))])
        for _ in range(reps)
    ]
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return estimate(a, b), float(low), float(high), "numpy"
