"""ALF's offline RL algorithms side by side with d3rlpy's on the same dataset (issue 34).

For each algorithm (``iql``, ``cql``, ``td3bc``, ``bc``) and seed, the benchmark runs
ALF (``alf.bin.train`` with ``alf/examples/<algo>_hopper_medium.gin``, the environment,
dataset, budget and seed given by ``--conf_param``) and d3rlpy 2.8.1 (from its own
virtual environment, :mod:`benchmarks.peers.d3rlpy_offline`) one after the other,
alternating which goes first from one run pair to the next so that drifting load hits
both alike. Both train the same number of gradient steps on the same Minari-format
dataset (its HDF5 file, read by each framework) and evaluate their greedy policies in
the same Gymnasium environment with the same number of episodes after every
``--eval_interval`` steps.

The same hyperparameters: a worker process loads the ALF config (with any
``--conf_param`` given here, which reach both frameworks) and reads every setting the
algorithm uses, bound or default; :func:`d3rlpy_spec` maps each explicitly onto
d3rlpy's config fields (``--show_mapping`` prints the table) and refuses a binding it
has no mapping for, or a value d3rlpy cannot express, so a changed config never runs
against an unchanged peer unnoticed.

Reported per algorithm and framework: the final return as IQM over seeds with a 95%
stratified bootstrap interval (:func:`alf.experiments.stats.iqm_interval_estimates`).
The final return is a matched evaluation: after training, each run's final greedy policy
plays ``--matched_episodes`` episodes from the resets seeded ``MATCHED_SEED + i``, the
same starts for every run of both frameworks, so the spread of start states (large on
Pendulum) is not a difference between them (``--matched_episodes=0``: the last
in-training evaluation's average, whose starts differ between the frameworks); the
in-training evaluations give the curves. The same for the D4RL-normalised score
``100 (R - random) / (expert - random)`` when the dataset's metadata has Minari's
``ref_min_score``/``ref_max_score``, and updates/s: gradient steps over the time spent
in them (sampling, data transformation, losses, optimizer steps, target updates; ALF's
``train_time_s`` of ``progress.jsonl``, d3rlpy's ``fitter`` loop timed between
evaluations; neither includes evaluation or setup), with the ALF/d3rlpy ratio of each
seed's back-to-back pair. ``uptime`` is printed before and after every run. Raw numbers:
``<root_dir>/results.json``. A run whose result is in ``<root_dir>`` already is not run
again (``--rerun`` runs it anyway).

Usage::

    python -m benchmarks.peers.offline --dataset=tests/data/datasets/pendulum-sac-v0 \\
        --env=Pendulum-v1 --algos=iql,cql --seeds=0,1,2 --steps=10000 \\
        --eval_interval=2000 --root_dir=/tmp/offline_bench
    python -m benchmarks.peers.offline --dataset=alf/hopper-medium-v0 --algos=iql,cql,td3bc,bc \\
        --seeds=0,1,2 --steps=500000 --eval_interval=5000 --root_dir=/tmp/offline_hopper
    python -m benchmarks.peers.offline --show_mapping [--algos=...] [--conf_param=...]

``--dataset``: a dataset directory or the id of a dataset in Minari's local path;
``--env``: the Gymnasium id (default: the dataset's own ``env_spec``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import (  # noqa: E402
    emit_result,
    fmt_num,
    format_table,
    machine_info,
    run_logged,
    run_worker,
    uptime,
)
from benchmarks.peers.offline_mapping import (  # noqa: E402
    ALGOS,
    d3rlpy_spec,
    mapping_table,
    read_alf_settings,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "alf" / "examples"
PEER = Path(__file__).resolve().parent / "d3rlpy_offline.py"
FRAMEWORKS = ("alf", "d3rlpy")
RUN_ENV = {"TQDM_DISABLE": "1", "PYTHONPATH": str(REPO)}  # both frameworks' runs
MATCHED_SEED = 1_000_000
"""The reset seed of the first matched final episode (``MATCHED_SEED + i`` for the i-th)."""


def alf_settings(algo: str, conf_params: Sequence[str]) -> dict[str, Any]:
    """:func:`read_alf_settings` in a fresh worker process (gin state stays there)."""
    argv = [str(Path(__file__).resolve()), f"--worker_settings={algo}"]
    argv += [f"--conf_param={p}" for p in conf_params]
    return run_worker(argv, timeout_s=600)


# --------------------------------------------------------------------------- the dataset


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A Minari-format dataset: its data folder and what its metadata says."""

    data_dir: str
    env_id: str | None
    action_low: list[float]
    action_high: list[float]
    random_return: float | None
    expert_return: float | None
    steps: int | None


