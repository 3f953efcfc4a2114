r"""The PPO update alone, lean path against the host-checked one, in one process.

Builds ``ppo_cart_pole.gin``'s PPO, collects one iteration (8 envs x 32 steps), then
times ``train_from_unroll`` on it (20 epochs of one 256-step mini-batch: 20 updates)
for three contenders, alternating them round after round so that a drifting machine load
hits all alike:

* ``checked``: the host-checked update (``isfinite`` of the loss and of the gradient
  norm read on the host, torch's ``Optimizer.step``), statistics on every update, as
  before issue 19;
* ``lean``: :class:`~alf.algorithms.optimizer_step.LeanStep` (the skip decided on the
  device, fused Adam called directly), statistics on every update;
* ``lean_nostats``: ``lean`` on an iteration that writes no summary (no clip fraction,
  no entropy outside the loss), the common case;
* with ``--compile``, ``compiled``: ``lean_nostats`` on a copy of the algorithm whose
  losses are compiled (``TrainerConfig.compile``); the time of its first (compiling)
  iteration is printed.

Usage::

    python benchmarks/collection/update_path.py --rounds 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch


def build() -> tuple[object, object]:
    """PPO on CartPole from the example config, and one collected trajectory."""
    from alf import config as alf_config
    from alf.algorithms.policy import Policy
    from alf.configurables import import_configurables
    from alf.environments import create_environment
    from alf.trainers import TrainerConfig, build_algorithm
    from alf.unrollers.sync_unroller import SyncUnroller

    import_configurables()
    alf_config.load_config(os.path.join(alf_config.EXAMPLES_DIR, "ppo_cart_pole.gin"))
    config = TrainerConfig()
    env = create_environment(seed=0)
    algorithm = build_algorithm(config, env)
    unroller = SyncUnroller(
        env=env, policy=Policy(algorithm=algorithm), unroll_length=config.unroll_length
    )
    return algorithm, unroller.unroll()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="add the compiled contender")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    from alf.algorithms import optimizer_step

    algorithm, exp = build()
    supports = optimizer_step.LeanStep.__dict__["supports"]  # the staticmethod itself

    def checked() -> None:
        optimizer_step.LeanStep.supports = staticmethod(lambda optimizer: False)
        algorithm._lean_step = None
        algorithm.record_statistics = True
        try:
            algorithm.train_from_unroll(exp)
        finally:
            optimizer_step.LeanStep.supports = supports

    def lean(stats: bool) -> None:
        algorithm.record_statistics = stats
        algorithm.train_from_unroll(exp)

    contenders = {
        "checked": checked,
        "lean": lambda: lean(True),
        "lean_nostats": lambda: lean(False),
    }
    if args.compile:
        import copy

        compiled = copy.deepcopy(algorithm)
        compiled.configure_training(compile=True)
        compiled.record_statistics = False
        tick = time.perf_counter()
        compiled.train_from_unroll(exp)
        print(f"first compiled iteration (compiling): {time.perf_counter() - tick:.1f} s")
        contenders["compiled"] = lambda: compiled.train_from_unroll(exp)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for run in contenders.values():  # warm-up
        run()
    for i in range(args.rounds):
        order = list(contenders) if i % 2 == 0 else list(reversed(contenders))
        for name in order:
            tick = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - tick)
    base = statistics.median(times["checked"])
    for name, values in times.items():
        median = statistics.median(values)
        ratios = [c / v for c, v in zip(times["checked"], values, strict=True)]
        print(
            f"{name:13s} median {1e3 * median:7.1f} ms per iteration (20 updates), "
            f"{1e6 * median / 20:6.0f} us per update; speed-up over checked "
            f"{base / median:.2f}x (per-round {min(ratios):.2f}-{max(ratios):.2f})"
        )
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    sys.exit(main())
