"""Benchmark: the collection policy in numpy against torch, and the sampler against raw EnvPool.

Issue 19's sampler target is ``SyncUnroller`` at >= 50% of raw EnvPool's steps/s on
CartPole-v1 with 16 environments. This script measures, in one process with 1 torch
thread and alternating contenders (the order reversed every round):

* ``raw``: EnvPool's own ``step`` with a constant numpy action (``num_threads=1``), the
  reference;
* ``sampler numpy``: ``SyncUnroller.unroll()`` with the sampler benchmark's 2x64 tanh
  PPO policy (``collection.py``), ``ActorCriticAlgorithm.numpy_rollout = True`` (the
  default: the fused actor and value, the draw and its log-probability in numpy);
* ``sampler torch``: the same with ``numpy_rollout = False`` (the fused networks in
  torch, as before);
* ``rollout_step numpy`` / ``rollout_step torch``: the policy call alone, in a loop on
  one time step, inside a ``rollout_session()`` as in an unroll.

It prints microseconds per batched step (min and median over rounds) and, for the
samplers, raw EnvPool's median as a percentage of theirs.

    python benchmarks/collection/numpy_rollout.py --num_envs 16
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import format_table, machine_info  # noqa: E402


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--num_envs", type=int, nargs="+", default=[16], help="env counts (default 16)"
    )
    parser.add_argument("--rounds", type=int, default=15, help="alternating rounds (15)")
    parser.add_argument(
        "--unrolls", type=int, default=20, help="unrolls of 32 steps per contender per round (20)"
    )
    return parser.parse_args(argv)


def _contenders(num_envs: int, unrolls: int, closers: list[Any]) -> dict[str, Callable[[], Any]]:
    """Name -> one round's work (``unrolls * 32`` batched steps); what must be closed is
    appended to ``closers`` as it is built."""
    import envpool
    import numpy as np
    import torch

    from alf.unrollers import SyncUnroller
    from benchmarks.collection.collection_samplers import cartpole_sampler

    length = 32
    contenders: dict[str, Callable[[], Any]] = {}
    raw = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=num_envs, num_threads=1)
    closers.append(raw)
    raw.reset()
    action = np.zeros(num_envs, dtype=np.int32)

    def raw_steps() -> None:
        for _ in range(unrolls * length):
            raw.step(action)

    contenders["raw"] = raw_steps
    for name, in_numpy in (("numpy", True), ("torch", False)):
        unroller = cartpole_sampler(num_envs, numpy_rollout=in_numpy)
        env, algorithm = unroller.env, unroller.policy.algorithm
        closers.append(env)

        def unroll(u: SyncUnroller = unroller) -> None:
            for _ in range(unrolls):
                u.unroll()

        time_step = env.reset()

        def policy(a: Any = algorithm, ts: Any = time_step) -> None:
            with torch.no_grad(), a.rollout_session():
                for _ in range(unrolls * length):
                    a.rollout_step(ts, ())

        contenders[f"sampler {name}"] = unroll
        contenders[f"rollout_step {name}"] = policy
    return contenders


def _measure(num_envs: int, rounds: int, unrolls: int) -> dict[str, list[float]]:
    """Microseconds per batched step of every contender, one value per round."""
    closers: list[Any] = []
    steps = unrolls * 32
    times: dict[str, list[float]] = {}
    try:
        contenders = _contenders(num_envs, unrolls, closers)
        times = {name: [] for name in contenders}
        for work in contenders.values():  # warm up
            work()
        names = list(contenders)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                start = time.perf_counter()
                contenders[name]()
                times[name].append((time.perf_counter() - start) / steps * 1e6)
    finally:
        for c in closers:
            c.close()
    return times


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)

    from alf.utils.threads import set_cpu_threads

    set_cpu_threads(1)  # torch's and numpy's BLAS threads
    print(machine_info(("torch", "numpy", "envpool")))
    for num_envs in args.num_envs:
        load_before = os.getloadavg()[0]
        times = _measure(num_envs, args.rounds, args.unrolls)
        raw = statistics.median(times["raw"])
        rows = []
        for name, values in times.items():
            median = statistics.median(values)
            share = f"{100 * raw / median:.0f}%" if name.startswith("sampler") else ""
            rows.append([name, f"{min(values):.0f}", f"{median:.0f}", share])
        print(
            f"\nCartPole-v1, {num_envs} envs, 1 thread, load "
            f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
        )
        print(
            format_table(
                ["contender", "us/step min", "us/step median", "raw EnvPool / it (target >= 50%)"],
                rows,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