def read_dataset(name: str) -> Dataset:
    """The dataset ``name`` (a directory, or an id in Minari's local path)."""
    from alf.datasets.minari_format import locate_dataset

    data_dir = locate_dataset(name)
    meta = json.loads((Path(data_dir) / "metadata.json").read_text())
    action_space = json.loads(meta["action_space"])
    if action_space.get("type") != "Box":
        raise SystemExit(f"{name}: the benchmark's algorithms need Box actions")
    env_spec = json.loads(meta["env_spec"]) if meta.get("env_spec") else {}
    shape = action_space["shape"]
    low, high = action_space["low"], action_space["high"]
    if not isinstance(low, list):
        low, high = [low] * math.prod(shape), [high] * math.prod(shape)
    return Dataset(
        data_dir=data_dir,
        env_id=env_spec.get("id"),
        action_low=[float(x) for x in low],
        action_high=[float(x) for x in high],
        random_return=meta.get("ref_min_score"),
        expert_return=meta.get("ref_max_score"),
        steps=meta.get("total_steps"),
    )


def normalized(dataset: Dataset, value: float | None) -> float | None:
    """D4RL's normalised score of a return, or None without references."""
    if value is None or dataset.random_return is None or dataset.expert_return is None:
        return None
    return 100.0 * (value - dataset.random_return) / (dataset.expert_return - dataset.random_return)


# --------------------------------------------------------------------------- the runs


@dataclasses.dataclass(frozen=True)
class RunSetup:
    """What every run of one benchmark shares."""

    dataset: Dataset
    env: str
    steps: int
    eval_interval: int
    eval_episodes: int
    conf_params: tuple[str, ...]
    root: Path
    python: str | None
    timeout_s: float
    matched_episodes: int = 0

    @property
    def matched_seeds(self) -> list[int]:
        """The reset seeds of the matched final evaluation's episodes."""
        return [MATCHED_SEED + i for i in range(self.matched_episodes)]


def alf_matched_returns(run_dir: str, env_id: str, seeds: Sequence[int]) -> list[float]:
    """Returns of the run's final greedy policy (``alf.load(run_dir).policy``, as
    ``alf.bin.play`` acts) in ``gymnasium.make(env_id)``, one episode from each seeded
    reset (run in a worker process: :func:`_alf_matched_returns`)."""
    import gymnasium as gym
    import numpy as np
    import torch

    import alf

    torch.set_num_threads(1)
    policy = alf.load(run_dir).policy
    env = gym.make(env_id)
    returns = []
    for seed in seeds:
        observation, _ = env.reset(seed=seed)
        policy.reset()
        total, done = 0.0, False
        while not done:
            action = np.asarray(policy(np.asarray(observation, dtype=np.float32)))
            observation, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def _alf_matched_returns(setup: RunSetup, run_dir: Path) -> list[float] | None:
    """:func:`alf_matched_returns` in a fresh worker process (None if not asked for)."""
    if not setup.matched_episodes:
        return None
    argv = [
        str(Path(__file__).resolve()),
        f"--worker_matched_eval={run_dir}",
        f"--env={setup.env}",
        f"--matched_episodes={setup.matched_episodes}",
    ]
    return run_worker(argv, timeout_s=setup.timeout_s)["returns"]


