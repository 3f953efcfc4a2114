r"""Benchmark: how fast ALF collects experience, with and without training.

Three measurements, each in a fresh worker subprocess (this script with a hidden
``--worker`` flag), so torch thread settings, gin state, imports, thread pools and actor
processes cannot leak from one run into the next. The parent only waits while a worker
runs. Every worker sets ``torch.set_num_threads(1)`` (the learner through
``TrainerConfig.torch_num_threads = 1``; ALF's actor processes always use 1).

1. **Raw environment steps/s** on ``CartPole-v1`` with 16 environments and a constant
   action: EnvPool stepped directly with numpy actions (``envpool.make(...,
   env_type="gymnasium", num_envs=16)``, with its default thread count and with
   ``num_threads=1``), Gymnasium's ``gym.make_vec(..., vectorization_mode="sync")``, and
   the same through ALF's ``create_environment`` (``vectorization_mode`` ``"envpool"``,
   ``"sync"`` and ``"subprocess"``; the last is skipped with a note when
   ``alf.environments.subprocess_environment`` does not import). Steps/s counts every
   environment (one batched step of 16 environments is 16 steps).

2. **Sampler-only steps/s**: collection with a 2x64 tanh MLP PPO policy
   (``PPOAlgorithm`` with ``ActorDistributionNetwork`` / ``ValueNetwork``), no training,
   on EnvPool CartPole-v1, for 16 environments (the raw rate's count) and a larger count
   (default 64). *sync*: a ``SyncUnroller`` whose ``unroll()`` is called repeatedly.
   *async*: an ``AsyncUnroller`` with ``num_actors`` actor processes whose
   ``collect()`` is called repeatedly, with ``publish()`` after every call as training
   would (``fragments_per_iteration = num_actors``). Steps/s is measured over a fixed
   wall time after a warm-up (for async: after the first fragment arrived). The sync
   worker then times, per batched step, ``env.step`` (and EnvPool's own step inside
   it), the policy's ``rollout_step``, and the rest of the unroller. Target: sync
   sampler >= 50% of the raw EnvPool rate at 16 environments.

3. **Training throughput, sync vs async**: PPO on ``HalfCheetah-v5`` (MuJoCo; default:
   the Gymnasium ``sync`` backend, ALF's default for this id; ``--train_backend
   envpool`` for EnvPool), 8 environments, 2x64 networks, ``num_epochs`` and
   ``mini_batch_size`` chosen so that the sync run spends about half its time
   collecting and half training (both fractions are measured and printed). Sync:
   ``RLTrainer`` with ``TrainerConfig.async_unroll=False``; async: the same with
   ``async_unroll=True``, ``AsyncUnroller.num_actors = k`` and
   ``AsyncUnroller.fragments_per_iteration = k`` (the 8 environments are split over the
   actors, so every iteration trains on the same 8 x unroll_length steps as sync), using
   ``AppoAlgorithm`` (V-trace) when ``alf.algorithms.appo`` imports, else PPO. Evaluation
   is off. Each run trains for a warm-up plus a fixed measuring time
   (``trainer.request_stop()`` from a timer); steps/s is read from ``progress.jsonl``
   (one record per iteration) over the iterations after the warm-up: env steps /
   elapsed wall time (everything the loop does), and env steps / ``train_time_s``
   (collect + train only). The full run repeats the sync run after the async ones and
   compares async with the mean of both (against load drift). Also printed: the share
   of the window the learner spent collecting (sync) or waiting for fragments (async)
   and training, and the learner's CPU time / wall time while training (below ~90%:
   it was starved of CPU). Target: async >= 1.5x sync.

On a shared machine read the load averages and the autogroup warning: with
``kernel.sched_autogroup_enabled=1`` the CPUs are shared between *sessions*, so while
other sessions are busy the actor processes take CPU from this benchmark's own learner
and async runs cannot beat sync.

Usage::

    python benchmarks/collection.py                 # full run (~6-7 minutes on 2 cores)
    python benchmarks/collection.py --quick         # smoke run (~1.5 minutes)
    python benchmarks/collection.py --json /tmp/collection.json
    python benchmarks/collection.py --sections sampler --profile   # + cProfile of unroll()
    python benchmarks/collection.py --sections sampler --sampler_envpool_threads 1
    python benchmarks/collection.py --sections train --train_backend envpool
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collection_report import (  # noqa: E402
    CARTPOLE,
    RAW_NUM_ENVS,
    autogroup_enabled,
    report,
    targets,
    warnings_about,
)
from common import (  # noqa: E402
    WorkerError,
    emit_result,
    machine_info,
    package_version,
    run_worker,
    write_report,
)

SCRIPT = os.path.abspath(__file__)
SECTIONS = ("env", "sampler", "train")

# Rows of section 1: (backend key, label).
ENV_BACKENDS: tuple[tuple[str, str], ...] = (
    ("raw_envpool", "EnvPool raw (numpy), default num_threads"),
    ("raw_envpool_1thread", "EnvPool raw (numpy), num_threads=1"),
    ("raw_gym_sync", "Gymnasium make_vec sync raw (numpy)"),
    ("alf_envpool", "ALF create_environment envpool"),
    ("alf_envpool_1thread", "ALF create_environment envpool, num_threads=1"),
    ("alf_sync", "ALF create_environment sync"),
    ("alf_subprocess", "ALF create_environment subprocess"),
)

# Section 3's fixed hyperparameters (the balance knobs are flags).
TRAIN_HPARAMS: dict[str, Any] = {
    "env_name": "HalfCheetah-v5",
    "hidden": (64, 64),
    "activation": "tanh",
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "learning_rate": 3e-4,
    "clip": 0.2,
    "entropy_coef": 0.0,
    "value_loss_coef": 0.5,
    "max_grad_norm": 0.5,
    "normalize_advantages": True,
}

QUICK = {
    "env_seconds": 0.7,
    "env_warmup_s": 0.2,
    "sampler_seconds": 1.5,
    "sampler_warmup_s": 0.5,
    "train_seconds": 8.0,
    "train_warmup_s": 4.0,
    "train_actors": "1",
    "bracket_sync": False,
}
FULL = {
    "env_seconds": 4.0,
    "env_warmup_s": 1.0,
    "sampler_seconds": 8.0,
    "sampler_warmup_s": 2.0,
    "train_seconds": 45.0,
    "train_warmup_s": 10.0,
    "train_actors": "1,2",
    "bracket_sync": True,
}


# --------------------------------------------------------------------------- helpers
def _rate_loop(step: Callable[[], None], steps_per_call: int, seconds: float,
               warmup_s: float, chunk: int = 20) -> dict[str, float]:
    """Calls ``step`` for ``warmup_s``, then counts calls over ``seconds`` of wall time."""
    deadline = time.perf_counter() + warmup_s
    while time.perf_counter() < deadline:
        for _ in range(chunk):
            step()
    calls = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(chunk):
            step()
        calls += chunk
        now = time.perf_counter()
        if now >= end:
            break
    elapsed = now - start
    return {"steps_per_s": calls * steps_per_call / elapsed, "calls": calls,
            "measured_s": elapsed}


def _timed(fn: Callable[..., Any], sink: list[float],
           cpu_sink: list[float] | None = None) -> Callable[..., Any]:
    """``fn`` wrapped to append each call's wall time (seconds) to ``sink`` and, if
    given, the CPU time of the calling thread to ``cpu_sink``."""
    clock, cpu_clock = time.perf_counter, time.thread_time

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tick, cpu_tick = clock(), cpu_clock()
        try:
            return fn(*args, **kwargs)
        finally:
            sink.append(clock() - tick)
            if cpu_sink is not None:
                cpu_sink.append(cpu_clock() - cpu_tick)

    return wrapper


def _quiet_warnings() -> None:
    """Silences the float64-bounds and MuJoCo deprecation chatter of the envs."""
    import warnings

    warnings.filterwarnings("ignore", message=".*precision lowered.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def _envpool_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``create_environment`` keyword arguments for ``--sampler_envpool_threads``."""
    if args.sampler_envpool_threads is None:
        return {}
    return {"env_kwargs": {"num_threads": args.sampler_envpool_threads}}


