r"""Benchmark: what collecting PettingZoo agents as batch rows costs, per agent-step.

Issue 33's speed target: collecting N agents costs no more than 1.2x a single-agent run
with the same number of agent-steps per second (the agents are batch rows of one policy
call, not a Python loop of policy calls per agent). Measured with MPE (``mpe2``):

* ``spread3``: ``pettingzoo:mpe2.simple_spread_v3`` (3 agents, ``ppo_simple_spread.gin``'s game);
* ``spread6``: the same with ``env_kwargs={'N': 6}`` (6 agents and 6 landmarks);
* ``simple``: ``pettingzoo:mpe2.simple_v3``, MPE's single-agent scenario, through the same path.

All three have the same number of batch rows (``--rows``, default 48, the config's
``num_parallel_environments``: 16 games x 3 agents, 8 x 6, or 48 x 1), Discrete(5)
actions and 25-step episodes. Two modes each, every measurement in a fresh worker
subprocess (this script with a hidden ``--worker`` flag):

* ``alf``: ALF's collection as training does it, no learning: ``ppo_simple_spread.gin``
  loaded with the game, row count and ``env_kwargs`` bound, the run's components built by
  the trainer's own ``build_components`` (environment on the ``sync`` backend, PPO
  algorithm with its 2x64 tanh actor and critic, 1 torch thread) and its collector by
  ``build_collector`` (a ``SyncUnroller``), then ``collect()`` (25 steps of every row)
  and ``pop_episodes()`` called over and over. Afterwards a short second phase
  (``--breakdown_s``) times, per agent-step, the games' own ``step``/``reset`` calls
  inside the environment, the rest of ``env.step`` (ALF's PettingZoo wrapper: action
  dicts, rows, checks, tensors), the policy's ``rollout_step`` and the rest of the
  unroller.
* ``raw``: the same games stepped in a plain Python loop (no ALF, no torch): each game
  steps with a prebuilt dict of random actions, or resets once its agents are gone.
  A reset counts as one step of each of its agents, as it does in ALF (its rows return
  FIRST), so both modes count the same agent-steps.

Agent-steps/s = rows x batched steps / time, after ``--warmup_s``, twice: per second of
the measuring process's CPU time (``time.process_time``) and per wall second. On a
machine shared with other work the wall rate says mostly how much of a core the worker
was given (on 2 cores at load 8-12 a worker got 25-40% of one); the CPU rate is the one
to read there. The timed phase of ``alf`` counts the collecting thread's CPU time too.
The contenders alternate within each of ``--repeats`` rounds (the order reversed every
other round), so load that drifts hits them alike; figures are medians over rounds,
ratios are taken within a round and then the median is printed. ``uptime`` is printed
before every round, and the commit of ``alf/`` measured (with a note if it has
uncommitted changes) heads the report.

Printed ratios:

* **target ratio** = ALF's time per agent-step with N agents / with 1 agent (``simple``):
  the issue's figure, <= 1.2 to pass. It includes the scenarios' own cost, which is not
  ALF's: simple_spread's world has N agents and N landmarks and checks collisions, so
  each of its agent-steps costs MPE more than one of ``simple``'s.
* **raw ratio**: the same for the plain loop (the scenarios' own difference).
* **ALF / raw** for each contender (the overhead ratio: the fair comparison where the
  scenarios differ) and ALF's added microseconds per agent-step (ALF - raw), with their
  ratio N agents / 1 agent.

Usage::

    python benchmarks/collection/multiagent.py               # 3 rounds x 6 runs of 8 s (~6 min)
    python benchmarks/collection/multiagent.py --repeats 5 --json /tmp/multiagent.json
    python benchmarks/collection/multiagent.py --cases spread3,simple --seconds 3  # smoke run
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.collection.collection_common import quiet_warnings, timed  # noqa: E402
from benchmarks.common import (  # noqa: E402
    emit_result,
    fmt_num,
    format_table,
    machine_info,
    median,
    run_worker,
    write_report,
)

CONF = "ppo_simple_spread.gin"
"""The example config whose policy collects (under ``alf/examples``)."""

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "simple": ("mpe2.simple_v3", {}),
    "spread3": ("mpe2.simple_spread_v3", {}),
    "spread6": ("mpe2.simple_spread_v3", {"N": 6}),
}
"""Contender name -> (PettingZoo module, ``parallel_env`` keyword arguments)."""

SINGLE = "simple"
"""The single-agent contender every multi-agent one is compared with."""


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def _alf_version() -> str:
    """The commit of the checkout this script runs from, and whether its ``alf/`` has
    uncommitted changes (what the ALF figures measure)."""
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

    def git(*argv: str) -> str:
        done = subprocess.run(
            ["git", "-C", root, *argv], capture_output=True, text=True, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return f"{root} (not a git checkout)"
    dirty = git("status", "--porcelain", "--", "alf")
    return f"{commit}{' + uncommitted changes in alf/' if dirty else ''} ({root})"


def measure(step: Any, steps_per_call: int, seconds: float, warmup_s: float) -> dict[str, float]:
    """Calls ``step`` for ``warmup_s``, then for ``seconds`` of wall time: agent-steps per
    wall second and per CPU second of this process (the CPU rate is far less disturbed by
    other processes sharing the cores)."""
    deadline = time.perf_counter() + warmup_s
    while time.perf_counter() < deadline:
        step()
    calls = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while True:
        step()
        calls += 1
        wall = time.perf_counter() - wall0
        if wall >= seconds:
            break
    cpu = time.process_time() - cpu0
    return {
        "steps_per_s": calls * steps_per_call / wall,
        "steps_per_cpu_s": calls * steps_per_call / cpu,
        "calls": calls,
        "measured_s": wall,
        "cpu_s": cpu,
    }


# --------------------------------------------------------------------------- workers


def worker_raw(args: argparse.Namespace) -> dict[str, Any]:
    """The games stepped in a plain Python loop with prebuilt random action dicts."""
    import importlib

    import numpy as np

    module_name, kwargs = CASES[args.case]
    module = importlib.import_module(module_name)
    probe = module.parallel_env(**kwargs)
    agents = list(probe.possible_agents)
    num_actions = int(probe.action_space(agents[0]).n)
    probe.close()
    num_agents = len(agents)
    if args.rows % num_agents:
        raise ValueError(f"--rows {args.rows} is not a multiple of {num_agents} agents")
    games = [module.parallel_env(**kwargs) for _ in range(args.rows // num_agents)]
    for g, game in enumerate(games):
        game.reset(seed=g * num_agents)
    rng = np.random.default_rng(0)
    table = rng.integers(0, num_actions, size=(257, len(games), num_agents))
    actions = [
        [{agent: int(table[t, g, a]) for a, agent in enumerate(agents)} for g in range(len(games))]
        for t in range(table.shape[0])
    ]
    ended = [False] * len(games)
    clock = [0]

    def step() -> None:  # 25 batched steps, as one call of ALF's collect()
        for _ in range(25):
            row = actions[clock[0] % len(actions)]
            clock[0] += 1
            for g, game in enumerate(games):
                if ended[g]:
                    game.reset()
                    ended[g] = False
                    continue
                game.step(row[g])
                if not game.agents:
                    ended[g] = True

    rate = measure(step, 25 * args.rows, args.seconds, args.warmup_s)
    for game in games:
        game.close()
    return {
        "case": args.case,
        "mode": "raw",
        "agents": num_agents,
        "games": len(games),
        "rows": args.rows,
        **rate,
    }


def _build_alf(args: argparse.Namespace) -> Any:
    """The collector training builds from ``ppo_simple_spread.gin`` with this case's game."""
    from absl import logging as absl_logging

    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.trainers.collection import build_collector
    from alf.trainers.components import build_components
    from alf.trainers.trainer_config import TrainerConfig

    absl_logging.set_verbosity(absl_logging.WARNING)
    module_name, kwargs = CASES[args.case]
    import_configurables()
    params = [
        f"create_environment.env_name='pettingzoo:{module_name}'",
        f"create_environment.num_parallel_environments={args.rows}",
        "TrainerConfig.torch_num_threads=1",
    ]
    if kwargs:
        params.append(f"create_environment.env_kwargs={kwargs!r}")
    alf_config.load_config(os.path.join(alf_config.EXAMPLES_DIR, CONF), params)
    config = TrainerConfig()
    parts = build_components(config, distributed=None, resumed_env_steps=None, evaluate=False)
    collector = build_collector(
        config=config,
        env=parts.env,
        algorithm=parts.algorithm,
        policy=parts.policy,
        num_envs=parts.num_envs,
        seed=parts.seed,
        config_text=alf_config.config_str(),
        initial_collect_steps=0,
    )
    return parts, collector, config


