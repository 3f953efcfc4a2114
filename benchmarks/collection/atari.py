r"""Benchmark: environment steps/s of the Atari preset, per ALF backend.

``PongNoFrameskip-v4`` with ``suite_gym.load.preset = "atari"`` (no-op reset, frame skip 4
with max-pooling, 84x84 grayscale ``[1, 84, 84]`` uint8 observations, episodic life and
reward clipping: the training environment), 8 environments, built by
``create_environment`` with:

- ``vectorization_mode="envpool"`` with EnvPool's default thread count (and, for
  reference, the same EnvPool pool stepped directly with numpy actions, without ALF);
- the same with ``env_kwargs={"num_threads": os.cpu_count()}``;
- ``"sync"``: Gymnasium's ``SyncVectorEnv`` of ale_py environments, in-process;
- ``"subprocess"``: ``num_workers`` processes (default: one per core) each stepping a
  group of the environments.

Each backend runs in a fresh worker subprocess (this script with a hidden ``--worker``
flag), with ``torch.set_num_threads(1)``, uniformly random actions drawn up front, a
warm-up, then a fixed number of environment steps (one batched step of 8 environments
is 8 steps). Startup (building the environments and the first reset) is timed apart.

Usage::

    python benchmarks/collection/atari.py                   # ~1 minute on 2 cores
    python benchmarks/collection/atari.py --steps 20000 --json /tmp/atari.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import (  # noqa: E402
    WorkerError,
    emit_result,
    fmt_num,
    format_table,
    machine_info,
    run_worker,
    write_report,
)

SCRIPT = os.path.abspath(__file__)
ENV_NAME = "PongNoFrameskip-v4"

# (backend key, label)
BACKENDS: tuple[tuple[str, str], ...] = (
    ("envpool_raw", "EnvPool raw (numpy, no ALF), default num_threads"),
    ("envpool", "ALF envpool, EnvPool's default num_threads"),
    ("envpool_cores", "ALF envpool, num_threads = cores"),
    ("sync", "ALF sync (Gymnasium SyncVectorEnv)"),
    ("subprocess", "ALF subprocess (one worker per core)"),
)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """Steps one backend: returns its steps/s and startup time."""
    import warnings

    warnings.filterwarnings("ignore", message=".*precision lowered.*")
    import gin
    import torch

    torch.set_num_threads(1)
    from alf.environments import create_environment

    gin.parse_config('suite_gym.load.preset = "atari"')
    n, backend = args.num_envs, args.backend
    if backend == "envpool_raw":
        return _raw_envpool(args)
    kwargs: dict[str, Any] = {"vectorization_mode": backend}
    if backend == "envpool_cores":
        kwargs = {"vectorization_mode": "envpool",
                  "env_kwargs": {"num_threads": os.cpu_count() or 1}}
    start = time.perf_counter()
    env = create_environment(args.env_name, n, seed=0, **kwargs)
    try:
        env.reset()
        startup_s = time.perf_counter() - start
        num_actions = env.action_spec().num_actions
        generator = torch.Generator().manual_seed(0)
        actions = torch.randint(0, num_actions, (256, n), generator=generator)
        calls = max(1, args.warmup_steps // n)
        for i in range(calls):
            env.step(actions[i % len(actions)])
        calls = max(1, args.steps // n)
        start = time.perf_counter()
        for i in range(calls):
            env.step(actions[i % len(actions)])
        elapsed = time.perf_counter() - start
        result: dict[str, Any] = {
            "backend": backend,
            "num_envs": n,
            "steps": calls * n,
            "steps_per_s": calls * n / elapsed,
            "measured_s": elapsed,
            "startup_s": startup_s,
            "observation_shape": list(env.observation_spec().shape),
        }
        if hasattr(env, "num_workers"):
            result["num_workers"] = env.num_workers
        pool = getattr(env, "envpool_env", None)
        if pool is not None:
            result["envpool_num_threads"] = pool.config["num_threads"]
        return result
    finally:
        env.close()


def _raw_envpool(args: argparse.Namespace) -> dict[str, Any]:
    """EnvPool stepped directly with the preset's options and numpy actions."""
    import envpool
    import numpy as np

    from alf.environments.atari import AtariPreset, envpool_atari_id

    n = args.num_envs
    preset = AtariPreset()
    start = time.perf_counter()
    pool = envpool.make(envpool_atari_id(args.env_name), env_type="gymnasium", num_envs=n,
                        seed=0, max_episode_steps=preset.max_episode_steps,
                        **preset.envpool_kwargs(training=True))
    pool.reset()
    startup_s = time.perf_counter() - start
    actions = np.random.default_rng(0).integers(0, pool.action_space.n, (256, n))
    for i in range(max(1, args.warmup_steps // n)):
        pool.step(actions[i % len(actions)])
    calls = max(1, args.steps // n)
    start = time.perf_counter()
    for i in range(calls):
        pool.step(actions[i % len(actions)])
    elapsed = time.perf_counter() - start
    result = {"backend": "envpool_raw", "num_envs": n, "steps": calls * n,
              "steps_per_s": calls * n / elapsed, "measured_s": elapsed,
              "startup_s": startup_s, "envpool_num_threads": pool.config["num_threads"]}
    pool.close()
    return result


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env_name", default=ENV_NAME, help="a Gymnasium Atari id")
    p.add_argument("--num_envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=8000,
                   help="environment steps measured per backend (after the warm-up)")
    p.add_argument("--warmup_steps", type=int, default=800)
    p.add_argument("--backends", default=",".join(key for key, _ in BACKENDS),
                   help="comma-separated subset of: " + ", ".join(k for k, _ in BACKENDS))
    p.add_argument("--json", help="also write the raw numbers to this file")
    p.add_argument("--worker_timeout_s", type=float, default=600.0)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def report(results: dict[str, Any]) -> str:
    """The plain-text report of a run."""
    m = results["machine"]
    rows = []
    for r in results["runs"]:
        if "error" in r:
            rows.append([r["label"], "failed", "-", "-"])
            continue
        detail = ""
        if "envpool_num_threads" in r:
            threads = r["envpool_num_threads"]
            detail = f"num_threads={threads}" + (" (EnvPool's choice)" if threads == 0 else "")
        elif "num_workers" in r:
            detail = f"num_workers={r['num_workers']}"
        rows.append([r["label"], fmt_num(r["steps_per_s"]), f"{r['startup_s']:.1f}", detail])
    lines = [
        f"Atari preset, {results['settings']['env_name']}, {results['settings']['num_envs']} "
        f"environments, random actions, {results['settings']['steps']} steps per backend",
        f"machine: {m['nproc']} CPUs ({m['cpu_model']}), load average "
        f"{m['load_average_1_5_15min']}",
        "",
        format_table(["backend", "env steps/s", "startup s", ""], rows),
    ]
    errors = [f"{r['label']}: {r['error']}" for r in results["runs"] if "error" in r]
    return "\n".join(lines + errors)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.worker:
        emit_result(worker(args))
        return 0
    labels = dict(BACKENDS)
    chosen = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(chosen) - set(labels))
    if unknown:
        print(f"unknown --backends {unknown}; choose from {list(labels)}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        "benchmark": "atari",
        "machine": machine_info(("torch", "gymnasium", "numpy", "envpool", "ale-py",
                                 "opencv-python-headless", "alf")),
        "settings": {"env_name": args.env_name, "num_envs": args.num_envs,
                     "steps": args.steps, "warmup_steps": args.warmup_steps},
        "runs": [],
    }
    failures = 0
    for backend in chosen:
        print(f"{labels[backend]} ...", flush=True)
        argv_ = [SCRIPT, "--worker", "--backend", backend, "--env_name", args.env_name,
                 "--num_envs", str(args.num_envs), "--steps", str(args.steps),
                 "--warmup_steps", str(args.warmup_steps)]
        try:
            r = run_worker(argv_, timeout_s=args.worker_timeout_s)
            print(f"  {r['steps_per_s']:,.0f} steps/s", flush=True)
        except WorkerError as err:
            failures += 1
            r = {"backend": backend, "error": str(err)}
            print(f"  failed: {err}", flush=True)
        results["runs"].append({"label": labels[backend], **r})
    results["machine"]["load_average_at_end"] = machine_info(())["load_average_1_5_15min"]
    write_report(results, report(results), args.json)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
