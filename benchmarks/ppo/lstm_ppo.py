r"""Benchmark: LSTM PPO training throughput with fused whole-sequence training against
the per-step loop it replaced.

Trains ``alf/examples/ppo_lstm_cart_pole_masked.gin`` (PPO with LSTM actor and value
networks on CartPole with the velocities hidden: 8 environments, unroll 32, 8 epochs
of mini-batches of 8 sequences of 16 steps) for ``--num_env_steps`` env steps, once
with ``PPOAlgorithm.fused_sequences=True`` (each LSTM runs along the mini-batch's
sequences in one fused call, split at episode starts) and once with ``False``
(``train_step`` stepped along the sequences one time step at a time, as before). Each
run is a fresh subprocess (same seed, no evaluation, one torch thread); the two
contenders alternate in ABBA order for ``--rounds`` rounds so that a drifting machine
load affects both alike. Prints ``uptime`` before and after, each run's env steps per
second of training (collection + updates: ``RLTrainer.train_time_s``), the medians and
their ratio.

Usage::

    python benchmarks/ppo/lstm_ppo.py [--num_env_steps 8192] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import emit_result, machine_info, median, run_worker  # noqa: E402

SCRIPT = os.path.abspath(__file__)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One training run in this process; returns its throughput."""
    from absl import logging as absl_logging

    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.trainers import RLTrainer, TrainerConfig

    absl_logging.set_verbosity(absl_logging.WARNING)
    import_configurables()
    alf_config.load_config(
        os.path.join(alf_config.EXAMPLES_DIR, "ppo_lstm_cart_pole_masked.gin"),
        [
            f"PPOAlgorithm.fused_sequences={args.fused == 'fused'}",
            f"TrainerConfig.num_env_steps={args.num_env_steps}",
            "TrainerConfig.eval_interval=0",
            "TrainerConfig.checkpoint_interval=100000",
            "TrainerConfig.torch_num_threads=1",
            "TrainerConfig.random_seed=0",
        ],
    )
    with tempfile.TemporaryDirectory(prefix="alf_bench_") as root_dir:
        trainer = RLTrainer(config=TrainerConfig(), root_dir=root_dir)
        start = time.monotonic()
        try:
            trainer.train()
        finally:
            trainer.close()
        wall_s = time.monotonic() - start
        return {
            "fused": args.fused,
            "env_steps": trainer.env_steps,
            "train_time_s": trainer.train_time_s,
            "steps_per_s": trainer.env_steps / trainer.train_time_s,
            "wall_s": wall_s,
        }


def main() -> None:
    """Runs the benchmark and prints the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num_env_steps", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--worker", choices=["fused", "stepped"], dest="fused",
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fused:
        emit_result(worker(args))
        return
    print(machine_info())
    print("uptime:", os.popen("uptime").read().strip())
    rates: dict[str, list[float]] = {"fused": [], "stepped": []}
    for i in range(args.rounds):
        order = ("fused", "stepped") if i % 2 == 0 else ("stepped", "fused")  # ABBA
        for name in order:
            result = run_worker(
                [SCRIPT, "--worker", name, "--num_env_steps", str(args.num_env_steps)]
            )
            rates[name].append(result["steps_per_s"])
            print(f"  round {i} {name:8s} {result['steps_per_s']:8.0f} env steps/s "
                  f"({result['env_steps']} steps in {result['train_time_s']:.1f} s)")
    fused, stepped = median(rates["fused"]), median(rates["stepped"])
    print(f"LSTM PPO, masked CartPole x8, {args.num_env_steps} env steps, "
          f"{args.rounds} alternating rounds (median env steps/s of training):")
    print(f"  fused sequences   {fused:8.0f}")
    print(f"  per-step loop     {stepped:8.0f}")
    print(f"  fused / per-step = {fused / stepped:.2f}")
    print("uptime:", os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