def _alf_breakdown(parts: Any, collector: Any, seconds: float) -> dict[str, float]:
    """CPU microseconds (of the collecting thread) per agent-step in the games' own calls,
    the rest of ``env.step``, the policy's ``rollout_step`` and the rest of the collector."""
    env, algorithm = parts.env, parts.algorithm
    games = getattr(env, "_games", None)  # PettingZooEnvironment's parallel_env games
    wall: list[float] = []  # unused: the breakdown is in CPU time
    env_s: list[float] = []
    game_s: list[float] = []
    policy_s: list[float] = []
    env.step = timed(env.step, wall, env_s)
    algorithm.rollout_step = timed(algorithm.rollout_step, wall, policy_s)
    if games is not None:
        for game in games:
            game.step = timed(game.step, wall, game_s)
            game.reset = timed(game.reset, wall, game_s)
    steps = 0
    start, cpu_start = time.perf_counter(), time.thread_time()
    try:
        while time.perf_counter() - start < seconds:
            steps += collector.collect().env_steps
            collector.pop_episodes()
    finally:
        total = time.thread_time() - cpu_start
        del env.step, algorithm.rollout_step
        for game in games or ():
            del game.step, game.reset
    per = 1e6 / steps
    result = {
        "us_total": total * per,
        "us_env_step": sum(env_s) * per,
        "us_policy": sum(policy_s) * per,
        "us_collector_rest": (total - sum(env_s) - sum(policy_s)) * per,
    }
    if games is not None:
        result["us_games"] = sum(game_s) * per
        result["us_env_wrapper"] = (sum(env_s) - sum(game_s)) * per
    return result


