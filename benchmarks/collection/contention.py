r"""Throughput of the example configs with and without a competing busy process.

A user's machine is never idle. For each config this trains a short run in a fresh
worker process, once alone and once beside a *competitor*: a process that keeps one core
busy (a pure-Python spin loop), and reports the throughput lost to it. The runs of a
config alternate (alone, beside, beside, alone, ...), so a drifting machine load hits
both alike, and ``uptime`` is printed before each.

Throughput is env steps / ``RLTrainer.train_time_s`` (collection and updates, no
evaluation) over ``--measure_steps`` env steps measured after a warm-up
(off-policy configs: after their initial random collection), with the config's own
``TrainerConfig.torch_num_threads`` unless ``--threads`` overrides it.

Usage::

    python benchmarks/collection/contention.py                         # the default configs
    python benchmarks/collection/contention.py --confs sac_pendulum.gin --threads 1,2 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import (  # noqa: E402
    WorkerError,
    emit_result,
    fmt_num,
    format_table,
    machine_info,
    median,
    run_worker,
    write_report,
)

SCRIPT = os.path.abspath(__file__)
DEFAULT_CONFS = (
    "ppo_cart_pole.gin",
    "ac_cart_pole.gin",
    "dqn_cart_pole.gin",
    "ppo_pendulum.gin",
    "sac_pendulum.gin",
    "td3_pendulum.gin",
    "ddpg_pendulum.gin",
    "ppo_lstm_cart_pole_masked.gin",
)
SPIN = "while True:\n    pass\n"


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """Trains ``args.conf`` for a warm-up then a measured stretch; returns steps/s."""
    import torch
    from absl import logging as absl_logging

    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.trainers import RLTrainer, TrainerConfig

    absl_logging.set_verbosity(absl_logging.WARNING)
    import_configurables()
    params = [
        "TrainerConfig.eval_interval=0",
        "TrainerConfig.evaluate=False",
        "TrainerConfig.summary_interval=100000",
        "TrainerConfig.checkpoint_interval=100000",
        f"TrainerConfig.random_seed={args.seed}",
    ]
    if args.threads is not None:
        params.append(f"TrainerConfig.torch_num_threads={args.threads}")
    conf = os.path.join(alf_config.EXAMPLES_DIR, args.conf)
    alf_config.load_config(conf, params)
    with tempfile.TemporaryDirectory(prefix="alf_contention_") as root_dir:
        config = TrainerConfig()
        warmup = max(args.warmup_steps, config.initial_collect_steps + 1000)
        config.num_env_steps = warmup
        trainer = RLTrainer(config=config, root_dir=root_dir)
        try:
            trainer.train()
            steps0, time0 = trainer.env_steps, trainer.train_time_s
            trainer.config.num_env_steps = warmup + args.measure_steps
            trainer.train()
            steps = trainer.env_steps - steps0
            seconds = trainer.train_time_s - time0
        finally:
            trainer.close()
    return {
        "conf": args.conf,
        "threads": torch.get_num_threads(),
        "env_steps": steps,
        "seconds": seconds,
        "steps_per_s": steps / seconds,
    }


def _run(conf: str, threads: int | None, args: argparse.Namespace) -> dict[str, Any]:
    argv = [
        SCRIPT,
        "--worker",
        "--conf",
        conf,
        "--seed",
        "0",
        "--warmup_steps",
        str(args.warmup_steps),
        "--measure_steps",
        str(args.measure_steps),
    ]
    if threads is not None:
        argv += ["--threads", str(threads)]
    return run_worker(argv, timeout_s=args.worker_timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--confs", default=",".join(DEFAULT_CONFS), help="comma-separated configs of alf/examples"
    )
    parser.add_argument(
        "--threads",
        default=None,
        help="comma-separated torch thread counts to try (default: the config's own)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="pairs of (alone, beside) runs per config and thread count",
    )
    parser.add_argument("--warmup_steps", type=int, default=2048)
    parser.add_argument("--measure_steps", type=int, default=4096)
    parser.add_argument("--worker_timeout_s", type=float, default=1200.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--conf", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.threads = None if args.threads is None else int(args.threads)
        emit_result(worker(args))
        return 0

    thread_counts: list[int | None] = (
        [int(t) for t in args.threads.split(",")] if args.threads else [None]
    )
    results: dict[str, Any] = {"benchmark": "contention", "machine": machine_info(), "runs": []}
    failures = 0
    for conf in [c.strip() for c in args.confs.split(",") if c.strip()]:
        for threads in thread_counts:
            for round_index in range(args.rounds):
                order = ("alone", "beside") if round_index % 2 == 0 else ("beside", "alone")
                for condition in order:
                    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout
                    print(f"uptime: {uptime.strip()}", flush=True)
                    spinner = (
                        subprocess.Popen([sys.executable, "-c", SPIN])
                        if condition == "beside"
                        else None
                    )
                    try:
                        time.sleep(0.5 if spinner else 0.0)
                        run = _run(conf, threads, args)
                    except WorkerError as err:
                        failures += 1
                        print(f"{conf} threads={threads} {condition}: FAILED\n{err}", flush=True)
                        continue
                    finally:
                        if spinner is not None:
                            spinner.kill()
                            spinner.wait()
                    run["condition"] = condition
                    results["runs"].append(run)
                    print(
                        f"{conf} threads={run['threads']} {condition}: "
                        f"{run['steps_per_s']:.0f} steps/s",
                        flush=True,
                    )
    rows = []
    for conf in dict.fromkeys(r["conf"] for r in results["runs"]):
        for threads in sorted({r["threads"] for r in results["runs"] if r["conf"] == conf}):
            runs = [r for r in results["runs"] if r["conf"] == conf and r["threads"] == threads]
            alone = [r["steps_per_s"] for r in runs if r["condition"] == "alone"]
            beside = [r["steps_per_s"] for r in runs if r["condition"] == "beside"]
            if not alone or not beside:
                continue
            loss = 100 * (1 - median(beside) / median(alone))
            rows.append(
                [conf, threads, fmt_num(median(alone)), fmt_num(median(beside)), f"{loss:.0f}%"]
            )
    text = "\n".join(
        [
            "== Throughput beside one busy process (pure-Python spin loop on one core) ==",
            f"machine: {results['machine']}",
            format_table(["config", "threads", "alone steps/s", "beside steps/s", "lost"], rows),
            "alone: no competitor started by this benchmark (the machine may still be shared).",
        ]
    )
    write_report(results, text, args.json)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
