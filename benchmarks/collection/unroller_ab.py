"""Benchmark: ``SyncUnroller`` of this checkout against the one of an earlier revision.

The earlier ``alf/unrollers/sync_unroller.py`` is read with ``git show REV:...`` and
imported under another module name (the rest of ALF is this checkout's), so both
unrollers run in one process, each with its own environment and identically seeded
PPO policy (the sampler benchmark's 2x64 tanh MLPs, ``collection.py``), 1 torch thread
and 1 BLAS thread, alternating round by round (the order reversed every round). It
prints microseconds per batched step (min and median over rounds) and the ratio of the
medians, before / after (above 1: this checkout is faster).

    python benchmarks/collection/unroller_ab.py --before HEAD~1 --num_envs 16 --backend envpool
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import machine_info  # noqa: E402

_MODULE = "alf/unrollers/sync_unroller.py"


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="git revision of the baseline")
    parser.add_argument("--num_envs", type=int, default=16, help="environments (16)")
    parser.add_argument(
        "--backend",
        default="envpool",
        choices=("envpool", "sync", "subprocess"),
        help="create_environment's vectorization_mode (envpool, with num_threads=1)",
    )
    parser.add_argument("--rounds", type=int, default=14, help="alternating rounds (14)")
    parser.add_argument(
        "--unrolls", type=int, default=10, help="unrolls of 32 steps per side per round (10)"
    )
    return parser.parse_args(argv)


def _module_at(revision: str, directory: str) -> ModuleType:
    """``sync_unroller.py`` as it was at ``revision``, imported as ``sync_unroller_before``."""
    root = Path(__file__).resolve().parents[2]
    source = subprocess.run(
        ["git", "show", f"{revision}:{_MODULE}"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(directory) / "sync_unroller_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("sync_unroller_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)

    from alf.utils.threads import set_cpu_threads
    from benchmarks.collection.collection_samplers import cartpole_sampler

    set_cpu_threads(1)
    print(machine_info(("torch", "numpy", "envpool")))
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as directory:
        before = _module_at(args.before, directory).SyncUnroller
        unrollers = {
            "before": cartpole_sampler(
                args.num_envs, backend=args.backend, unroller_class=before
            ),
            "after": cartpole_sampler(args.num_envs, backend=args.backend),
        }
    try:
        for unroller in unrollers.values():  # warm up
            for _ in range(3):
                unroller.unroll()
        times: dict[str, list[float]] = {name: [] for name in unrollers}
        names = list(unrollers)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                start = time.perf_counter()
                for _ in range(args.unrolls):
                    unrollers[name].unroll()
                times[name].append((time.perf_counter() - start) / (args.unrolls * 32) * 1e6)
    finally:
        for unroller in unrollers.values():
            unroller.close()
    print(
        f"\nCartPole-v1, {args.num_envs} envs, {args.backend}, 1 thread, load "
        f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    for name, values in times.items():
        print(
            f"{name:>6} ({args.before if name == 'before' else 'this checkout'}): "
            f"{min(values):.0f} us/step min, {statistics.median(values):.0f} median"
        )
    ratio = statistics.median(times["before"]) / statistics.median(times["after"])
    print(f"before / after (medians): {ratio:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
