r"""Summarises the runs of ``benchmarks/gpu_check.sh``: env steps/s, the first compile's
cost and the evaluation returns of each training run, compiled against eager.

Usage::

    python benchmarks/tools/gpu_check_summary.py --runs_dir /tmp/gpu_check_runs \
        --out_dir "$OUT/gpu_check"

``--runs_dir`` is what ``gpu_check.sh`` fills:

* ``runs.tsv``: one tab-separated line per training run, with the header
  ``name algo mode device rc wall_s cap_s root_dir`` (``rc`` 124: stopped at its time
  cap ``cap_s`` by ``timeout``, after a checkpoint; 137: killed 20 s after that;
  ``skip``: not started, the script's time was spent);
* ``env.txt``: ``key=value`` lines about the machine (GPU, versions, ``uptime``);
* ``<name>.log``: each run's console output (compiled runs log their recompilations
  through ``TORCH_LOGS=recompiles``).

Each run's ``root_dir`` is an ALF run directory; only its ``progress.jsonl``,
``evaluations.jsonl`` and ``status.json`` are read. Written to ``--out_dir``:
``summary.json`` (everything, curves included) and ``summary.md`` (tables).

What the figures mean (``train_time_s`` is ALF's unroll + update time, evaluations
and checkpoints excluded):

* ``steady_steps_per_s``: env steps / ``train_time_s`` between the first and the last
  train summary, so the first summary interval (CUDA start, the first compile, CUDA
  graph capture) is left out;
* ``overall_steps_per_s``: env steps / ``elapsed_s`` of the last record (the training
  loop's wall time, evaluations included, process start-up excluded);
* ``first_interval_excess_s``: the first summary interval's ``train_time_s`` less what
  the same steps cost at the steady rate: the warm-up, in a compiled run mostly the
  first compile;
* ``compile_cost_s`` (in ``comparisons``): the compiled run's excess less the eager
  run's of the same algorithm, i.e. the first compile's cost where visible;
* ``break_even_env_steps``: env steps after which the compiled run is ahead in
  training time (``compile_cost_s`` / (1/eager rate - 1/compiled rate)), when it is
  faster at all.

Exit status: 0 when every run ended with status 0 or at its cap (124, 137) and wrote
at least one train summary; 1 otherwise (the summary is written either way).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

TIMEOUT_RC = 124
"""``timeout``'s exit status when it stopped the command at its cap (SIGTERM)."""
KILLED_RC = 137
"""``timeout``'s exit status when the command outlived the grace after SIGTERM (SIGKILL)."""

_RECOMPILE = re.compile(r"Recompiling function")
_RECOMPILE_LIMIT = re.compile(r"recompile_limit|cache_size_limit")
_GRAPH_BREAK = re.compile(r"[Gg]raph break")


@dataclass
class RunSummary:
    """The figures of one training run (see the module docstring for their meaning)."""

    name: str
    algo: str
    mode: str
    device: str
    rc: str
    outcome: str
    wall_s: float | None
    cap_s: float | None
    status: str | None = None
    error: str | None = None
    env_steps: int = 0
    iterations: int = 0
    train_time_s: float | None = None
    elapsed_s: float | None = None
    outside_training_s: float | None = None
    steady_steps_per_s: float | None = None
    overall_steps_per_s: float | None = None
    window_fps: list[float] = field(default_factory=list)
    first_interval_env_steps: int | None = None
    first_interval_s: float | None = None
    first_interval_excess_s: float | None = None
    recompiles: int = 0
    recompile_limit_hit: bool = False
    graph_break_lines: int = 0
    eval_curve: list[dict[str, Any]] = field(default_factory=list)
    train_return_curve: list[dict[str, Any]] = field(default_factory=list)
    final_eval_return: float | None = None


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    """The JSON objects of a ``.jsonl`` file (unreadable lines skipped; [] if missing)."""
    records: list[dict[str, Any]] = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
    except FileNotFoundError:
        pass
    return records


def _read_json(path: str) -> dict[str, Any]:
    """A JSON object from ``path`` ({} when missing or unreadable)."""
    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _float(text: str) -> float | None:
    """``text`` as a float, None when it is not a number."""
    try:
        return float(text)
    except ValueError:
        return None


def read_env(path: str) -> dict[str, str]:
    """The ``key=value`` lines of ``env.txt`` (a repeated key keeps its last value)."""
    env: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                key, sep, value = line.rstrip("\n").partition("=")
                if sep and key.strip():
                    env[key.strip()] = value.strip()
    except FileNotFoundError:
        pass
    return env


def read_runs(path: str) -> list[dict[str, str]]:
    """The rows of ``runs.tsv`` as dicts keyed by its header."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def _log_counts(path: str) -> tuple[int, bool, int]:
    """Recompilations, whether a recompile limit was hit, and graph-break lines in a
    run's log."""
    recompiles = graph_breaks = 0
    limit_hit = False
    try:
        with open(path, errors="replace") as f:
            for line in f:
                recompiles += bool(_RECOMPILE.search(line))
                limit_hit = limit_hit or bool(_RECOMPILE_LIMIT.search(line))
                graph_breaks += bool(_GRAPH_BREAK.search(line))
    except FileNotFoundError:
        pass
    return recompiles, limit_hit, graph_breaks


