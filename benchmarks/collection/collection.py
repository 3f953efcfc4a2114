r"""Benchmark: how fast ALF collects experience, with and without training.

Three measurements, each in a fresh worker subprocess (this script with a hidden
``--worker`` flag), so torch thread settings, gin state, imports, thread pools and actor
processes cannot leak from one run into the next. The parent only waits while a worker
runs. Every worker sets ``torch.set_num_threads(1)`` (the learner through
``TrainerConfig.torch_num_threads = 1``; ALF's actor processes always use 1).

1. **Raw environment steps/s** on ``CartPole-v1`` with 16 environments and a constant
   action: EnvPool stepped directly with numpy actions (``envpool.make(...,
   env_type="gymnasium", num_envs=16)``, with its default thread count and with
   ``num_threads=1``), Gymnasium's ``gym.make_vec(..., vectorization_mode="sync")``, and
   the same through ALF's ``create_environment`` (``vectorization_mode`` ``"envpool"``,
   ``"sync"`` and ``"subprocess"``; the last is skipped with a note when
   ``alf.environments.subprocess_environment`` does not import). Steps/s counts every
   environment (one batched step of 16 environments is 16 steps). Raw EnvPool is also
   measured at section 2's other environment counts, so every sampler rate has a
   like-for-like reference.

2. **Sampler-only steps/s**: collection with a 2x64 tanh MLP PPO policy
   (``PPOAlgorithm`` with ``ActorDistributionNetwork`` / ``ValueNetwork``), no training,
   on EnvPool CartPole-v1, for 16 environments (the raw rate's count) and a larger count
   (default 64). *sync*: a ``SyncUnroller`` whose ``unroll()`` is called repeatedly.
   *async*: an ``AsyncUnroller`` with ``num_actors`` actor processes whose
   ``collect()`` is called repeatedly, with ``publish()`` after every call as training
   would (``fragments_per_iteration = num_actors``). Steps/s is measured over a fixed
   wall time after a warm-up (for async: after the first fragment arrived). The sync
   worker then times, per batched step, ``env.step`` (and EnvPool's own step inside
   it), the policy's ``rollout_step``, and the rest of the unroller. Target: sampler
   >= 50% of the raw EnvPool rate (reported for each sampler against raw EnvPool at the
   same environment count).

   2b. **Double buffering** (``--double_buffering_env``, default ``HalfCheetah-v5``, whose
   step costs about as much as the policy; 8 environments, EnvPool ``num_threads=1``
   per group): a ``SyncUnroller`` against a ``DoubleBufferedUnroller`` over two groups of
   4, in-process, and one async actor without and with
   ``AsyncUnroller.double_buffering``.

3. **Training throughput, sync vs async**: PPO on ``HalfCheetah-v5`` (MuJoCo; default:
   the Gymnasium ``sync`` backend, ALF's default for this id; ``--train_backend
   envpool`` for EnvPool), 8 environments, 2x64 networks, ``num_epochs`` and
   ``mini_batch_size`` chosen so that the sync run spends about half its time
   collecting and half training (both fractions are measured and printed). Sync:
   ``RLTrainer`` with ``TrainerConfig.async_unroll=False``; async: the same with
   ``async_unroll=True``, ``AsyncUnroller.num_actors = k`` and
   ``AsyncUnroller.fragments_per_iteration = k`` (the 8 environments are split over the
   actors, so every iteration trains on the same 8 x unroll_length steps as sync), using
   ``AppoAlgorithm`` (V-trace) when ``alf.algorithms.appo`` imports, else PPO. Evaluation
   is off. Each run trains for a warm-up plus a fixed measuring time
   (``trainer.request_stop()`` from a timer); steps/s is read from ``progress.jsonl``
   (one record per iteration) over the iterations after the warm-up: env steps /
   elapsed wall time (everything the loop does), and env steps / ``train_time_s``
   (collect + train only). Runs alternate: ``--train_rounds`` times (sync, then each
   async configuration), plus a last sync run (``--bracket_sync``); each async run is
   compared with the mean of the sync runs just before and after it, and the target line
   gives the median over the rounds (against load that drifts or comes and goes: on a
   shared VM one busy neighbour halves an async run). ``--train_actors 1,1db`` adds
   an actor with double buffering (needs ``--train_backend envpool``). Also printed: the share
   of the window the learner spent collecting (sync) or waiting for fragments (async)
   and training, and the learner's CPU time / wall time while training (below ~90%:
   it was starved of CPU). Target: async >= 1.5x sync.

On a shared machine read the load averages and the autogroup warning: with
``kernel.sched_autogroup_enabled=1`` the CPUs are shared between *sessions*, so while
other sessions are busy the actor processes take CPU from this benchmark's own learner
and async runs cannot beat sync.

Modules: this script is the entry point (flags, the worker subprocesses, orchestration);
each section's measurement lives in its own module, run here as ``--worker`` entries:
``collection_envs.py`` (section 1), ``collection_samplers.py`` (section 2) and
``collection_training.py`` (section 3); ``collection_common.py`` holds the CartPole
workload and the timing helpers they share, ``collection_report.py`` the printed report.

Usage::

    python benchmarks/collection/collection.py                 # full run (~11 minutes on 2 cores)
    python benchmarks/collection/collection.py --quick         # smoke run (~1.5 minutes)
    python benchmarks/collection/collection.py --json /tmp/collection.json
    python benchmarks/collection/collection.py --sections sampler --profile  # + cProfile
    python benchmarks/collection/collection.py --sections sampler --sampler_envpool_threads 1
    python benchmarks/collection/collection.py --sections train --train_backend envpool
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.collection.collection_common import CARTPOLE, RAW_NUM_ENVS  # noqa: E402
from benchmarks.collection.collection_envs import ENV_BACKENDS, worker_env  # noqa: E402
from benchmarks.collection.collection_report import (  # noqa: E402
    autogroup_enabled,
    report,
    targets,
    warnings_about,
)
from benchmarks.collection.collection_samplers import worker_sampler_async, worker_sampler_sync  # noqa: E402
from benchmarks.collection.collection_training import (  # noqa: E402
    TRAIN_HPARAMS,
    appo_available_in_subprocess,
    worker_train,
)
from benchmarks.common import (  # noqa: E402
    WorkerError,
    emit_result,
    machine_info,
    run_worker,
    write_report,
)

SCRIPT = os.path.abspath(__file__)
"""The script every worker subprocess runs (``SCRIPT --worker NAME ...``)."""
SECTIONS = ("env", "sampler", "train")

# Defaults of the timing flags, per mode (--quick or the full run).
QUICK = {
    "env_seconds": 0.7,
    "env_warmup_s": 0.2,
    "sampler_seconds": 1.5,
    "sampler_warmup_s": 0.5,
    "train_seconds": 8.0,
    "train_warmup_s": 4.0,
    "train_actors": "1",
    "bracket_sync": False,
    "train_rounds": 1,
}
FULL = {
    "env_seconds": 4.0,
    "env_warmup_s": 1.0,
    "sampler_seconds": 8.0,
    "sampler_warmup_s": 2.0,
    "train_seconds": 45.0,
    "train_warmup_s": 10.0,
    "train_actors": "1,2",
    "bracket_sync": True,
    "train_rounds": 2,
}


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags (and the hidden worker flags), with the --quick / full defaults filled in."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="short smoke run (~1-2 minutes); sets the defaults below")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)")
    p.add_argument("--json", default=None, help="also write the raw numbers to this file")
    p.add_argument("--env_seconds", type=float, default=None,
                   help=f"section 1 measuring time per backend (full {FULL['env_seconds']}, "
                        f"quick {QUICK['env_seconds']})")
    p.add_argument("--sampler_seconds", type=float, default=None,
                   help=f"section 2 measuring time per run (full {FULL['sampler_seconds']}, "
                        f"quick {QUICK['sampler_seconds']})")
    p.add_argument("--sampler_envs", default="16,64",
                   help="environment counts of section 2 (default 16,64)")
    p.add_argument("--unroll_length", type=int, default=32,
                   help="section 2 unroll length (default 32)")
    p.add_argument("--sampler_actors", type=int, default=2,
                   help="section 2 async actors (default 2)")
    p.add_argument("--double_buffering_env", default="HalfCheetah-v5",
                   help="section 2b: env id on which SyncUnroller is compared with "
                        "DoubleBufferedUnroller (EnvPool, num_threads=1); '' skips 2b "
                        "(default HalfCheetah-v5)")
    p.add_argument("--double_buffering_envs", type=int, default=8,
                   help="section 2b environments (default 8)")
    p.add_argument("--sampler_envpool_threads", type=int, default=None,
                   help="section 2: EnvPool num_threads of every sampler's environments "
                        "(default: EnvPool's own default)")
    p.add_argument("--profile", action="store_true",
                   help="section 2: also print a cProfile of SyncUnroller.unroll() at "
                        f"{RAW_NUM_ENVS} envs")
    p.add_argument("--train_seconds", type=float, default=None,
                   help=f"section 3 measuring time per run (full {FULL['train_seconds']}, "
                        f"quick {QUICK['train_seconds']})")
    p.add_argument("--train_warmup_s", type=float, default=None,
                   help=f"section 3 warm-up (full {FULL['train_warmup_s']}, quick "
                        f"{QUICK['train_warmup_s']})")
    p.add_argument("--train_actors", default=None,
                   help="section 3 async actor counts, comma-separated; 'Ndb': N actors "
                        "with double buffering (needs --train_backend envpool) (full "
                        f"{FULL['train_actors']}, quick {QUICK['train_actors']})")
    p.add_argument("--train_rounds", type=int, default=None,
                   help="section 3: repeat (sync, then each async run) this many times; "
                        "every async run is compared with the sync runs around it and the "
                        "target uses the median (full 2, quick 1)")
    p.add_argument("--bracket_sync", type=int, choices=[0, 1], default=None,
                   help="1: run sync again after the async runs and compare async with "
                        "the mean of both sync runs, against load drift (full 1, quick 0)")
    p.add_argument("--train_backend", default="sync", choices=["sync", "envpool"],
                   help="section 3 env backend (default: Gymnasium sync, ALF's default)")
    p.add_argument("--train_envpool_threads", type=int, default=None,
                   help="section 3 with --train_backend envpool: EnvPool num_threads "
                        "(default: EnvPool's own default)")
    p.add_argument("--train_envs", type=int, default=8, help="section 3 envs (default 8)")
    p.add_argument("--train_unroll_length", type=int, default=128,
                   help="section 3 unroll length (default 128)")
    p.add_argument("--train_epochs", type=int, default=4,
                   help="section 3 epochs per iteration (default 4)")
    p.add_argument("--train_mini_batch", type=int, default=64,
                   help="section 3 mini-batch size (default 64)")
    p.add_argument("--worker_timeout_s", type=float, default=600.0,
                   help="kill a worker after this many seconds (default 600)")
    p.add_argument("--verbose", action="store_true", help="show the workers' logs")
    # Internal: run one measurement and print its JSON result line.
    p.add_argument("--worker", choices=["env", "sampler_sync", "sampler_async", "train"],
                   help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--num_envs", type=int, default=RAW_NUM_ENVS, help=argparse.SUPPRESS)
    p.add_argument("--num_actors", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--warmup_s", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=["sync", "async"], help=argparse.SUPPRESS)
    p.add_argument("--double_buffering", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--env_name", default=CARTPOLE, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    preset = QUICK if args.quick else FULL
    for name in ("env_seconds", "sampler_seconds", "train_seconds", "train_warmup_s",
                 "train_actors", "bracket_sync", "train_rounds"):
        if getattr(args, name) is None:
            setattr(args, name, preset[name])
    args.env_warmup_s = preset["env_warmup_s"]
    args.sampler_warmup_s = preset["sampler_warmup_s"]
    return args


def parse_train_actors(spec: str) -> list[tuple[int, bool]]:
    """``--train_actors`` as ``(actors, double_buffering)`` pairs: ``"1,1db,2"`` ->
    ``[(1, False), (1, True), (2, False)]``."""
    runs = []
    for item in (x.strip() for x in str(spec).split(",")):
        if not item:
            continue
        double_buffering = item.endswith("db")
        count = item[:-2] if double_buffering else item
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"--train_actors: {item!r} is not an actor count (N or Ndb)")
        runs.append((int(count), double_buffering))
    return runs


def _worker_main(args: argparse.Namespace) -> None:
    """Runs the measurement named by ``--worker`` and prints its JSON result line."""
    workers = {"env": worker_env, "sampler_sync": worker_sampler_sync,
               "sampler_async": worker_sampler_async, "train": worker_train}
    emit_result(workers[args.worker](args))


def _run(label: str, argv: list[str], args: argparse.Namespace,
         summary: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    """Runs one worker, printing a progress line; failures become ``{"error": ...}``."""
    print(f"  {label} ...", end=" ", flush=True)
    tick = time.monotonic()
    try:
        result = run_worker([SCRIPT, *argv], timeout_s=args.worker_timeout_s,
                            verbose=args.verbose)
    except WorkerError as err:
        print(f"FAILED\n{err}", flush=True)
        return {"error": str(err)}
    print(f"{time.monotonic() - tick:.0f}s ({summary(result)})", flush=True)
    return result


def _double_buffering_runs(args: argparse.Namespace, results: dict[str, Any]) -> int:
    """Section 2b: sampler-only steps/s on ``--double_buffering_env`` of a SyncUnroller
    and a DoubleBufferedUnroller in one process, and of one async actor without and
    with double buffering. Returns the number of failed runs."""
    name, n = args.double_buffering_env, args.double_buffering_envs
    print(f"2b. double buffering ({name}, {n} envs)", flush=True)
    results["double_buffering"] = []
    common_argv = ["--env_name", name, "--num_envs", str(n),
                   "--unroll_length", str(args.unroll_length),
                   "--seconds", str(args.sampler_seconds),
                   "--warmup_s", str(args.sampler_warmup_s), "--sampler_envpool_threads", "1"]
    failures = 0
    for worker, double_buffering in (("sampler_sync", False), ("sampler_sync", True),
                                     ("sampler_async", False), ("sampler_async", True)):
        label = ("in-process" if worker == "sampler_sync" else "1 async actor") + (
            ", double buffering" if double_buffering else "")
        argv = ["--worker", worker, *common_argv, "--num_actors", "1",
                *(["--double_buffering"] if double_buffering else [])]
        r = _run(label, argv, args,
                 lambda r: r.get("skipped") or f"{r['steps_per_s']:,.0f} steps/s")
        failures += "error" in r
        results["double_buffering"].append({"label": label, **r})
    return failures


def main(argv: list[str] | None = None) -> int:
    """Runs the selected sections (or, with ``--worker``, one measurement); the exit
    status is 1 if a worker failed."""
    args = _parse_args(argv)
    if args.worker:
        _worker_main(args)
        return 0
    sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        print(f"unknown --sections {unknown}; choose from {SECTIONS}", file=sys.stderr)
        return 2
    sampler_env_counts = [int(x) for x in args.sampler_envs.split(",") if x.strip()]
    try:
        train_actors = parse_train_actors(args.train_actors)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    if any(db for _, db in train_actors) and args.train_backend != "envpool":
        print("--train_actors Ndb (double buffering) needs --train_backend envpool: the "
              "sync backend steps in the calling thread", file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        "benchmark": "collection",
        "machine": machine_info(("torch", "gymnasium", "numpy", "envpool", "mujoco", "alf")),
        "settings": {
            "quick": args.quick, "sections": sections,
            "env_seconds": args.env_seconds, "env_warmup_s": args.env_warmup_s,
            "sampler_seconds": args.sampler_seconds, "sampler_warmup_s": args.sampler_warmup_s,
            "sampler_envs": args.sampler_envs, "unroll_length": args.unroll_length,
            "sampler_actors": args.sampler_actors,
            "sampler_envpool_threads": args.sampler_envpool_threads,
            "double_buffering_env": args.double_buffering_env,
            "double_buffering_envs": args.double_buffering_envs,
            "train_seconds": args.train_seconds, "train_warmup_s": args.train_warmup_s,
            "bracket_sync": bool(args.bracket_sync), "train_rounds": args.train_rounds,
            "train": {"backend": args.train_backend,
                      "envpool_threads": args.train_envpool_threads, "envs": args.train_envs,
                      "unroll_length": args.train_unroll_length, "epochs": args.train_epochs,
                      "mini_batch": args.train_mini_batch,
                      "actors": [f"{k}db" if db else str(k) for k, db in train_actors],
                      "hyperparameters": {**TRAIN_HPARAMS,
                                          "hidden": list(TRAIN_HPARAMS["hidden"])}},
        },
        "notes": [],
    }
    m = results["machine"]
    m["sched_autogroup_enabled"] = autogroup_enabled()
    print(f"machine: nproc={m['nproc']}, cpu={m['cpu_model']}, load average "
          f"{m['load_average_1_5_15min']}", flush=True)
    failures = 0

    if "env" in sections:
        print("1. raw environment steps/s", flush=True)
        results["env"] = []
        for backend, label in ENV_BACKENDS:
            r = _run(backend, ["--worker", "env", "--backend", backend,
                               "--num_envs", str(RAW_NUM_ENVS),
                               "--seconds", str(args.env_seconds),
                               "--warmup_s", str(args.env_warmup_s)], args,
                     lambda r: r.get("skipped") or f"{r['steps_per_s']:,.0f} steps/s")
            failures += "error" in r
            if "skipped" in r:
                results["notes"].append(f"note: {backend} skipped: {r['skipped']}")
            results["env"].append({"backend": backend, "label": label, **r})
        # EnvPool alone at the sampler's other env counts: like-for-like references.
        for n in sampler_env_counts:
            if n == RAW_NUM_ENVS:
                continue
            for backend, label in ENV_BACKENDS[:2]:
                r = _run(f"{backend} {n} envs",
                         ["--worker", "env", "--backend", backend, "--num_envs", str(n),
                          "--seconds", str(args.env_seconds),
                          "--warmup_s", str(args.env_warmup_s)], args,
                         lambda r: f"{r['steps_per_s']:,.0f} steps/s")
                failures += "error" in r
                results["env"].append({"backend": backend, "label": f"{label}, {n} envs",
                                       **r, "num_envs": n})

    if "sampler" in sections:
        print("2. sampler-only steps/s", flush=True)
        results["sampler"] = []
        for n in sampler_env_counts:
            common_argv = ["--num_envs", str(n), "--unroll_length", str(args.unroll_length),
                           "--seconds", str(args.sampler_seconds),
                           "--warmup_s", str(args.sampler_warmup_s)]
            if args.sampler_envpool_threads is not None:
                common_argv += ["--sampler_envpool_threads", str(args.sampler_envpool_threads)]
            sync_argv = ["--worker", "sampler_sync", *common_argv]
            if args.profile and n == RAW_NUM_ENVS:
                sync_argv.append("--profile")
            for mode, argv in (("sync", sync_argv),
                               ("async", ["--worker", "sampler_async", *common_argv,
                                          "--num_actors", str(args.sampler_actors)])):
                r = _run(f"{mode} {n} envs", argv, args,
                         lambda r: f"{r['steps_per_s']:,.0f} steps/s")
                failures += "error" in r
                results["sampler"].append({"mode": mode, "num_envs": n,
                                           "num_actors": 0 if mode == "sync"
                                           else args.sampler_actors, **r})

    if "sampler" in sections and args.double_buffering_env:
        failures += _double_buffering_runs(args, results)

    if "train" in sections:
        appo = appo_available_in_subprocess(args)
        results["settings"]["train"]["async_algorithm"] = "AppoAlgorithm" if appo else (
            "PPOAlgorithm")
        if not appo:
            results["notes"].append("note: alf.algorithms.appo does not import: the async "
                                    "runs use PPOAlgorithm")
        print(f"3. training throughput ({TRAIN_HPARAMS['env_name']}, sync vs async)",
              flush=True)
        results["train"] = []
        common_argv = ["--worker", "train", "--seconds", str(args.train_seconds),
                       "--warmup_s", str(args.train_warmup_s),
                       "--train_backend", args.train_backend,
                       *(["--train_envpool_threads", str(args.train_envpool_threads)]
                         if args.train_envpool_threads is not None else []),
                       "--train_envs", str(args.train_envs),
                       "--train_unroll_length", str(args.train_unroll_length),
                       "--train_epochs", str(args.train_epochs),
                       "--train_mini_batch", str(args.train_mini_batch)]
        runs = [("sync", 0, False)] + [("async", k, db) for k, db in train_actors]
        runs *= max(1, args.train_rounds)
        if args.bracket_sync:
            runs.append(("sync", 0, False))
        for index, (mode, actors, double_buffering) in enumerate(runs):
            if mode == "async" and args.train_envs % actors:
                results["notes"].append(f"note: async with {actors} actors skipped: "
                                        f"{args.train_envs} envs do not split evenly")
                continue
            repeat = mode == "sync" and index > 0
            label = ("sync" + (" (again)" if repeat else "")) if mode == "sync" else (
                f"async {actors} actor(s)" + (", double buffering" if double_buffering else ""))
            r = _run(label, [*common_argv, "--mode", mode, "--num_actors", str(max(actors, 1)),
                             *(["--double_buffering"] if double_buffering else [])],
                     args, lambda r: (f"{r['steps_per_s']:,.0f} steps/s, collect/wait "
                                      f"{100 * r['collect_fraction']:.0f}%, train "
                                      f"{100 * r['train_fraction']:.0f}%"))
            failures += "error" in r
            results["train"].append({"mode": mode, "num_actors": actors, "repeat": repeat,
                                     "double_buffering": double_buffering, **r})

    results["machine"]["load_average_at_end"] = machine_info(())["load_average_1_5_15min"]
    results["targets"] = targets(results)
    results["notes"] += warnings_about(results)
    write_report(results, report(results), args.json)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