def worker_alf(args: argparse.Namespace) -> dict[str, Any]:
    """ALF's collection of ``ppo_simple_spread.gin`` (no learning) on this case's game."""
    quiet_warnings()
    import torch

    from alf.environments.pettingzoo_games import game_info

    parts, collector, config = _build_alf(args)
    try:
        env = parts.env

        def collect() -> None:
            collector.collect()
            collector.pop_episodes()

        steps_per_call = int(config.unroll_length) * env.batch_size
        rate = measure(collect, steps_per_call, args.seconds, args.warmup_s)
        breakdown = _alf_breakdown(parts, collector, args.breakdown_s) if args.breakdown_s else {}
        agents = len(game_info(f"pettingzoo:{CASES[args.case][0]}", CASES[args.case][1]).agents)
        return {
            "case": args.case,
            "mode": "alf",
            "agents": agents,
            "rows": env.batch_size,
            "games": env.batch_size // max(1, agents),
            "env_class": type(env).__name__,
            "unroll_length": int(config.unroll_length),
            "torch_num_threads": torch.get_num_threads(),
            **rate,
            **breakdown,
        }
    finally:
        collector.close()
        parts.close()


# --------------------------------------------------------------------------- report


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else a / b


def _fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


CLOCKS = {
    "steps_per_cpu_s": "per CPU second of the measuring process",
    "steps_per_s": "per wall second",
}
"""Result keys of the two rates, and how the report names them."""


def _section(results: dict[str, Any], key: str) -> list[str]:
    """The table and ratios of the rate ``key`` (:data:`CLOCKS`)."""
    cases, rounds = results["cases"], results["rounds"]

    def us(r: dict[str, Any], case: str, mode: str) -> float | None:
        item = r.get(f"{case}/{mode}")
        return 1e6 / item[key] if item and item.get(key) else None

    def added(r: dict[str, Any], case: str) -> float | None:
        alf, raw = us(r, case, "alf"), us(r, case, "raw")
        return None if alf is None or raw is None else alf - raw

    def per_round(fn: Any) -> float | None:
        values = [v for v in (fn(r) for r in rounds) if v is not None]
        return median(values) if values else None

    def rate(case: str, mode: str) -> float | None:
        values = [1e6 / v for v in (us(r, case, mode) for r in rounds) if v]
        return median(values) if values else None

    rows = []
    for case in cases:
        info = next(
            (r[f"{case}/{m}"] for r in rounds for m in ("alf", "raw") if f"{case}/{m}" in r), {}
        )
        rows.append(
            [
                case,
                info.get("agents", "-"),
                info.get("games", "-"),
                fmt_num(rate(case, "alf")),
                fmt_num(rate(case, "raw")),
                fmt_num(per_round(lambda r, c=case: us(r, c, "alf")), 1),
                fmt_num(per_round(lambda r, c=case: us(r, c, "raw")), 1),
                fmt_num(per_round(lambda r, c=case: added(r, c)), 1),
                _fmt_ratio(per_round(lambda r, c=case: _ratio(us(r, c, "alf"), us(r, c, "raw")))),
            ]
        )
    lines = [
        f"agent-steps {CLOCKS[key]} (medians over rounds; ratios per round, then median):",
        format_table(
            [
                "case",
                "agents",
                "games",
                "ALF steps/s",
                "raw steps/s",
                "ALF us/step",
                "raw us/step",
                "ALF added us",
                "ALF/raw",
            ],
            rows,
        ),
    ]
    for case in cases:
        if case == SINGLE:
            continue
        target = per_round(lambda r, c=case: _ratio(us(r, c, "alf"), us(r, SINGLE, "alf")))
        raw = per_round(lambda r, c=case: _ratio(us(r, c, "raw"), us(r, SINGLE, "raw")))
        extra = per_round(lambda r, c=case: _ratio(added(r, c), added(r, SINGLE)))
        verdict = (
            "" if target is None else (" (<= 1.2: met)" if target <= 1.2 else " (<= 1.2: NOT met)")
        )
        lines.append(
            f"  {case} vs {SINGLE}: target ratio {_fmt_ratio(target)}{verdict}; "
            f"raw (scenario) ratio {_fmt_ratio(raw)}; ALF added us ratio "
            f"{_fmt_ratio(extra)}"
        )
    return lines


