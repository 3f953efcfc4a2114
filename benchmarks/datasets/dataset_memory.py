"""Benchmark: the memory an offline dataset takes once loaded as an algorithm's offline
data (:func:`alf.datasets.load_dataset`, a :class:`~alf.replay_buffers.DatasetBuffer`)
against the dataset's raw size (its arrays: observations, actions, rewards,
terminations, truncations, as read).

Writes a synthetic dataset of ``--num_steps`` transitions in Minari's format (random
values; a HalfCheetah-shaped one by default: 17 float32 observations, 6 float32 actions,
episodes of 1000 steps; ``--shape=pendulum``: 3 and 1, episodes of 200), then loads it
for SAC in a fresh process and prints the raw size, the buffer's bytes, their ratio, and
the growth of the process's peak resident memory while loading (after the imports the
storage needs).

Usage::

    python benchmarks/datasets/dataset_memory.py [--num_steps 1000000] [--shape halfcheetah]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

SHAPES = {"halfcheetah": (17, 6, 1000), "pendulum": (3, 1, 200)}
"""Observation size, action size and episode length of each synthetic dataset."""


def write_dataset(out: str, *, num_steps: int, shape: str, seed: int = 0) -> None:
    """Writes a synthetic dataset of ``num_steps`` transitions to ``out``."""
    import gymnasium as gym
    import numpy as np

    from alf.datasets import DatasetWriter, Episode

    obs_size, action_size, length = SHAPES[shape]
    observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_size,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (action_size,), np.float32)
    rng = np.random.default_rng(seed)
    with DatasetWriter(
        out=out, observation_space=observation_space, action_space=action_space
    ) as writer:
        left = num_steps
        while left > 0:
            steps = min(length, left)
            left -= steps
            truncations = np.zeros(steps, dtype=bool)
            truncations[-1] = True
            writer.add_episode(
                Episode(
                    observations=rng.standard_normal((steps + 1, obs_size), dtype=np.float32),
                    actions=rng.uniform(-1, 1, (steps, action_size)).astype(np.float32),
                    rewards=rng.standard_normal(steps, dtype=np.float32),
                    terminations=np.zeros(steps, dtype=bool),
                    truncations=truncations,
                )
            )
        writer.commit(random_return=0.0, expert_return=1.0)


def measure(path: str) -> dict[str, float]:
    """Loads the dataset at ``path`` for SAC; the sizes and the peak-memory growth."""
    from alf.algorithms.sac import SacAlgorithm
    from alf.datasets import load_dataset, read_episodes, read_info
    from alf.tensor_specs import from_gym_space

    info = read_info(path)
    observation_spec = from_gym_space(info.observation_space)
    action_spec = from_gym_space(info.action_space)
    algorithm = SacAlgorithm(observation_spec=observation_spec, action_spec=action_spec)
    data_spec = algorithm.experience_spec()
    next(iter(read_episodes(info)))  # the storage's imports (h5py, PIL) before the baseline
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    loaded = load_dataset(
        path, data_spec=data_spec, observation_spec=observation_spec, action_spec=action_spec
    )
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "transitions": info.total_steps,
        "episodes": info.total_episodes,
        "raw_mb": loaded.raw_nbytes / 1e6,
        "buffer_mb": loaded.buffer.nbytes / 1e6,
        "ratio": loaded.buffer.nbytes / loaded.raw_nbytes,
        "peak_rss_growth_mb": (peak_kib - before_kib) * 1024 / 1e6,
        "peak_rss_growth_ratio": (peak_kib - before_kib) * 1024 / loaded.raw_nbytes,
        "load_s": seconds,
    }


def main() -> None:
    """Writes the dataset, measures it in a fresh process and prints the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_steps", type=int, default=1_000_000)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="halfcheetah")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # (the worker's flag)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "dataset")
        start = time.perf_counter()
        write_dataset(out, num_steps=args.num_steps, shape=args.shape)
        written = time.perf_counter() - start
        result = subprocess.run(
            [sys.executable, __file__, "--measure", out],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        figures = json.loads(result.stdout.strip().splitlines()[-1])
    figures["write_s"] = written
    print(f"{args.shape}-shaped dataset, {figures['transitions']:,} transitions:")
    for key, value in figures.items():
        print(f"  {key}: {value:.3f}" if isinstance(value, float) else f"  {key}: {value}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))
    main()