def _ppo_factory() -> Callable[..., Any]:
    """A cloudpicklable ``(observation_spec=, action_spec=) -> PPOAlgorithm`` with two
    separate 2x64 tanh MLPs."""
    from alf.algorithms.ppo import PPOAlgorithm
    from alf.networks import ActorDistributionNetwork, ValueNetwork

    return functools.partial(
        PPOAlgorithm,
        actor_network_ctor=functools.partial(
            ActorDistributionNetwork, fc_layer_params=(64, 64), activation="tanh"),
        value_network_ctor=functools.partial(
            ValueNetwork, fc_layer_params=(64, 64), activation="tanh"),
    )


# --------------------------------------------------------------------------- workers
def worker_env(args: argparse.Namespace) -> dict[str, Any]:
    """Section 1: raw steps/s of one backend with a constant action."""
    _quiet_warnings()
    n = args.num_envs
    backend = args.backend
    result: dict[str, Any] = {"backend": backend, "num_envs": n}
    if backend.startswith("raw_envpool"):
        import envpool
        import numpy as np

        kwargs = {"num_threads": 1} if backend.endswith("1thread") else {}
        env = envpool.make(CARTPOLE, env_type="gymnasium", num_envs=n, **kwargs)
        env.reset()
        action = np.zeros(n, dtype=np.int32)
        result.update(_rate_loop(lambda: env.step(action), n, args.seconds, args.warmup_s))
        env.close()
        result["versions"] = {"envpool": package_version("envpool")}
        return result
    if backend == "raw_gym_sync":
        import gymnasium as gym
        import numpy as np

        env = gym.make_vec(CARTPOLE, n, vectorization_mode="sync")
        env.reset(seed=0)
        action = np.zeros(n, dtype=np.int64)
        result.update(_rate_loop(lambda: env.step(action), n, args.seconds, args.warmup_s))
        env.close()
        return result

    import torch

    torch.set_num_threads(1)
    from alf.environments import create_environment

    kwargs: dict[str, Any] = {}
    mode = backend.removeprefix("alf_")
    if mode == "envpool_1thread":
        mode, kwargs = "envpool", {"env_kwargs": {"num_threads": 1}}
    if mode == "subprocess":
        try:
            import alf.environments.subprocess_environment  # noqa: F401
        except Exception as err:  # noqa: BLE001 - reported as a skipped row
            return {**result, "skipped": f"alf.environments.subprocess_environment does "
                                         f"not import: {type(err).__name__}: {err}"}
    env = create_environment(CARTPOLE, n, seed=0, vectorization_mode=mode, **kwargs)
    try:
        env.reset()
        action = torch.zeros(n, dtype=env.action_spec().dtype)
        result.update(_rate_loop(lambda: env.step(action), n, args.seconds, args.warmup_s))
        if mode == "subprocess":
            result["num_workers"] = getattr(env, "num_workers", None)
    finally:
        env.close()
    result["torch_num_threads"] = torch.get_num_threads()
    return result