def report(results: dict[str, Any]) -> str:
    """The printed report of :func:`main`'s ``results``."""
    cases, rounds = results["cases"], results["rounds"]
    lines = [
        f"ALF: {results['alf']}",
        f"rows: {results['rows']} (games x agents); {len(rounds)} rounds, "
        f"{results['seconds']} s per run after {results['warmup_s']} s of warm-up",
        "",
    ]
    lines += _section(results, "steps_per_cpu_s") + [""] + _section(results, "steps_per_s")
    parts = []
    for case in cases:
        items = [r[f"{case}/alf"] for r in rounds if "us_total" in r.get(f"{case}/alf", {})]
        if not items:
            continue

        def med(key: str, items: list[dict[str, Any]] = items) -> str:
            values = [i[key] for i in items if key in i]
            return fmt_num(median(values), 1) if values else "-"

        parts.append(
            [
                case,
                med("us_total"),
                med("us_games"),
                med("us_env_wrapper"),
                med("us_policy"),
                med("us_collector_rest"),
            ]
        )
    if parts:
        lines += [
            "",
            "ALF, CPU us per agent-step by part (timed phase; the timers add a little):",
            format_table(
                [
                    "case",
                    "total",
                    "games' step/reset",
                    "ALF env wrapper",
                    "policy rollout_step",
                    "collector rest",
                ],
                parts,
            ),
        ]
    lines += [
        "",
        f"uptime at start: {results['uptime_start']}",
        f"uptime at end:   {results['uptime_end']}",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main() -> None:
    """Parses the flags and runs the workers (or, with ``--worker``, one measurement)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cases", default="spread3,spread6,simple", help=f"comma-separated, of {sorted(CASES)}"
    )
    parser.add_argument("--modes", default="alf,raw", help="comma-separated, of alf,raw")
    parser.add_argument(
        "--rows",
        type=int,
        default=48,
        help="batch rows (agent count x games), a multiple of every case's agents",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per run")
    parser.add_argument("--warmup_s", type=float, default=1.5)
    parser.add_argument(
        "--breakdown_s",
        type=float,
        default=3.0,
        help="seconds of ALF's timed phase per run (0: none)",
    )
    parser.add_argument("--json", default=None, help="write the raw numbers here")
    parser.add_argument("--verbose", action="store_true", help="show the workers' stderr")
    parser.add_argument("--worker", choices=("alf", "raw"), help=argparse.SUPPRESS)
    parser.add_argument("--case", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        emit_result((worker_alf if args.worker == "alf" else worker_raw)(args))
        return

    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [c for c in cases if c not in CASES] + [m for m in modes if m not in ("alf", "raw")]
    if unknown:
        parser.error(f"unknown case or mode: {', '.join(unknown)}")
    if SINGLE not in cases:
        cases.append(SINGLE)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    os.environ.update(env)
    results: dict[str, Any] = {
        "machine": machine_info(("torch", "numpy", "pettingzoo", "mpe2")),
        "rows": args.rows,
        "cases": cases,
        "modes": modes,
        "seconds": args.seconds,
        "warmup_s": args.warmup_s,
        "alf": _alf_version(),
        "uptime_start": _uptime(),
        "rounds": [],
    }
    print(f"uptime at start: {results['uptime_start']}", flush=True)
    contenders = [(c, m) for c in cases for m in modes]
    for round_index in range(args.repeats):
        order = contenders if round_index % 2 == 0 else contenders[::-1]
        print(f"round {round_index + 1}/{args.repeats}; uptime: {_uptime()}", flush=True)
        measured: dict[str, Any] = {}
        for case, mode in order:
            argv = [
                os.path.abspath(__file__),
                "--worker",
                mode,
                "--case",
                case,
                "--rows",
                str(args.rows),
                "--seconds",
                str(args.seconds),
                "--warmup_s",
                str(args.warmup_s),
                "--breakdown_s",
                str(args.breakdown_s),
            ]
            result = run_worker(argv, timeout_s=600, verbose=args.verbose)
            measured[f"{case}/{mode}"] = result
            print(
                f"  {case:8s} {mode:4s} {result['steps_per_s']:10,.0f} agent-steps/s, "
                f"{result['steps_per_cpu_s']:10,.0f} per CPU s",
                flush=True,
            )
        results["rounds"].append(measured)
    results["uptime_end"] = _uptime()
    write_report(results, report(results), args.json)


if __name__ == "__main__":
    main()
