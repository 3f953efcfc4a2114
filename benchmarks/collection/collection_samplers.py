"""Section 2 of ``collection.py``: sampler-only steps/s (collection, no training).

A 2x64 tanh MLP PPO policy collects on EnvPool ``CartPole-v1``. *sync*
(:func:`worker_sampler_sync`): a ``SyncUnroller`` whose ``unroll()`` is called
repeatedly, followed by a per-step breakdown (``env.step``, EnvPool's own step,
``rollout_step``, the rest of the unroller) and optionally a cProfile of ``unroll()``;
with ``--double_buffering``, a ``DoubleBufferedUnroller`` over two EnvPool groups instead
(section 2b runs both on ``HalfCheetah-v5``, whose step costs about as much as the policy).
*async* (:func:`worker_sampler_async`): an ``AsyncUnroller`` with ``num_actors`` actor
processes whose ``collect()`` is called repeatedly, with ``publish()`` after every call.
Each runs in a fresh subprocess started as ``collection.py --worker sampler_sync`` or
``--worker sampler_async``.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from typing import Any

from benchmarks.collection.collection_common import quiet_warnings, rate_loop, timed


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


def cartpole_sampler(
    num_envs: int,
    *,
    backend: str = "envpool",
    numpy_rollout: bool = True,
    unroller_class: type | None = None,
) -> Any:
    """A ``SyncUnroller`` (or ``unroller_class``) of 32 steps over ``num_envs`` CartPoles
    (``create_environment``'s ``backend``, EnvPool with ``num_threads=1``), seed 0, with
    :func:`_ppo_factory`'s policy built after ``torch.manual_seed(0)``: the same sampler
    for every contender of an in-process comparison."""
    import torch

    from alf.algorithms.policy import Policy
    from alf.environments import create_environment
    from alf.unrollers import SyncUnroller

    kwargs: dict[str, Any] = {"env_kwargs": {"num_threads": 1}} if backend == "envpool" else {}
    env = create_environment("CartPole-v1", num_envs, seed=0, vectorization_mode=backend, **kwargs)
    torch.manual_seed(0)
    algorithm = _ppo_factory()(
        observation_spec=env.observation_spec(),
        action_spec=env.action_spec(),
        numpy_rollout=numpy_rollout,
    )
    algorithm.eval()
    return (unroller_class or SyncUnroller)(
        env=env, policy=Policy(algorithm=algorithm), unroll_length=32
    )


def _sync_breakdown(unroller: Any, seconds: float) -> dict[str, float]:
    """Per batched step: microseconds in ``env.step`` or ``step_async`` + ``step_wait``
    (and in EnvPool's own ``send`` + ``recv`` inside them), in ``rollout_step``, and in
    the rest of ``SyncUnroller.unroll`` (with a background step, the bookkeeping between
    ``step_async`` and ``step_wait`` counts as the unroller's)."""
    env, algorithm = unroller.env, unroller.policy.algorithm
    env_s: list[float] = []
    policy_s: list[float] = []
    pool_s: list[float] = []
    # ``SyncUnroller`` calls ``step`` or, with an environment that steps in the
    # background, ``step_async`` + ``step_wait`` (ALF's EnvPool step is EnvPool's send +
    # recv): the calls it makes count as the environment's time.
    names = ("step_async", "step_wait") if env.steps_in_background else ("step",)
    for name in names:
        setattr(env, name, timed(getattr(env, name), env_s))
    algorithm.rollout_step = timed(algorithm.rollout_step, policy_s)
    pool = getattr(env, "envpool_env", None)
    # ALF's EnvPool backend calls EnvPool's C++ send/recv directly where it can
    # (``_direct``): time those, else EnvPool's public send/recv.
    direct = getattr(env, "_direct", None)
    if direct is not None:
        pool = direct
        direct._send, direct._recv = timed(direct._send, pool_s), timed(direct._recv, pool_s)
    try:
        if pool is not None and direct is None:
            pool.send = timed(pool.send, pool_s)
            pool.recv = timed(pool.recv, pool_s)
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
    for name in names:
        delattr(env, name)
    del algorithm.rollout_step
    if direct is not None:
        direct._send, direct._recv = direct.pool._send, direct.pool._recv
    elif pool is not None and pool_s:
        del pool.send, pool.recv
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
    quiet_warnings()
    import torch

    from alf.utils.threads import set_cpu_threads

    set_cpu_threads(1)  # torch's and numpy's BLAS threads
    torch.manual_seed(0)
    from alf.algorithms.policy import Policy
    from alf.environments import create_environment
    from alf.unrollers import DoubleBufferedUnroller, SyncUnroller

    n, length, env_name = args.num_envs, args.unroll_length, args.env_name

    def make_env(num_envs: int, seed: int) -> Any:
        return create_environment(env_name, num_envs, seed=seed, vectorization_mode="envpool",
                                  **_envpool_kwargs(args))

    if args.double_buffering:
        envs = (make_env(n // 2, 0), make_env(n - n // 2, n // 2))
    else:
        envs = (make_env(n, 0),)
    algorithm = _ppo_factory()(observation_spec=envs[0].observation_spec(),
                               action_spec=envs[0].action_spec())
    algorithm.eval()
    if args.double_buffering:
        unroller = DoubleBufferedUnroller(
            envs=envs, policy=Policy(algorithm=algorithm), unroll_length=length
        )
    else:
        unroller = SyncUnroller(
            env=envs[0], policy=Policy(algorithm=algorithm), unroll_length=length
        )
    try:
        rate = rate_loop(unroller.unroll, n * length, args.seconds, args.warmup_s, chunk=1)
        result: dict[str, Any] = {"mode": "sync", "env_name": env_name, "num_envs": n,
                                  "unroll_length": length, "num_actors": 0,
                                  "double_buffering": args.double_buffering, **rate}
        if not args.double_buffering:
            result.update(_sync_breakdown(unroller, max(1.0, args.seconds / 4)))
        if args.profile:
            result["profile"] = _profile_unroll(unroller, calls=max(1, 3200 // length))
    finally:
        unroller.close()
    result["torch_num_threads"] = torch.get_num_threads()
    return result


def worker_sampler_async(args: argparse.Namespace) -> dict[str, Any]:
    """Section 2, async: ``AsyncUnroller.collect()`` + ``publish()`` in a loop."""
    quiet_warnings()
    import torch

    from alf.utils.threads import set_cpu_threads

    set_cpu_threads(1)  # torch's and numpy's BLAS threads
    torch.manual_seed(0)
    from alf.algorithms.policy import Policy
    from alf.environments import create_environment
    from alf.unrollers import AsyncUnroller

    n, length, actors = args.num_envs, args.unroll_length, args.num_actors
    factory = _ppo_factory()
    env_factory = functools.partial(create_environment, args.env_name, vectorization_mode="envpool",
                                    **_envpool_kwargs(args))
    spec_env = create_environment(args.env_name, 1, seed=0, vectorization_mode="envpool")
    algorithm = factory(observation_spec=spec_env.observation_spec(),
                        action_spec=spec_env.action_spec())
    spec_env.close()
    built = time.perf_counter()
    unroller = AsyncUnroller(
        env_factory=env_factory,
        policy=Policy(algorithm=algorithm),
        algorithm_factory=factory,
        num_envs=n,
        unroll_length=length,
        seed=0,
        num_actors=actors,
        fragments_per_iteration=actors,
        double_buffering=args.double_buffering,
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
        "mode": "async", "env_name": args.env_name, "double_buffering": args.double_buffering,
        "num_envs": n, "unroll_length": length, "num_actors": actors,
        "steps_per_s": steps / elapsed, "measured_s": elapsed, "startup_s": startup_s,
        "learner_wait_fraction": stats.get("async/learner_wait_fraction"),
        "policy_lag_mean": stats.get("async/policy_lag_mean"),
        "actor_env_steps_per_s": stats.get("async/actor_env_steps_per_second"),
        "torch_num_threads": torch.get_num_threads(),
    }