def _sync_breakdown(unroller: Any, seconds: float) -> dict[str, float]:
    """Per batched step: microseconds in ``env.step`` (and in EnvPool's own step inside
    it), in ``rollout_step``, and in the rest of ``SyncUnroller.unroll``."""
    env, algorithm = unroller.env, unroller.algorithm
    env_s: list[float] = []
    policy_s: list[float] = []
    pool_s: list[float] = []
    env.step = _timed(env.step, env_s)
    algorithm.rollout_step = _timed(algorithm.rollout_step, policy_s)
    pool = getattr(env, "envpool_env", None)
    try:
        if pool is not None:
            pool.step = _timed(pool.step, pool_s)
    except (AttributeError, TypeError):
        pool = None
    calls = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        unroller.unroll()
        calls += 1
    total = time.perf_counter() - start
    rows = calls * unroller.unroll_length
    per = 1e6 / rows
    result = {
        "per_step_total_us": total * per,
        "per_step_env_us": sum(env_s) * per,
        "per_step_policy_us": sum(policy_s) * per,
        "per_step_other_us": (total - sum(env_s) - sum(policy_s)) * per,
    }
    if pool is not None and pool_s:
        result["per_step_envpool_raw_us"] = sum(pool_s) * per
        result["per_step_env_wrapper_us"] = (sum(env_s) - sum(pool_s)) * per
    del env.step, algorithm.rollout_step
    if pool is not None and pool_s:
        del pool.step
    return result


