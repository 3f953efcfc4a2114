r"""Benchmark: gradient updates per second of ALF's offline RL algorithms on a
Hopper-sized batch, with the example configs' settings.

Each algorithm is built from its example config (``alf/examples/<name>_hopper_medium.gin``:
networks, batch 256, learning rates, data transformers) for Hopper's specs (11
observations, 3 actions in [-1, 1]) and trained on a synthetic offline dataset (random
observations, actions and rewards in episodes of 1000 steps, 100k steps in all, held
as a dataset is) alone,
through ``OffPolicyAlgorithm.train_from_replay``: sampling the mini-batch, the data
transformers, the losses, the update and the target networks, as a training run does
(summaries, evaluation and checkpoints excluded). SAC and TD3 with the MuJoCo configs'
networks are measured beside them for reference. Each algorithm runs in a fresh
subprocess (``--worker``); the machine's load is printed with the numbers (``uptime``),
since other processes slow the updates.

``updates/s`` = timed updates / their wall time, after ``--warmup`` untimed ones (the
optimizer's state, the first kernel calls): ``--updates`` of them, or fewer (a multiple
of 10) once ``--seconds`` have passed (CQL makes about 1.5 per second on a loaded CPU).
d3rlpy's ``fit`` loop (sampling and one update per step) is the quantity to compare on
the same machine.

Usage::

    python benchmarks/offpolicy/offline_updates.py                     # all, 1 thread, CPU
    python benchmarks/offpolicy/offline_updates.py --algorithms iql cql --threads 2
    python benchmarks/offpolicy/offline_updates.py --device cuda --json /tmp/offline.json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import (
    WorkerError,
    emit_result,
    fmt_num,
    format_table,
    machine_info,
    run_worker,
    write_report,
)

SCRIPT = os.path.abspath(__file__)
EXAMPLES = os.path.join(os.path.dirname(SCRIPT), "..", "..", "alf", "examples")
CONFIGS = {
    "bc": "bc_hopper_medium.gin",
    "td3bc": "td3bc_hopper_medium.gin",
    "iql": "iql_hopper_medium.gin",
    "cql": "cql_hopper_medium.gin",
    "sac": "sac_hopper.gin",
    "td3": "td3_hopper.gin",
}
OBSERVATION_SIZE, ACTION_SIZE = 11, 3
DATASET_STEPS, EPISODE_STEPS = 100_000, 1000
CHUNK = 10
"""Updates per ``train_from_replay`` call of the timed loop."""


def _synthetic_dataset(algorithm: Any) -> Any:
    """A dataset of ``DATASET_STEPS`` random Hopper-sized transitions (episodes of
    ``EPISODE_STEPS``, truncated), held as training on a dataset holds it."""
    import torch

    from alf.replay_buffers import DatasetBuffer

    episodes = DATASET_STEPS // EPISODE_STEPS
    dataset = DatasetBuffer(
        data_spec=algorithm.experience_spec(), num_rows=episodes * (EPISODE_STEPS + 1)
    )
    generator = torch.Generator().manual_seed(0)
    for _ in range(episodes):
        dataset.add_episode(
            observation=torch.randn(EPISODE_STEPS + 1, OBSERVATION_SIZE, generator=generator),
            action=torch.rand(EPISODE_STEPS, ACTION_SIZE, generator=generator) * 2 - 1,
            reward=torch.rand(EPISODE_STEPS, generator=generator),
            terminated=False,
        )
    return dataset


def worker(args: argparse.Namespace) -> None:
    """Builds one algorithm from its config and times its updates on synthetic data."""
    import time

    import torch

    from alf import config as alf_config
    from alf.algorithms.factory import make_algorithm
    from alf.algorithms.offline_rl import prepare_offline_data
    from alf.configurables import import_configurables
    from alf.tensor_specs import BoundedTensorSpec, TensorSpec
    from alf.trainers import TrainerConfig

    torch.set_num_threads(args.threads)
    import_configurables()
    alf_config.load_config(os.path.join(EXAMPLES, CONFIGS[args.algorithm]))
    config = TrainerConfig()
    algorithm = make_algorithm(
        observation_spec=TensorSpec((OBSERVATION_SIZE,)),
        action_spec=BoundedTensorSpec((ACTION_SIZE,), torch.float32, -1.0, 1.0),
        algorithm_ctor=config.algorithm_ctor,
        data_transformer_ctor=config.data_transformer_ctor,
    )
    buffer = _synthetic_dataset(algorithm)
    algorithm.to(args.device)
    algorithm.build_replay_buffer(num_envs=1)
    algorithm.set_offline_buffers([buffer], 1.0)
    scale = prepare_offline_data(algorithm, return_range=None)
    assert scale == 1.0
    algorithm.num_updates_per_train_iter = args.warmup
    algorithm.train_from_replay()
    algorithm.num_updates_per_train_iter = CHUNK
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else lambda: None
    sync()
    start = time.perf_counter()
    updates, seconds = 0, 0.0
    while updates < args.updates and (updates < CHUNK or seconds < args.seconds):
        stats = algorithm.train_from_replay()
        sync()
        updates += CHUNK
        seconds = time.perf_counter() - start
    emit_result(
        {
            "algorithm": args.algorithm,
            "updates": updates,
            "seconds": seconds,
            "updates_per_s": updates / seconds,
            "loss": float(stats["loss"]),
        }
    )


def _uptime() -> str:
    try:
        done = subprocess.run(["uptime"], capture_output=True, text=True, check=False)
        return done.stdout.strip()
    except OSError:
        return "uptime: not available"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithms", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--updates", type=int, default=1000, help="timed updates, at most")
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="or fewer updates once this long (>= 10)"
    )
    parser.add_argument("--warmup", type=int, default=50, help="untimed updates first")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--algorithm", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    before = _uptime()
    results = []
    for name in args.algorithms:
        argv = [SCRIPT, "--worker", f"--algorithm={name}", f"--threads={args.threads}"]
        argv += [f"--device={args.device}", f"--updates={args.updates}", f"--warmup={args.warmup}"]
        argv.append(f"--seconds={args.seconds}")
        try:
            results.append(run_worker(argv, timeout_s=3600))
        except WorkerError as err:
            results.append({"algorithm": name, "error": str(err)[-500:]})
    after = _uptime()
    rows = [
        [r["algorithm"], fmt_num(r.get("updates_per_s"), 1), fmt_num(r.get("seconds"), 1)]
        for r in results
    ]
    text = "\n".join(
        [
            f"ALF offline updates/s (batch 256, obs {OBSERVATION_SIZE}, act {ACTION_SIZE}; "
            f"{args.threads} thread(s), {args.device})",
            format_table(["algorithm", "updates/s", "seconds"], rows),
            f"uptime before: {before}",
            f"uptime after:  {after}",
        ]
    )
    info = {"machine": machine_info(), "args": vars(args), "results": results}
    write_report(info, text, args.json)


if __name__ == "__main__":
    main()
