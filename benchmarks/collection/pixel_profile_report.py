"""``benchmarks/collection/pixel_profile.py``'s statistics and its plain-text report:
per-contender round statistics, one APPO env step's parts and their shares, the sampler
against raw EnvPool, and the training run's queueing."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.common import format_table

TARGET = 0.5
"""The issue's target: the sampler at >= 50% of raw EnvPool's steps/s."""

LABELS: dict[str, str] = {
    "raw": "1. raw env step (EnvPool, or VizDoom preset envs; no ALF)",
    "alf_env": "2. ALF env step (the config's backend)",
    "policy": "3. actor policy forward (explore_step)",
    "actor_net": "3b. the actor network alone (no value net)",
    "write": "4. frame copy into shared memory (write)",
    "read": "4b. learner's copy out of it (read)",
    "learn": "5. learner: learn() on one batch",
    "learn_targets": "5a. of which V-trace's log-probs and values (no grad)",
    "sampler": "sampler: collect() + write",
}
"""Contender key -> row label of the report."""


# ----------------------------------------------------------------- pure helpers
def summarize(times: Mapping[str, Sequence[float]]) -> dict[str, dict[str, float]]:
    """Min, median and max of each contender's per-round values (microseconds per step).

    Args:
        times: contender -> one value per round.

    Returns:
        contender -> ``{"min", "median", "max", "rounds"}`` (contenders without values
        are left out).
    """
    return {
        name: {"min": min(v), "median": statistics.median(v), "max": max(v), "rounds": len(v)}
        for name, v in times.items()
        if v
    }


def round_ratios(raw: Sequence[float], sampler: Sequence[float]) -> list[float]:
    """Raw EnvPool's steps/s over the sampler's, per round: ``sampler_us / raw_us`` is
    the sampler's rate as a fraction of raw's (``raw_us / sampler_us``)."""
    return [r / s for r, s in zip(raw, sampler, strict=True) if s > 0]


def shares(parts: Mapping[str, float]) -> dict[str, float]:
    """Each part's fraction of the parts' sum (all zeros for an empty or zero sum)."""
    total = sum(parts.values())
    return {name: (value / total if total > 0 else 0.0) for name, value in parts.items()}


def iteration_parts(
    medians: Mapping[str, float], breakdown: Mapping[str, float]
) -> dict[str, float]:
    """The CPU work of one environment step of APPO, in microseconds: the actor's
    environment step, policy forward, fragment write and collector bookkeeping (from the
    sampler's breakdown), and the learner's copy-out and ``learn``.

    Args:
        medians: contender -> median microseconds per step (``read`` and ``learn`` used).
        breakdown: the sampler's median breakdown (``env``, ``policy``, ``write``,
            ``other``).
    """
    return {
        "actor: env step (ALF)": breakdown.get("env", 0.0),
        "actor: policy forward": breakdown.get("policy", 0.0),
        "actor: frame copy (write)": breakdown.get("write", 0.0),
        "actor: collector bookkeeping": breakdown.get("other", 0.0),
        "learner: copy out (read)": medians.get("read", 0.0),
        "learner: learn (fwd/bwd/Adam)": medians.get("learn", 0.0),
    }


def queue_summary(records: Sequence[Mapping[str, Any]], skip: int = 1) -> dict[str, float]:
    """The async statistics of a run's ``progress.jsonl`` training records.

    Args:
        records: the records in order (evaluation records are skipped: they have no
            ``async/`` keys).
        skip: leading training records to leave out (start-up).

    Returns:
        Means of ``async/learner_wait_fraction``, ``async/policy_lag_mean``,
        ``async/queue_depth`` and ``async/actor_env_steps_per_second`` over the kept
        records, their count, and the env steps/s between the first and last kept ones
        (empty if fewer than two records carry async statistics).
    """
    rows = [_async_keys(r) for r in records]
    rows = [r for r in rows if "async/learner_wait_fraction" in r][skip:]
    if len(rows) < 2:
        return {}
    out: dict[str, float] = {"records": float(len(rows))}
    for key in ("learner_wait_fraction", "policy_lag_mean", "queue_depth",
                "actor_env_steps_per_second"):
        values = [float(r[f"async/{key}"]) for r in rows if f"async/{key}" in r]
        if values:
            out[key] = statistics.fmean(values)
    first, last = rows[0], rows[-1]
    seconds = float(last.get("elapsed_s", 0)) - float(first.get("elapsed_s", 0))
    if seconds > 0:
        out["env_steps_per_s"] = (float(last["env_steps"]) - float(first["env_steps"])) / seconds
    return out


def _async_keys(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with each ``.../async/name`` key (``train/async/name`` in
    ``progress.jsonl``) shortened to ``async/name``."""
    return {**record, **{k[k.index("async/"):]: v for k, v in record.items() if "async/" in k}}