def _outcome(rc: str, has_progress: bool) -> str:
    """``finished``, ``capped`` (stopped at its time cap), ``killed`` (killed after the
    cap's grace, its figures up to the last summary still good), ``skipped`` or
    ``failed``."""
    if rc == "skip":
        return "skipped"
    if not has_progress:
        return "failed"
    return {"0": "finished", str(TIMEOUT_RC): "capped", str(KILLED_RC): "killed"}.get(rc, "failed")


def summarise_run(row: dict[str, str], runs_dir: str) -> RunSummary:
    """The figures of the run that ``row`` of ``runs.tsv`` describes."""
    root = row.get("root_dir", "")
    progress = _read_jsonl(os.path.join(root, "progress.jsonl"))
    train = [r for r in progress if "fps" in r and "env_steps" in r and "train_time_s" in r]
    evaluations = _read_jsonl(os.path.join(root, "evaluations.jsonl"))
    status = _read_json(os.path.join(root, "status.json"))
    rc = row.get("rc", "")
    run = RunSummary(
        name=row.get("name", "?"),
        algo=row.get("algo", "?"),
        mode=row.get("mode", "?"),
        device=row.get("device", "?"),
        rc=rc,
        outcome=_outcome(rc, bool(train)),
        wall_s=_float(row.get("wall_s", "")),
        cap_s=_float(row.get("cap_s", "")),
        status=status.get("status") or status.get("state"),
        error=status.get("error"),
    )
    run.recompiles, run.recompile_limit_hit, run.graph_break_lines = _log_counts(
        os.path.join(runs_dir, f"{run.name}.log")
    )
    if progress:
        last = progress[-1]
        run.env_steps = int(last.get("env_steps", 0))
        run.iterations = int(last.get("iteration", 0))
        run.elapsed_s = last.get("elapsed_s")
        run.train_time_s = last.get("train_time_s")
        if run.elapsed_s and run.env_steps:
            run.overall_steps_per_s = round(run.env_steps / run.elapsed_s, 1)
        if run.wall_s is not None and run.elapsed_s is not None:
            run.outside_training_s = round(run.wall_s - run.elapsed_s, 1)
    if train:
        first, last_train = train[0], train[-1]
        run.window_fps = [float(r["fps"]) for r in train]
        run.first_interval_env_steps = int(first["env_steps"])
        run.first_interval_s = float(first["train_time_s"])
        steps = last_train["env_steps"] - first["env_steps"]
        seconds = last_train["train_time_s"] - first["train_time_s"]
        if steps > 0 and seconds > 0:
            steady = steps / seconds
            run.steady_steps_per_s = round(steady, 1)
            excess = run.first_interval_s - run.first_interval_env_steps / steady
            run.first_interval_excess_s = round(excess, 2)
    run.train_return_curve = [
        {"env_steps": r["env_steps"], "average_return": round(r["train/average_return"], 3)}
        for r in train
        if isinstance(r.get("train/average_return"), int | float)
    ]
    for record in evaluations:
        returns = [float(x) for x in record.get("returns", [])]
        if not returns:
            continue
        run.eval_curve.append(
            {
                "env_steps": record.get("env_steps"),
                "elapsed_s": record.get("elapsed_s"),
                "average_return": round(sum(returns) / len(returns), 3),
                "returns": returns,
            }
        )
    if run.eval_curve:
        run.final_eval_return = run.eval_curve[-1]["average_return"]
    return run


def compare(runs: Sequence[RunSummary]) -> list[dict[str, Any]]:
    """Compiled against eager for each algorithm that has both runs."""
    by_key = {(r.algo, r.mode): r for r in runs}
    comparisons = []
    for algo in dict.fromkeys(r.algo for r in runs):
        eager, compiled = by_key.get((algo, "eager")), by_key.get((algo, "compiled"))
        if eager is None or compiled is None:
            continue
        entry: dict[str, Any] = {"algo": algo, "speedup_steady": None, "compile_cost_s": None}
        entry["break_even_env_steps"] = None
        if eager.steady_steps_per_s and compiled.steady_steps_per_s:
            entry["speedup_steady"] = round(
                compiled.steady_steps_per_s / eager.steady_steps_per_s, 3
            )
        if eager.overall_steps_per_s and compiled.overall_steps_per_s:
            entry["speedup_overall"] = round(
                compiled.overall_steps_per_s / eager.overall_steps_per_s, 3
            )
        if (
            compiled.first_interval_excess_s is not None
            and eager.first_interval_excess_s is not None
        ):
            cost = compiled.first_interval_excess_s - eager.first_interval_excess_s
            entry["compile_cost_s"] = round(cost, 1)
            rates = (eager.steady_steps_per_s, compiled.steady_steps_per_s)
            if rates[0] and rates[1] and rates[1] > rates[0] and cost > 0:
                saving_per_step = 1.0 / rates[0] - 1.0 / rates[1]
                entry["break_even_env_steps"] = int(cost / saving_per_step)
        comparisons.append(entry)
    return comparisons