def run_alf(setup: RunSetup, algo: str, seed: int) -> dict[str, Any]:
    """One ALF run; its evaluations and update time from ``progress.jsonl``."""
    import shutil

    root = setup.root / algo / "alf" / f"seed{seed}"
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    dataset_dir = str(Path(setup.dataset.data_dir).parent)
    params = (
        f"create_environment.env_name={json.dumps(setup.env)}",
        f"TrainerConfig.offline_dataset={json.dumps(dataset_dir)}",
        f"TrainerConfig.num_iterations={setup.steps}",
        f"TrainerConfig.eval_interval={setup.eval_interval}",
        f"TrainerConfig.num_eval_episodes={setup.eval_episodes}",
        f"TrainerConfig.num_eval_environments={setup.eval_episodes}",
        f"TrainerConfig.summary_interval={min(1000, setup.eval_interval)}",
        f"TrainerConfig.checkpoint_interval={setup.steps}",
        f"TrainerConfig.random_seed={seed}",
        *setup.conf_params,
    )
    cmd = [
        sys.executable,
        "-m",
        "alf.bin.train",
        f"--conf={EXAMPLES / ALGOS[algo].conf}",
        f"--root_dir={root}",
        *[f"--conf_param={p}" for p in params],
    ]
    log = setup.root / algo / f"alf_seed{seed}.log"
    rc, wall = run_logged(cmd, log=log, cwd=REPO, timeout_s=setup.timeout_s, env=RUN_ENV)
    evaluations, train_s = [], None
    returns_by_step: dict[int, list[float]] = {}
    eval_file = root / "evaluations.jsonl"
    for line in eval_file.read_text().splitlines() if eval_file.exists() else []:
        record = json.loads(line)
        returns_by_step[record["iteration"]] = record["returns"]
    progress = root / "progress.jsonl"
    for line in progress.read_text().splitlines() if progress.exists() else []:
        record = json.loads(line)
        if record.get("train_time_s") is not None:
            train_s = record["train_time_s"]
        if "eval/average_return" in record:
            step = record["iteration"]
            evaluations.append(
                {
                    "step": step,
                    "average_return": record["eval/average_return"],
                    "returns": returns_by_step.get(step),
                    "train_s": record.get("train_time_s"),
                }
            )
    steps_done = evaluations[-1]["step"] if evaluations else 0
    matched = _alf_matched_returns(setup, root) if rc == 0 else None
    return _summary(
        "alf", algo, seed, rc, wall, steps_done, train_s, evaluations, log, setup, matched
    )


def run_d3rlpy(setup: RunSetup, algo: str, seed: int, d3_spec: dict[str, Any]) -> dict[str, Any]:
    """One d3rlpy run in its venv; its ``result.json``."""
    import shutil

    assert setup.python is not None
    root = setup.root / algo / "d3rlpy" / f"seed{seed}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    spec = {
        "algo": algo,
        "seed": seed,
        "steps": setup.steps,
        "eval_interval": setup.eval_interval,
        "eval_episodes": setup.eval_episodes,
        "env": setup.env,
        "dataset_hdf5": str(Path(setup.dataset.data_dir) / "main_data.hdf5"),
        "action_low": setup.dataset.action_low,
        "action_high": setup.dataset.action_high,
        "torch_num_threads": 1,
        "d3rlpy": d3_spec,
        "matched_seeds": setup.matched_seeds,
    }
    (root / "spec.json").write_text(json.dumps(spec, indent=1))
    cmd = [setup.python, str(PEER), f"--spec={root / 'spec.json'}", f"--out={root}"]
    log = setup.root / algo / f"d3rlpy_seed{seed}.log"
    # d3rlpy writes its (empty, with the no-op logger) experiment folder into the cwd.
    rc, wall = run_logged(cmd, log=log, cwd=root, timeout_s=setup.timeout_s, env=RUN_ENV)
    result_file = root / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    evaluations = result.get("evaluations", [])
    steps_done = evaluations[-1]["step"] if evaluations else 0
    summary = _summary(
        "d3rlpy",
        algo,
        seed,
        rc,
        wall,
        steps_done,
        result.get("train_s"),
        evaluations,
        log,
        setup,
        result.get("matched_returns") or None,
    )
    summary["versions"] = result.get("versions")
    return summary


def _summary(
    framework: str,
    algo: str,
    seed: int,
    rc: int,
    wall: float,
    steps: int,
    train_s: float | None,
    evaluations: list[dict[str, Any]],
    log: Path,
    setup: RunSetup,
    matched: list[float] | None,
) -> dict[str, Any]:
    last = evaluations[-1]["average_return"] if evaluations else None
    final = sum(matched) / len(matched) if matched else last
    complete = rc == 0 and steps == setup.steps
    return {
        "framework": framework,
        "algo": algo,
        "seed": seed,
        "returncode": rc,
        "complete": complete and len(matched or ()) == setup.matched_episodes,
        "steps": steps,
        "wall_s": round(wall, 1),
        "train_s": train_s,
        "updates_per_s": steps / train_s if train_s else None,
        "final_return": final,
        "final_normalized": normalized(setup.dataset, final),
        "last_eval_return": last,
        "matched_returns": matched,
        "curve": [(e["step"], e["average_return"]) for e in evaluations],
        "evaluations": evaluations,
        "log": str(log),
    }


# --------------------------------------------------------------------------- the report


