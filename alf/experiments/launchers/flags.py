"""The ``--launcher`` flags shared by ``alf.bin.sweep``, ``alf.bin.tune`` and
``alf.bin.pbt``."""

from __future__ import annotations

import argparse

from alf.experiments.launchers.base import LaunchOptions

__all__ = ["add_launcher_flags", "launch_options"]


def add_launcher_flags(parser: argparse.ArgumentParser) -> None:
    """Adds ``--launcher`` and the resources of a cluster job to ``parser``."""
    group = parser.add_argument_group("launcher (where runs train)")
    group.add_argument(
        "--launcher",
        default="local",
        help="local (child processes), slurm (submitit) or ray (default: local)",
    )
    group.add_argument("--partition", default=None, help="Slurm partition")
    group.add_argument(
        "--time_min", type=int, default=60, help="Slurm time limit of a run, minutes (default 60)"
    )
    group.add_argument("--cpus_per_run", type=int, default=1, help="CPUs of a run (default 1)")
    group.add_argument("--gpus_per_run", type=int, default=0, help="GPUs of a run (default 0)")
    group.add_argument("--mem_gb", type=int, default=None, help="memory of a Slurm job, GB")
    group.add_argument(
        "--retries",
        type=int,
        default=2,
        help="resubmissions of a run whose job died; it resumes from its checkpoint (default 2)",
    )
    group.add_argument(
        "--slurm_param",
        action="append",
        default=[],
        help="another sbatch setting, name=value (e.g. account=rl, qos=high); repeatable",
    )
    group.add_argument(
        "--slurm_local",
        action="store_true",
        help="run the Slurm jobs with submitit's local executor, on this machine (a rehearsal)",
    )
    group.add_argument(
        "--ray_address", default="auto", help="the Ray cluster, host:port (default: auto)"
    )
    group.add_argument(
        "--ray_timeout_s",
        type=float,
        default=20.0,
        help="seconds to wait for the Ray cluster to answer (default 20)",
    )


def launch_options(args: argparse.Namespace, root_dir: str) -> LaunchOptions:
    """The :class:`LaunchOptions` of parsed flags, for the controller of ``root_dir``."""
    return LaunchOptions(
        launcher=args.launcher,
        root_dir=root_dir,
        partition=args.partition,
        time_min=args.time_min,
        cpus_per_run=args.cpus_per_run,
        gpus_per_run=args.gpus_per_run,
        mem_gb=args.mem_gb,
        retries=args.retries,
        slurm_params=tuple(args.slurm_param),
        slurm_local=args.slurm_local,
        ray_address=args.ray_address,
        ray_timeout_s=args.ray_timeout_s,
    )
