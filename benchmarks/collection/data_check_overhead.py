"""Benchmark: what checking every batch of observations and rewards costs
(:mod:`alf.environments.data_check`) on cheap environments.

Steps ``--num_envs`` CartPole environments (``sync`` backend, random actions) with the
checks on and with them switched off, alternating the two (in ABBA order) for
``--rounds`` rounds of ``--steps`` steps each, and prints the median steps per second of
each and their ratio.

Usage::

    python benchmarks/collection/data_check_overhead.py [--num_envs 16] [--steps 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import machine_info  # noqa: E402


def _rate(env, steps: int, actions) -> float:  # noqa: ANN001
    env.reset()
    start = time.perf_counter()
    for i in range(steps):
        env.step(actions[i % len(actions)])
    elapsed = time.perf_counter() - start
    return steps * env.batch_size / elapsed


def main() -> None:
    """Runs the benchmark and prints the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num_envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import torch

    from alf.environments import create_environment
    from alf.environments.data_check import DataChecker

    torch.set_num_threads(1)
    print(machine_info())
    print("uptime:", os.popen("uptime").read().strip())
    env = create_environment("CartPole-v1", args.num_envs, seed=0)
    actions = [torch.randint(0, 2, (args.num_envs,)) for _ in range(64)]
    checked, unchecked = [], []
    original = DataChecker.check
    try:
        for i in range(args.rounds):
            for on in (True, False) if i % 2 == 0 else (False, True):  # ABBA order
                DataChecker.check = original if on else (lambda self, observation, reward: None)
                (checked if on else unchecked).append(_rate(env, args.steps, actions))
    finally:
        DataChecker.check = original
        env.close()
    on, off = statistics.median(checked), statistics.median(unchecked)
    print(f"CartPole x{args.num_envs}, sync backend, {args.rounds} alternating rounds:")
    print(f"  checked   {on:10.0f} env steps/s")
    print(f"  unchecked {off:10.0f} env steps/s")
    print(f"  checked / unchecked = {on / off:.3f}")
    print("uptime:", os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