def _fmt(value: Any, digits: int = 1) -> str:
    """A table cell: '-' for None, floats rounded."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render_markdown(
    env: dict[str, str], runs: Sequence[RunSummary], comparisons: Sequence[dict[str, Any]]
) -> str:
    """``summary.md``: the machine, one row per run, the comparisons and the curves."""
    lines = ["# GPU check: compiled (torch.compile, CUDA graphs on a GPU) vs eager", ""]
    if env.get("mode") == "cpu":
        lines += [
            "CPU rehearsal (tiny budgets, device cpu): a test of the script, NOT a result.",
            "",
        ]
    for key, value in env.items():
        lines.append(f"- {key}: {value}")
    lines += [
        "",
        "| run | rc | outcome | env steps | wall s | steady steps/s | overall steps/s "
        "| 1st interval s (steps) | warm-up excess s | recompiles | last eval return |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        first = f"{_fmt(r.first_interval_s)} ({_fmt(r.first_interval_env_steps)})"
        recompiles = f"{r.recompiles}{' (limit hit)' if r.recompile_limit_hit else ''}"
        lines.append(
            f"| {r.name} | {r.rc} | {r.outcome} | {_fmt(r.env_steps)} | {_fmt(r.wall_s)} "
            f"| {_fmt(r.steady_steps_per_s)} | {_fmt(r.overall_steps_per_s)} | {first} "
            f"| {_fmt(r.first_interval_excess_s)} | {recompiles} "
            f"| {_fmt(r.final_eval_return, 2)} |"
        )
    if comparisons:
        lines += [
            "",
            "| algorithm | compiled/eager steady | compiled/eager overall "
            "| first compile s | break-even env steps |",
            "| --- | --- | --- | --- | --- |",
        ]
        for c in comparisons:
            lines.append(
                f"| {c['algo']} | {_fmt(c.get('speedup_steady'), 3)} "
                f"| {_fmt(c.get('speedup_overall'), 3)} | {_fmt(c.get('compile_cost_s'))} "
                f"| {_fmt(c.get('break_even_env_steps'))} |"
            )
    lines += ["", "## Evaluation returns by env steps (full games, unclipped)", ""]
    for r in runs:
        curve = ", ".join(
            f"{_fmt(p['env_steps'])}: {p['average_return']:.2f}" for p in r.eval_curve
        )
        lines.append(f"- {r.name}: {curve or 'no evaluation'}")
    lines += ["", "## Training returns by env steps (clipped rewards, per life)", ""]
    for r in runs:
        curve = ", ".join(
            f"{_fmt(p['env_steps'])}: {p['average_return']:.2f}" for p in r.train_return_curve
        )
        lines.append(f"- {r.name}: {curve or 'no finished episode'}")
    failed = [r for r in runs if r.outcome in ("failed", "skipped")]
    if failed:
        lines += ["", "## Failed or skipped", ""]
        for r in failed:
            lines.append(f"- {r.name}: rc {r.rc}, {r.error or 'see gpu_check.log'}")
    lines += [
        "",
        "steady: env steps / train_time_s after the first summary interval (evaluations, "
        "checkpoints and the first compile excluded); overall: env steps / the training "
        "loop's elapsed_s; rc 124: stopped at its time cap (after a checkpoint).",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Reads ``--runs_dir``, writes ``summary.json`` and ``summary.md`` to ``--out_dir``,
    prints the Markdown; returns the exit status (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs_dir", required=True, help="runs.tsv, env.txt and logs")
    parser.add_argument("--out_dir", required=True, help="where summary.json/.md go")
    args = parser.parse_args(argv)
    tsv = os.path.join(args.runs_dir, "runs.tsv")
    if not os.path.isfile(tsv):
        print(f"gpu_check_summary: {tsv} not found", file=sys.stderr)
        return 2
    env = read_env(os.path.join(args.runs_dir, "env.txt"))
    runs = [summarise_run(row, args.runs_dir) for row in read_runs(tsv)]
    comparisons = compare(runs)
    os.makedirs(args.out_dir, exist_ok=True)
    summary = {
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "env": env,
        "runs": [asdict(r) for r in runs],
        "comparisons": comparisons,
    }
    with open(os.path.join(args.out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    markdown = render_markdown(env, runs, comparisons)
    with open(os.path.join(args.out_dir, "summary.md"), "w") as f:
        f.write(markdown)
    print(markdown)
    ok = runs and all(r.outcome in ("finished", "capped", "killed") for r in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