def _iqm_cells(values: dict[str, list[float]]) -> dict[str, str]:
    """``IQM [low, high]`` per framework of its seeds' values."""
    from alf.experiments.stats import iqm_interval_estimates

    present = {k: v for k, v in values.items() if v}
    if not present:
        return {}
    est = iqm_interval_estimates(present)
    cells = {}
    for name, vals in present.items():
        cell = f"{est.point[name]:.1f}"
        cell += f" [{est.low[name]:.1f}, {est.high[name]:.1f}]" if len(vals) > 1 else " (1 seed)"
        cells[name] = cell
    cells["method"] = est.method
    return cells


def summarize(runs: list[dict[str, Any]], algos: Sequence[str]) -> tuple[dict[str, Any], str]:
    """Per algorithm: both frameworks' final returns (and normalised scores) as IQM with
    its interval, their updates/s and the ALF/d3rlpy ratio of each seed's pair."""
    summary: dict[str, Any] = {}
    rows = []
    method = ""
    for algo in algos:
        done = [r for r in runs if r["algo"] == algo and r["complete"]]
        by_fw = {fw: [r for r in done if r["framework"] == fw] for fw in FRAMEWORKS}
        finals = {fw: [r["final_return"] for r in rs] for fw, rs in by_fw.items()}
        scores = {
            fw: [r["final_normalized"] for r in rs if r["final_normalized"] is not None]
            for fw, rs in by_fw.items()
        }
        speed = {fw: [r["updates_per_s"] for r in rs] for fw, rs in by_fw.items()}
        pairs = []
        for r in by_fw["alf"]:
            peer = next((p for p in by_fw["d3rlpy"] if p["seed"] == r["seed"]), None)
            if peer and r["updates_per_s"] and peer["updates_per_s"]:
                pairs.append(r["updates_per_s"] / peer["updates_per_s"])
        ratio = math.exp(sum(map(math.log, pairs)) / len(pairs)) if pairs else None
        return_cells, score_cells = _iqm_cells(finals), _iqm_cells(scores)
        method = return_cells.get("method", method)
        summary[algo] = {
            "final_returns": finals,
            "normalized_scores": scores,
            "return_iqm_ci": {fw: return_cells.get(fw) for fw in FRAMEWORKS},
            "normalized_iqm_ci": {fw: score_cells.get(fw) for fw in FRAMEWORKS},
            "updates_per_s": speed,
            "alf_over_d3rlpy_updates_per_s": pairs,
            "alf_over_d3rlpy_geomean": ratio,
        }
        for fw in FRAMEWORKS:
            mean_speed = sum(speed[fw]) / len(speed[fw]) if speed[fw] else None
            rows.append(
                [
                    f"{algo} {fw}",
                    len(finals[fw]),
                    return_cells.get(fw, "-"),
                    score_cells.get(fw, "-"),
                    fmt_num(mean_speed, 1),
                    fmt_num(ratio, 2) if fw == "alf" else "",
                ]
            )
    header = [
        "algorithm",
        "seeds",
        "final return IQM [95% CI]",
        "normalised IQM [95% CI]",
        "updates/s (mean)",
        "ALF/d3rlpy updates/s",
    ]
    return summary, format_table(header, rows) + (f"\n{method}" if method else "")


# --------------------------------------------------------------------------- main


def _cached(path: Path, steps: int, matched_episodes: int) -> dict[str, Any] | None:
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    matched = len(result.get("matched_returns") or ())
    done = result.get("complete") and result.get("steps") == steps
    return result if done and matched == matched_episodes else None