def _profile_unroll(unroller: Any, calls: int, top: int = 25) -> str:
    """cProfile of ``calls`` calls of ``unroller.unroll()``: the ``top`` functions by own
    time."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        unroller.unroll()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def worker_sampler_sync(args: argparse.Namespace) -> dict[str, Any]:
    """Section 2, sync: ``SyncUnroller.unroll()`` with a 2x64 PPO policy, no training."""
    _quiet_warnings()
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    from alf.environments import create_environment
    from alf.unrollers import SyncUnroller

    n, length = args.num_envs, args.unroll_length
    env = create_environment(CARTPOLE, n, seed=0, vectorization_mode="envpool",
                             **_envpool_kwargs(args))
    algorithm = _ppo_factory()(observation_spec=env.observation_spec(),
                               action_spec=env.action_spec())
    algorithm.eval()
    unroller = SyncUnroller(env=env, algorithm=algorithm, unroll_length=length)
    try:
        rate = _rate_loop(unroller.unroll, n * length, args.seconds, args.warmup_s, chunk=1)
        result: dict[str, Any] = {"mode": "sync", "num_envs": n, "unroll_length": length,
                                  "num_actors": 0, **rate}
        result.update(_sync_breakdown(unroller, max(1.0, args.seconds / 4)))
        if args.profile:
            result["profile"] = _profile_unroll(unroller, calls=max(1, 3200 // length))
    finally:
        unroller.close()
    result["torch_num_threads"] = torch.get_num_threads()
    return result


def worker_sampler_async(args: argparse.Namespace) -> dict[str, Any]:
    """Section 2, async: ``AsyncUnroller.collect()`` + ``publish()`` in a loop."""
    _quiet_warnings()
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    from alf.environments import create_environment
    from alf.unrollers import AsyncUnroller

    n, length, actors = args.num_envs, args.unroll_length, args.num_actors
    factory = _ppo_factory()
    env_factory = functools.partial(create_environment, CARTPOLE, vectorization_mode="envpool",
                                    **_envpool_kwargs(args))
    spec_env = create_environment(CARTPOLE, 1, seed=0, vectorization_mode="envpool")
    algorithm = factory(observation_spec=spec_env.observation_spec(),
                        action_spec=spec_env.action_spec())
    spec_env.close()
    built = time.perf_counter()
    unroller = AsyncUnroller(
        env_factory=env_factory,
        algorithm=algorithm,
        algorithm_factory=factory,
        num_envs=n,
        unroll_length=length,
        seed=0,
        num_actors=actors,
        fragments_per_iteration=actors,
    )
    try:
        unroller.collect()
        unroller.publish(algorithm)
        startup_s = time.perf_counter() - built
        deadline = time.perf_counter() + args.warmup_s
        while time.perf_counter() < deadline:
            unroller.collect()
            unroller.publish(algorithm)
        unroller.pop_stats()
        steps = 0
        start = time.perf_counter()
        while True:
            fragments = unroller.collect()
            unroller.publish(algorithm)
            steps += len(fragments) * unroller.steps_per_unroll
            now = time.perf_counter()
            if now - start >= args.seconds:
                break
        stats = unroller.pop_stats()
    finally:
        unroller.close()
    elapsed = now - start
    return {
        "mode": "async", "num_envs": n, "unroll_length": length, "num_actors": actors,
        "steps_per_s": steps / elapsed, "measured_s": elapsed, "startup_s": startup_s,
        "learner_wait_fraction": stats.get("async/learner_wait_fraction"),
        "policy_lag_mean": stats.get("async/policy_lag_mean"),
        "actor_env_steps_per_s": stats.get("async/actor_env_steps_per_second"),
        "torch_num_threads": torch.get_num_threads(),
    }


def _appo_available() -> bool:
    """Whether ``alf.algorithms.appo.AppoAlgorithm`` imports (else async runs use PPO)."""
    try:
        from alf.algorithms.appo import AppoAlgorithm  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure means "use PPO"
        return False
    return True


def _train_params(args: argparse.Namespace, algorithm: str) -> list[str]:
    """Gin bindings of a section-3 run."""
    hp = TRAIN_HPARAMS
    hidden = tuple(hp["hidden"])
    params = [
        f'create_environment.env_name="{hp["env_name"]}"',
        f"create_environment.num_parallel_environments={args.train_envs}",
        f'create_environment.vectorization_mode="{args.train_backend}"',
        *([f'create_environment.env_kwargs={{"num_threads": {args.train_envpool_threads}}}']
          if args.train_backend == "envpool" and args.train_envpool_threads is not None
          else []),
        f"ActorDistributionNetwork.fc_layer_params={hidden}",
        f'ActorDistributionNetwork.activation="{hp["activation"]}"',
        f"ValueNetwork.fc_layer_params={hidden}",
        f'ValueNetwork.activation="{hp["activation"]}"',
        f"TrainerConfig.algorithm_ctor=@{algorithm}",
        f"TrainerConfig.unroll_length={args.train_unroll_length}",
        "TrainerConfig.num_env_steps=1000000000",  # stopped by a timer instead
        "TrainerConfig.summary_interval=1",
        "TrainerConfig.evaluate=False",
        "TrainerConfig.checkpoint_interval=1000000000",
        "TrainerConfig.progress_interval_s=1000000000.0",
        "TrainerConfig.torch_num_threads=1",
        "TrainerConfig.random_seed=0",
        f"TrainerConfig.async_unroll={args.mode == 'async'}",
    ]
    for name in ("gamma", "gae_lambda", "learning_rate", "clip", "entropy_coef",
                 "value_loss_coef", "max_grad_norm", "normalize_advantages"):
        params.append(f"{algorithm}.{name}={hp[name]}")
    params += [f"{algorithm}.num_epochs={args.train_epochs}",
               f"{algorithm}.mini_batch_size={args.train_mini_batch}"]
    if args.mode == "async":
        params += [f"AsyncUnroller.num_actors={args.num_actors}",
                   f"AsyncUnroller.fragments_per_iteration={args.num_actors}"]
    return params


def worker_train(args: argparse.Namespace) -> dict[str, Any]:
    """Section 3: one ``RLTrainer`` run for a warm-up plus a fixed measuring time."""
    _quiet_warnings()
    import torch
    from absl import logging as absl_logging

    from alf import config as alf_config
    from alf.trainers import RLTrainer, TrainerConfig

    absl_logging.set_verbosity(absl_logging.WARNING)
    algorithm = "AppoAlgorithm" if args.mode == "async" and _appo_available() else "PPOAlgorithm"
    params = _train_params(args, algorithm)
    alf_config.load_config(None, params)
    with tempfile.TemporaryDirectory(prefix="alf_bench_collection_") as root_dir:
        setup_start = time.monotonic()
        trainer = RLTrainer(config=TrainerConfig(), root_dir=root_dir)
        setup_s = time.monotonic() - setup_start
        # Seconds of each call; the k-th call (from 1) belongs to iteration k (each
        # on-policy iteration unrolls / collects once and trains once).
        collect_calls: list[float] = []
        train_calls: list[float] = []
        train_cpu: list[float] = []
        unroller = trainer.unroller
        if args.mode == "async":
            unroller.collect = _timed(unroller.collect, collect_calls)
        else:
            unroller.unroll = _timed(unroller.unroll, collect_calls)
        trainer.algorithm.train_from_unroll = _timed(trainer.algorithm.train_from_unroll,
                                                     train_calls, train_cpu)
        timer = threading.Timer(args.warmup_s + args.seconds, trainer.request_stop)
        timer.daemon = True
        try:
            timer.start()
            trainer.train()
        finally:
            timer.cancel()
            trainer.close()
        with open(os.path.join(root_dir, "progress.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()]

    records = [r for r in records if "env_steps" in r and "elapsed_s" in r]
    after = [r for r in records if r["elapsed_s"] >= args.warmup_s and r["iteration"] >= 2]
    if len(after) < 2:
        raise RuntimeError(
            f"only {len(after)} iterations finished after the {args.warmup_s}s warm-up "
            f"({len(records)} in all): increase --train_seconds")
    first, last = after[0], after[-1]
    window = last["elapsed_s"] - first["elapsed_s"]
    steps = last["env_steps"] - first["env_steps"]

    def in_window(calls: list[float]) -> float:
        """Seconds spent in the calls of the iterations after ``first``."""
        return sum(calls[first["iteration"]:last["iteration"]])

    lags = [r["train/async/policy_lag_mean"] for r in after[1:]
            if "train/async/policy_lag_mean" in r]
    return {
        "mode": args.mode,
        "algorithm": algorithm,
        "num_actors": args.num_actors if args.mode == "async" else 0,
        "num_envs": args.train_envs,
        "backend": args.train_backend,
        "unroll_length": args.train_unroll_length,
        "num_epochs": args.train_epochs,
        "mini_batch_size": args.train_mini_batch,
        "setup_s": setup_s,
        "iterations_measured": last["iteration"] - first["iteration"],
        "env_steps_measured": steps,
        "window_s": window,
        "steps_per_s": steps / window,
        "steps_per_s_train_time": steps / max(last["train_time_s"] - first["train_time_s"],
                                              1e-9),
        "collect_fraction": in_window(collect_calls) / window,
        "train_fraction": in_window(train_calls) / window,
        # CPU time / wall time of the learner's training calls: ~1 when it had a core
        # to itself, lower when it was starved (another process on its core).
        "train_cpu_share": in_window(train_cpu) / max(in_window(train_calls), 1e-9),
        "policy_lag_mean": sum(lags) / len(lags) if lags else None,
        "torch_num_threads": torch.get_num_threads(),
    }


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="short smoke run (~1-2 minutes); sets the defaults below")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)")
    p.add_argument("--json", default=None, help="also write the raw numbers to this file")
    p.add_argument("--env_seconds", type=float, default=None,
                   help=f"section 1 measuring time per backend (full {FULL['env_seconds']}, "
                        f"quick {QUICK['env_seconds']})")
    p.add_argument("--sampler_seconds", type=float, default=None,
                   help=f"section 2 measuring time per run (full {FULL['sampler_seconds']}, "
                        f"quick {QUICK['sampler_seconds']})")
    p.add_argument("--sampler_envs", default="16,64",
                   help="environment counts of section 2 (default 16,64)")
    p.add_argument("--unroll_length", type=int, default=32,
                   help="section 2 unroll length (default 32)")
    p.add_argument("--sampler_actors", type=int, default=2,
                   help="section 2 async actors (default 2)")
    p.add_argument("--sampler_envpool_threads", type=int, default=None,
                   help="section 2: EnvPool num_threads of every sampler's environments "
                        "(default: EnvPool's own default)")
    p.add_argument("--profile", action="store_true",
                   help="section 2: also print a cProfile of SyncUnroller.unroll() at "
                        f"{RAW_NUM_ENVS} envs")
    p.add_argument("--train_seconds", type=float, default=None,
                   help=f"section 3 measuring time per run (full {FULL['train_seconds']}, "
                        f"quick {QUICK['train_seconds']})")
    p.add_argument("--train_warmup_s", type=float, default=None,
                   help=f"section 3 warm-up (full {FULL['train_warmup_s']}, quick "
                        f"{QUICK['train_warmup_s']})")
    p.add_argument("--train_actors", default=None,
                   help="section 3 async actor counts, comma-separated (full "
                        f"{FULL['train_actors']}, quick {QUICK['train_actors']})")
    p.add_argument("--bracket_sync", type=int, choices=[0, 1], default=None,
                   help="1: run sync again after the async runs and compare async with "
                        "the mean of both sync runs, against load drift (full 1, quick 0)")
    p.add_argument("--train_backend", default="sync", choices=["sync", "envpool"],
                   help="section 3 env backend (default: Gymnasium sync, ALF's default)")
    p.add_argument("--train_envpool_threads", type=int, default=None,
                   help="section 3 with --train_backend envpool: EnvPool num_threads "
                        "(default: EnvPool's own default)")
    p.add_argument("--train_envs", type=int, default=8, help="section 3 envs (default 8)")
    p.add_argument("--train_unroll_length", type=int, default=128,
                   help="section 3 unroll length (default 128)")
    p.add_argument("--train_epochs", type=int, default=4,
                   help="section 3 epochs per iteration (default 4)")
    p.add_argument("--train_mini_batch", type=int, default=64,
                   help="section 3 mini-batch size (default 64)")
    p.add_argument("--worker_timeout_s", type=float, default=600.0,
                   help="kill a worker after this many seconds (default 600)")
    p.add_argument("--verbose", action="store_true", help="show the workers' logs")
    # Internal: run one measurement and print its JSON result line.
    p.add_argument("--worker", choices=["env", "sampler_sync", "sampler_async", "train"],
                   help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--num_envs", type=int, default=RAW_NUM_ENVS, help=argparse.SUPPRESS)
    p.add_argument("--num_actors", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--warmup_s", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=["sync", "async"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    preset = QUICK if args.quick else FULL
    for name in ("env_seconds", "sampler_seconds", "train_seconds", "train_warmup_s",
                 "train_actors", "bracket_sync"):
        if getattr(args, name) is None:
            setattr(args, name, preset[name])
    args.env_warmup_s = preset["env_warmup_s"]
    args.sampler_warmup_s = preset["sampler_warmup_s"]
    return args


def _worker_main(args: argparse.Namespace) -> None:
    workers = {"env": worker_env, "sampler_sync": worker_sampler_sync,
               "sampler_async": worker_sampler_async, "train": worker_train}
    emit_result(workers[args.worker](args))


def _run(label: str, argv: list[str], args: argparse.Namespace,
         summary: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    """Runs one worker, printing a progress line; failures become ``{"error": ...}``."""
    print(f"  {label} ...", end=" ", flush=True)
    tick = time.monotonic()
    try:
        result = run_worker([SCRIPT, *argv], timeout_s=args.worker_timeout_s,
                            verbose=args.verbose)
    except WorkerError as err:
        print(f"FAILED\n{err}", flush=True)
        return {"error": str(err)}
    print(f"{time.monotonic() - tick:.0f}s ({summary(result)})", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.worker:
        _worker_main(args)
        return 0
    sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        print(f"unknown --sections {unknown}; choose from {SECTIONS}", file=sys.stderr)
        return 2
    train_actors = [int(x) for x in str(args.train_actors).split(",") if x.strip()]
    results: dict[str, Any] = {
        "benchmark": "collection",
        "machine": machine_info(("torch", "gymnasium", "numpy", "envpool", "mujoco", "alf")),
        "settings": {
            "quick": args.quick, "sections": sections,
            "env_seconds": args.env_seconds, "env_warmup_s": args.env_warmup_s,
            "sampler_seconds": args.sampler_seconds, "sampler_warmup_s": args.sampler_warmup_s,
            "sampler_envs": args.sampler_envs, "unroll_length": args.unroll_length,
            "sampler_actors": args.sampler_actors,
            "sampler_envpool_threads": args.sampler_envpool_threads,
            "train_seconds": args.train_seconds, "train_warmup_s": args.train_warmup_s,
            "bracket_sync": bool(args.bracket_sync),
            "train": {"backend": args.train_backend,
                      "envpool_threads": args.train_envpool_threads, "envs": args.train_envs,
                      "unroll_length": args.train_unroll_length, "epochs": args.train_epochs,
                      "mini_batch": args.train_mini_batch, "actors": train_actors,
                      "hyperparameters": {**TRAIN_HPARAMS,
                                          "hidden": list(TRAIN_HPARAMS["hidden"])}},
        },
        "notes": [],
    }
    m = results["machine"]
    m["sched_autogroup_enabled"] = autogroup_enabled()
    print(f"machine: nproc={m['nproc']}, cpu={m['cpu_model']}, load average "
          f"{m['load_average_1_5_15min']}", flush=True)
    failures = 0

    if "env" in sections:
        print("1. raw environment steps/s", flush=True)
        results["env"] = []
        for backend, label in ENV_BACKENDS:
            r = _run(backend, ["--worker", "env", "--backend", backend,
                               "--num_envs", str(RAW_NUM_ENVS),
                               "--seconds", str(args.env_seconds),
                               "--warmup_s", str(args.env_warmup_s)], args,
                     lambda r: r.get("skipped") or f"{r['steps_per_s']:,.0f} steps/s")
            failures += "error" in r
            if "skipped" in r:
                results["notes"].append(f"note: {backend} skipped: {r['skipped']}")
            results["env"].append({"backend": backend, "label": label, **r})

    if "sampler" in sections:
        print("2. sampler-only steps/s", flush=True)
        results["sampler"] = []
        for n in [int(x) for x in args.sampler_envs.split(",") if x.strip()]:
            common_argv = ["--num_envs", str(n), "--unroll_length", str(args.unroll_length),
                           "--seconds", str(args.sampler_seconds),
                           "--warmup_s", str(args.sampler_warmup_s)]
            if args.sampler_envpool_threads is not None:
                common_argv += ["--sampler_envpool_threads", str(args.sampler_envpool_threads)]
            sync_argv = ["--worker", "sampler_sync", *common_argv]
            if args.profile and n == RAW_NUM_ENVS:
                sync_argv.append("--profile")
            for mode, argv in (("sync", sync_argv),
                               ("async", ["--worker", "sampler_async", *common_argv,
                                          "--num_actors", str(args.sampler_actors)])):
                r = _run(f"{mode} {n} envs", argv, args,
                         lambda r: f"{r['steps_per_s']:,.0f} steps/s")
                failures += "error" in r
                results["sampler"].append({"mode": mode, "num_envs": n,
                                           "num_actors": 0 if mode == "sync"
                                           else args.sampler_actors, **r})

    if "train" in sections:
        appo = _appo_available_in_subprocess(args)
        results["settings"]["train"]["async_algorithm"] = "AppoAlgorithm" if appo else (
            "PPOAlgorithm")
        if not appo:
            results["notes"].append("note: alf.algorithms.appo does not import: the async "
                                    "runs use PPOAlgorithm")
        print(f"3. training throughput ({TRAIN_HPARAMS['env_name']}, sync vs async)",
              flush=True)
        results["train"] = []
        common_argv = ["--worker", "train", "--seconds", str(args.train_seconds),
                       "--warmup_s", str(args.train_warmup_s),
                       "--train_backend", args.train_backend,
                       *(["--train_envpool_threads", str(args.train_envpool_threads)]
                         if args.train_envpool_threads is not None else []),
                       "--train_envs", str(args.train_envs),
                       "--train_unroll_length", str(args.train_unroll_length),
                       "--train_epochs", str(args.train_epochs),
                       "--train_mini_batch", str(args.train_mini_batch)]
        runs = [("sync", 0)] + [("async", k) for k in train_actors]
        if args.bracket_sync:
            runs.append(("sync", 0))
        for index, (mode, actors) in enumerate(runs):
            if mode == "async" and args.train_envs % actors:
                results["notes"].append(f"note: async with {actors} actors skipped: "
                                        f"{args.train_envs} envs do not split evenly")
                continue
            repeat = mode == "sync" and index > 0
            label = ("sync" + (" (again)" if repeat else "")) if mode == "sync" else (
                f"async {actors} actor(s)")
            r = _run(label, [*common_argv, "--mode", mode, "--num_actors", str(max(actors, 1))],
                     args, lambda r: (f"{r['steps_per_s']:,.0f} steps/s, collect/wait "
                                      f"{100 * r['collect_fraction']:.0f}%, train "
                                      f"{100 * r['train_fraction']:.0f}%"))
            failures += "error" in r
            results["train"].append({"mode": mode, "num_actors": actors, "repeat": repeat,
                                     **r})

    results["machine"]["load_average_at_end"] = machine_info(())["load_average_1_5_15min"]
    results["targets"] = targets(results)
    results["notes"] += warnings_about(results)
    write_report(results, report(results), args.json)
    return 1 if failures else 0


def _appo_available_in_subprocess(args: argparse.Namespace) -> bool:
    """Whether ``alf.algorithms.appo`` imports (checked in a subprocess: the parent
    imports neither torch nor ALF)."""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", "import alf.algorithms.appo"],
                          capture_output=True, timeout=args.worker_timeout_s, check=False)
    return proc.returncode == 0


if __name__ == "__main__":
    sys.exit(main())