# ----------------------------------------------------------------- the report
def _us(value: float) -> str:  # microseconds: whole above 10, else one decimal
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def report(results: dict[str, Any]) -> str:
    """The plain-text report of a run: contenders, the iteration's shares, the sampler
    against raw EnvPool, and the training run's queueing."""
    m = results["machine"]
    lines = [f"machine: {m['nproc']} CPUs ({m['cpu_model']})", f"start: {results['uptime_start']}"]
    w = results.get("worker")
    if w is None:
        lines.append(f"in-process worker failed: {results.get('worker_error')}")
    else:
        s = w["settings"]
        lines.append(
            f"{s['env_name']}, {s['envs_per_actor']} envs per actor ({s['num_envs']} over "
            f"{s['num_actors']} actors), fragments of {s['unroll_length']} steps, "
            f"{s['fragments_per_iteration']} per iteration; EnvPool num_threads raw "
            f"{w['envpool_num_threads']['raw']} / ALF {w['envpool_num_threads']['alf']} "
            f"(0: EnvPool's default, None: no EnvPool); torch threads {w['torch_num_threads']}")
        lines += ["", *_contender_lines(w)]
    t = results.get("train")
    if t is not None:
        lines += ["", *_train_lines(t)]
    lines.append(f"end: {results['uptime_end']}")
    return "\n".join(lines)


def _contender_lines(w: dict[str, Any]) -> list[str]:
    """The worker's tables."""
    stats = summarize(w["times_us"])
    rows = [[LABELS[k], _us(v["min"]), _us(v["median"]), _us(v["max"]), v["rounds"]]
            for k, v in stats.items()]
    out = ["us per env step (per round: min / median / max)",
           format_table(["contender", "min", "median", "max", "rounds"], rows)]
    medians = {k: v["median"] for k, v in stats.items()}
    parts_med = {k: statistics.median(v) for k, v in w["breakdown_us"].items() if v}
    parts = iteration_parts(medians, parts_med)
    fraction = shares(parts)
    out += ["", "one APPO env step's CPU work (median us; share of their sum)",
            format_table(["part", "us/step", "share"],
                         [[k, _us(v), f"{100 * fraction[k]:.1f}%"] for k, v in parts.items()]
                         + [["sum", _us(sum(parts.values())), "100%"]])]
    ratios = round_ratios(w["times_us"]["raw"], w["times_us"]["sampler"])
    raw, sampler = medians["raw"], medians["sampler"]
    met = "met" if statistics.median(ratios) >= TARGET else "NOT met"
    out += ["", "sampler alone vs the raw env (same envs, alternating rounds)",
            format_table(
                ["", "us/step", "steps/s"],
                [["raw env", _us(raw), f"{1e6 / raw:,.0f}"],
                 ["sampler (collect + write)", _us(sampler), f"{1e6 / sampler:,.0f}"]]),
            "sampler / raw per round: " + ", ".join(f"{100 * r:.1f}%" for r in ratios)
            + f"; median {100 * statistics.median(ratios):.1f}% (target >= "
            f"{100 * TARGET:.0f}%: {met})"]
    return out


def _train_lines(t: dict[str, Any]) -> list[str]:
    """The training run's queueing lines."""
    out = [f"training run (alf.bin.train, {t.get('last', {}).get('env_steps')} env steps, "
           f"exit {t['rc']}, {t['wall_s']:.0f} s wall; {t['uptime']})"]
    q = t["summary"]
    if not q:
        return [*out, "no async statistics recorded; log tail:", t.get("log_tail", "")]
    rows = [["learner waiting for fragments", f"{100 * q.get('learner_wait_fraction', 0):.1f}%"],
            ["policy lag (mean)", f"{q.get('policy_lag_mean', float('nan')):.2f}"],
            ["fragments queued (mean)", f"{q.get('queue_depth', float('nan')):.2f}"],
            ["actors' env steps/s (sum of latest)",
             f"{q.get('actor_env_steps_per_second', float('nan')):,.0f}"],
            ["run env steps/s", f"{q.get('env_steps_per_s', float('nan')):,.0f}"],
            ["summaries averaged", f"{q['records']:.0f}"]]
    return [*out, format_table(["statistic", "value"], rows)]
