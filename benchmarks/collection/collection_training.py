"""Section 3 of ``collection.py``: training throughput, sync vs async.

PPO on ``HalfCheetah-v5`` (:data:`TRAIN_HPARAMS`, plus the flags of ``collection.py``
for the backend, envs, unroll length, epochs and mini-batch), trained by ``RLTrainer``
with ``TrainerConfig.async_unroll`` off (sync) or on (async, ``AppoAlgorithm`` when
``alf.algorithms.appo`` imports, else PPO). :func:`worker_train` runs one such training
for a warm-up plus a fixed measuring time and reads its throughput from
``progress.jsonl``; it runs in a fresh subprocess started as
``collection.py --worker train --mode sync|async ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from typing import Any

from benchmarks.collection.collection_common import quiet_warnings, timed

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


def appo_available_in_subprocess(args: argparse.Namespace) -> bool:
    """Whether ``alf.algorithms.appo`` imports (checked in a subprocess: the parent
    imports neither torch nor ALF)."""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", "import alf.algorithms.appo"],
                          capture_output=True, timeout=args.worker_timeout_s, check=False)
    return proc.returncode == 0


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
                   f"AsyncUnroller.fragments_per_iteration={args.num_actors}",
                   f"AsyncUnroller.double_buffering={args.double_buffering}"]
    return params


def worker_train(args: argparse.Namespace) -> dict[str, Any]:
    """Section 3: one ``RLTrainer`` run for a warm-up plus a fixed measuring time."""
    quiet_warnings()
    import torch
    from absl import logging as absl_logging

    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.trainers import RLTrainer, TrainerConfig

    absl_logging.set_verbosity(absl_logging.WARNING)
    algorithm = "AppoAlgorithm" if args.mode == "async" and _appo_available() else "PPOAlgorithm"
    params = _train_params(args, algorithm)
    import_configurables()
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
            unroller.collect = timed(unroller.collect, collect_calls)
        else:
            unroller.unroll = timed(unroller.unroll, collect_calls)
        trainer.algorithm.train_from_unroll = timed(trainer.algorithm.train_from_unroll,
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
        "double_buffering": args.mode == "async" and args.double_buffering,
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