def main(argv: list[str] | None = None) -> None:
    """Parses the flags and runs the benchmark (or a hidden worker)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="tests/data/datasets/pendulum-sac-v0")
    parser.add_argument("--env", default=None, help="Gymnasium id (default: the dataset's)")
    parser.add_argument("--algos", default="iql,cql", help=f"comma list of {list(ALGOS)}")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=10_000, help="gradient steps per run")
    parser.add_argument("--eval_interval", type=int, default=2_000, help="steps per evaluation")
    parser.add_argument("--eval_episodes", type=int, default=10)
    parser.add_argument(
        "--matched_episodes",
        type=int,
        default=100,
        help="episodes of the matched final evaluation (same seeded starts for every run)",
    )
    parser.add_argument("--root_dir", default="/tmp/offline_bench")
    parser.add_argument("--venv", default=None, help="d3rlpy's venv (default: the peer's)")
    parser.add_argument(
        "--conf_param",
        action="append",
        default=[],
        help="an ALF binding for both frameworks (mapped to d3rlpy), e.g. "
        "CqlAlgorithm.conservative_weight=10.0; repeatable",
    )
    parser.add_argument("--frameworks", default="alf,d3rlpy", help="which to run")
    parser.add_argument("--timeout_s", type=float, default=48 * 3600, help="per run")
    parser.add_argument("--rerun", action="store_true", help="run again runs already done")
    parser.add_argument("--show_mapping", action="store_true", help="print the mapping, exit")
    parser.add_argument("--worker_settings", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker_matched_eval", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker_settings:
        emit_result(read_alf_settings(args.worker_settings, args.conf_param))
        return
    if args.worker_matched_eval:
        seeds = [MATCHED_SEED + i for i in range(args.matched_episodes)]
        emit_result({"returns": alf_matched_returns(args.worker_matched_eval, args.env, seeds)})
        return
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    for algo in algos:
        if algo not in ALGOS:
            parser.error(f"unknown algorithm {algo!r}: one of {list(ALGOS)}")
    if args.steps % args.eval_interval:
        parser.error("--steps must be a multiple of --eval_interval")
    specs, mappings = {}, {}
    for algo in algos:
        settings = alf_settings(algo, args.conf_param)
        specs[algo], rows = d3rlpy_spec(algo, settings, args.steps)
        mappings[algo] = rows
    if args.show_mapping:
        print("\n\n".join(mapping_table(algo, mappings[algo]) for algo in algos))
        return

    from benchmarks.peers.d3rlpy_offline import DEFAULT_VENV, ensure_venv

    frameworks = [f for f in args.frameworks.split(",") if f]
    python = ensure_venv(args.venv or DEFAULT_VENV) if "d3rlpy" in frameworks else None
    dataset = read_dataset(args.dataset)
    env = args.env or dataset.env_id
    if not env:
        parser.error("the dataset names no environment: give --env")
    root = Path(args.root_dir).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    setup = RunSetup(
        dataset=dataset,
        env=env,
        steps=args.steps,
        eval_interval=args.eval_interval,
        eval_episodes=args.eval_episodes,
        conf_params=tuple(args.conf_param),
        root=root,
        python=python,
        timeout_s=args.timeout_s,
        matched_episodes=args.matched_episodes,
    )
    results: dict[str, Any] = {
        "machine": machine_info(("torch", "gymnasium", "numpy", "mujoco")),
        "uptime_start": uptime(),
        "dataset": dataclasses.asdict(dataset),
        "env": env,
        "steps": args.steps,
        "eval_interval": args.eval_interval,
        "eval_episodes": args.eval_episodes,
        "matched_episodes": args.matched_episodes,
        "matched_seed": MATCHED_SEED,
        "conf_params": args.conf_param,
        "d3rlpy_specs": specs,
        "mapping": mappings,
        "runs": [],
    }
    print(results["uptime_start"], flush=True)
    pair = 0
    for algo in algos:
        for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
            order = list(FRAMEWORKS) if pair % 2 == 0 else list(reversed(FRAMEWORKS))
            pair += 1
            for framework in order:
                if framework not in frameworks:
                    continue
                cache = root / algo / f"{framework}_seed{seed}.result.json"
                result = None if args.rerun else _cached(cache, args.steps, args.matched_episodes)
                if result is None:
                    before = uptime()
                    if framework == "alf":
                        result = run_alf(setup, algo, seed)
                    else:
                        result = run_d3rlpy(setup, algo, seed, specs[algo])
                    result.update(uptime_before=before, uptime_after=uptime())
                    cache.write_text(json.dumps(result, indent=1))
                else:
                    result["cached"] = True
                results["runs"].append(result)
                print(
                    f"{algo} seed {seed} {framework}: rc {result['returncode']}, final return "
                    f"{fmt_num(result['final_return'], 1)}, "
                    f"{fmt_num(result['updates_per_s'], 1)} updates/s"
                    f"{' (cached)' if result.get('cached') else ''} | "
                    f"{result.get('uptime_after', '')}",
                    flush=True,
                )
    results["uptime_end"] = uptime()
    results["summary"], table = summarize(results["runs"], algos)
    print()
    print(table)
    print(f"uptime at the start: {results['uptime_start']}")
    print(f"uptime at the end:   {results['uptime_end']}")
    (root / "results.json").write_text(json.dumps(results, indent=1))
    print(f"raw numbers in {root / 'results.json'}")


if __name__ == "__main__":
    main()
