"""Benchmark: does ``torch.compile`` of PPO's ``rollout_step`` pay on this machine?

Issue 19 asks for compiled updates and for ``rollout_step`` compiled "where it pays".
This script answers the second part for the collection policy of the sampler benchmark
(``collection.py``: a 2x64 tanh actor and value MLP, fused into one call, a Categorical
drawn by Gumbel-max, its log-probability) on EnvPool ``CartPole-v1``, 1 torch thread.

For each env count it builds the policy once, compiles ``rollout_step``
(``torch.compile``, static shapes; the compile time is printed), and then times calls of
the eager and the compiled step alternately in one process (``--rounds`` rounds of
``--calls`` calls each, the order swapped every round), all inside one
``rollout_session()`` as a sampler's unroll is. Eager runs as ALF collects (actor and
value fused into one call); the compiled step traces the two networks separately (the
fused path, ``FusedActorValue.applies``, is off while tracing) and
leaves the fusing to the compiler. It prints microseconds per call (min and
median over rounds) and eager/compiled: above 1 means compiling pays.

    python benchmarks/collection/compile_rollout.py --num_envs 16 64 256
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import format_table, machine_info  # noqa: E402


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num_envs", type=int, nargs="+", default=[16, 64, 256],
                        help="env counts (batch of one rollout_step); default 16 64 256")
    parser.add_argument("--rounds", type=int, default=20, help="alternating rounds (20)")
    parser.add_argument("--calls", type=int, default=500, help="calls per round (500)")
    return parser.parse_args(argv)


def _measure(num_envs: int, rounds: int, calls: int) -> dict[str, Any]:
    """Eager and compiled ``rollout_step`` at ``num_envs`` environments, alternating."""
    import torch

    from alf.environments import create_environment
    from benchmarks.collection.collection_samplers import _ppo_factory

    env = create_environment("CartPole-v1", num_envs, seed=0, vectorization_mode="envpool")
    algorithm = _ppo_factory()(observation_spec=env.observation_spec(),
                               action_spec=env.action_spec())
    algorithm.eval()
    time_step = env.reset()
    compiled_step = torch.compile(algorithm.rollout_step, dynamic=False)

    def eager() -> Any:
        return algorithm.rollout_step(time_step, ())

    def compiled() -> Any:
        return compiled_step(time_step, ())

    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    with torch.no_grad(), algorithm.rollout_session():
        start = time.perf_counter()
        compiled()
        compile_s = time.perf_counter() - start
        for _ in range(100):  # warm both
            eager()
            compiled()
        for r in range(rounds):
            order = [("eager", eager), ("compiled", compiled)]
            for name, step in order if r % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                for _ in range(calls):
                    step()
                times[name].append((time.perf_counter() - start) / calls * 1e6)
    env.close()
    eager_us, compiled_us = (statistics.median(times[k]) for k in ("eager", "compiled"))
    return {"num_envs": num_envs, "compile_s": compile_s,
            "eager_min_us": min(times["eager"]), "eager_median_us": eager_us,
            "compiled_min_us": min(times["compiled"]), "compiled_median_us": compiled_us,
            "eager_over_compiled": eager_us / compiled_us}


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)

    from alf.utils.threads import set_cpu_threads

    set_cpu_threads(1)  # torch's and numpy's BLAS threads
    print(machine_info(("torch", "envpool")))
    rows = []
    for num_envs in args.num_envs:
        load_before = os.getloadavg()[0]
        r = _measure(num_envs, args.rounds, args.calls)
        rows.append([num_envs, f"{r['compile_s']:.1f}",
                     f"{r['eager_min_us']:.0f} / {r['eager_median_us']:.0f}",
                     f"{r['compiled_min_us']:.0f} / {r['compiled_median_us']:.0f}",
                     f"{r['eager_over_compiled']:.2f}x",
                     f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"])
    print(format_table(["envs", "compile s", "eager us (min / median)",
                        "compiled us (min / median)", "eager / compiled", "load"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
