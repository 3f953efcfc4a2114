r"""Benchmark: data-parallel training throughput under ``torchrun``, and one GPU vs the CPU.

Every measurement is a real training run of ``alf.bin.train`` in fresh processes; the
numbers are read from the run's ``progress.jsonl`` (rank 0 writes it), whose training
summaries carry ``fps`` (env steps/s of all ranks over the summary window: each rank's
env steps / its time collecting and training, summed over the ranks), ``fps_per_rank``
(with several ranks), ``env_steps`` and ``elapsed_s``. The first summary window (start-up,
first DDP buckets, allocator warm-up) is dropped.

1. **PPO CartPole-v1** (``alf/examples/ppo_cart_pole.gin``, evaluation off, 1 torch
   thread per rank, ``OMP_NUM_THREADS=1`` for every run, a fixed number of iterations):

   * 1 rank as a plain process (``python -m alf.bin.train``), and as
     ``torchrun --nproc_per_node=1`` (which trains exactly like a plain process: the
     trainer only goes data-parallel with ``WORLD_SIZE > 1``);
   * ``N`` ranks (default 2) with ``torchrun --nproc_per_node=N --rdzv_backend=c10d
     --rdzv_endpoint=127.0.0.1:<free port>`` (gloo), two ways:

     - *same total config*: 8 environments and mini-batch 256 in total, so each rank
       steps 8/N environments and computes its gradients on 256/N steps (strong
       scaling: the run's work per iteration is fixed, each rank does 1/N of it);
     - *weak scaling*: ``8 * N`` environments and mini-batch ``256 * N`` in total, so
       each rank does the work of the 1-rank run.

   Reported per run: per-rank and total env steps/s over the measured windows (the
   trainer's ``fps``: collection + training time, DDP's gradient all-reduce included;
   summaries and checkpoints not), their spread over the windows, the whole-loop rate
   (env steps / wall time between the first and last measured summary), and the ratio
   of the total to the plain 1-rank run's. The full run repeats the plain 1-rank run at
   the end and compares with the mean of both (against load drift).

2. **CNN workload, 1 GPU vs CPU** (only where ``torch.cuda.is_available()``): PPO on
   Pong (``alf/examples/ppo_pong.gin``: EnvPool Atari, 8 environments, unroll 128, the
   Nature-DQN torso, 4 epochs of mini-batch 256; evaluation off) trained on the CPU
   (torch's default thread count), on the GPU (``--device=cuda``) with
   ``TrainerConfig.collect_on_device=True``, and on the GPU with a CPU copy of the
   policy collecting (the default). Without a GPU the section prints why it was skipped
   (``--cnn_cpu`` still runs its CPU row, to check the configuration).

Usage::

    python benchmarks/ppo/distributed.py                 # full run (~5 minutes on 2 cores)
    python benchmarks/ppo/distributed.py --quick         # smoke run (a few seconds per run)
    python benchmarks/ppo/distributed.py --ranks 4 --iterations 400 --json /tmp/dp.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import (  # noqa: E402
    WorkerError,
    emit_result,
    fmt_num,
    format_table,
    machine_info,
    package_version,
    run_worker,
    write_report,
)

SCRIPT = os.path.abspath(__file__)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(SCRIPT)))
CARTPOLE_CONF = os.path.join(REPO_ROOT, "alf", "examples", "ppo_cart_pole.gin")
PONG_CONF = os.path.join(REPO_ROOT, "alf", "examples", "ppo_pong.gin")

# The 1-rank CartPole config (the values of ppo_cart_pole.gin, pinned here).
BASE_ENVS = 8
BASE_MINI_BATCH = 256

QUICK = {"iterations": 60, "summary_interval": 10, "cnn_iterations": 3,
         "cnn_summary_interval": 1, "bracket": False}
FULL = {"iterations": 800, "summary_interval": 50, "cnn_iterations": 16,
        "cnn_summary_interval": 4, "bracket": True}


@dataclass
class RunSpec:
    """One training run: how it is launched and what it overrides in the config."""

    key: str
    label: str
    conf: str
    nproc: int = 1
    torchrun: bool = False
    conf_params: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    env: dict[str, str | None] = field(default_factory=dict)  # None: unset the variable
    num_envs: int | None = None
    mini_batch: int | None = None


# --------------------------------------------------------------------------- helpers
def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for torchrun's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(spec: RunSpec, root_dir: str) -> list[str]:
    """The command line of ``spec`` (``torchrun`` as ``python -m torch.distributed.run``,
    the same entry point, so that it runs under this interpreter)."""
    train = ["-m", "alf.bin.train", f"--conf={spec.conf}", f"--root_dir={root_dir}",
             *(f"--conf_param={p}" for p in spec.conf_params), *spec.flags]
    if not spec.torchrun:
        return [sys.executable, *train]
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={spec.nproc}",
            "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{_free_port()}", *train]


def _tail(path: str, lines: int = 60) -> str:
    """The end of a run's output, preceded by its first error or traceback (under
    torchrun the ranks' errors come before the launcher's own long report)."""
    try:
        with open(path, errors="replace") as f:
            text = f.read().strip().splitlines()
    except OSError as err:
        return f"(no output: {err})"
    first = next((i for i, line in enumerate(text)
                  if line.startswith(("Traceback", "alf.bin.train: error"))), None)
    if first is None or first >= len(text) - lines:
        return "\n".join(text[-lines:])
    return "\n".join([*text[first:first + lines], "[...]", *text[-15:]])


def _launch(cmd: list[str], env: dict[str, str], log_path: str, timeout_s: float,
            verbose: bool) -> float:
    """Runs ``cmd`` (in its own process group, so a timeout also ends torchrun's ranks)
    and returns its wall time; its output goes to ``log_path`` (or to ours, ``verbose``).

    Raises:
        WorkerError: non-zero exit or timeout, with the tail of the output.
    """
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, start_new_session=True,
                                stdout=None if verbose else log,
                                stderr=None if verbose else subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
                except ProcessLookupError:
                    break
            raise WorkerError(f"timed out after {timeout_s:.0f}s: {' '.join(cmd)}\n"
                              f"--- last lines of its output ---\n{_tail(log_path)}") from None
    if rc != 0:
        raise WorkerError(f"exited with status {rc}: {' '.join(cmd)}\n"
                          f"--- last lines of its output ---\n{_tail(log_path)}")
    return time.monotonic() - start


def _read_summaries(root_dir: str) -> list[dict[str, Any]]:
    """The training-summary records of ``root_dir/progress.jsonl``, by iteration."""
    records = []
    with open(os.path.join(root_dir, "progress.jsonl")) as f:
        for line in f:
            line = line.strip()
            if line:
                record = json.loads(line)
                if "fps" in record:
                    records.append(record)
    return sorted(records, key=lambda r: r["iteration"])


def summarize(records: list[dict[str, Any]], nproc: int) -> dict[str, Any]:
    """Throughput over the summary windows after the first (the warm-up).

    Per rank: its env steps / its time over the measured windows (a window's time is
    that rank's share of the window's env steps divided by its ``fps``); total: the sum
    over the ranks; wall: env steps / ``elapsed_s`` from the end of the first window to
    the end of the last.
    """
    if not records:
        raise WorkerError("progress.jsonl holds no training summary")
    start = 1 if len(records) > 1 else 0
    prev_steps = records[start - 1]["env_steps"] if start else 0
    steps = 0.0
    rank_time = [0.0] * nproc
    window_fps = []
    for record in records[start:]:
        delta = record["env_steps"] - prev_steps
        prev_steps = record["env_steps"]
        rates = record.get("fps_per_rank") or [record["fps"]]
        if len(rates) != nproc:
            raise WorkerError(f"expected {nproc} ranks' rates, got {rates}")
        steps += delta
        for rank, rate in enumerate(rates):
            rank_time[rank] += (delta / nproc) / max(rate, 1e-9)
        window_fps.append(record["fps"])
    per_rank = [steps / nproc / t for t in rank_time]
    last = records[-1]
    first = records[start - 1] if start else {"env_steps": 0, "elapsed_s": 0.0}
    wall = (last["env_steps"] - first["env_steps"]) / max(
        last["elapsed_s"] - first["elapsed_s"], 1e-9)
    return {
        "per_rank_steps_per_s": per_rank,
        "total_steps_per_s": sum(per_rank),
        "wall_steps_per_s": wall,
        "window_fps_min": min(window_fps),
        "window_fps_max": max(window_fps),
        "measured_windows": len(window_fps),
        "measured_env_steps": steps,
        "measured_from_iteration": records[start - 1]["iteration"] if start else 0,
        "iterations": last["iteration"],
        "env_steps": last["env_steps"],
        "train_time_s": last["train_time_s"],
        "elapsed_s": last["elapsed_s"],
    }


def run_training(spec: RunSpec, runs_dir: str, timeout_s: float,
                 verbose: bool) -> dict[str, Any]:
    """Trains ``spec`` in fresh processes and returns its measured throughput."""
    root_dir = os.path.join(runs_dir, spec.key)
    os.makedirs(root_dir, exist_ok=True)
    env = dict(os.environ)
    for name, value in spec.env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    cmd = _command(spec, root_dir)
    load_before = machine_info(())["load_average_1_5_15min"]
    wall_s = _launch(cmd, env, os.path.join(runs_dir, f"{spec.key}.log"), timeout_s, verbose)
    result = summarize(_read_summaries(root_dir), spec.nproc)
    result.update({
        "key": spec.key, "label": spec.label, "nproc": spec.nproc,
        "torchrun": spec.torchrun, "num_envs": spec.num_envs, "mini_batch": spec.mini_batch,
        "command": " ".join(cmd), "process_wall_s": wall_s,
        "load_average_before": load_before,
        "env_overrides": spec.env,
    })
    return result


# --------------------------------------------------------------------------- the runs
def _common_params(iterations: int, summary_interval: int) -> list[str]:
    return [
        f"TrainerConfig.num_iterations={iterations}",
        "TrainerConfig.num_env_steps=0",
        "TrainerConfig.evaluate=False",
        f"TrainerConfig.summary_interval={summary_interval}",
        "TrainerConfig.checkpoint_interval=1000000",  # only the final checkpoint
    ]


def cartpole_specs(args: argparse.Namespace, iterations: int, summary_interval: int,
                   bracket: bool) -> list[RunSpec]:
    """Section 1's runs, in the order they run."""
    n = args.ranks

    def spec(key: str, label: str, nproc: int, torchrun: bool, envs: int,
             mini_batch: int) -> RunSpec:
        params = _common_params(iterations, summary_interval) + [
            "TrainerConfig.torch_num_threads=1",
            f"create_environment.num_parallel_environments={envs}",
            f"PPOAlgorithm.mini_batch_size={mini_batch}",
        ]
        return RunSpec(key=key, label=label, conf=CARTPOLE_CONF, nproc=nproc,
                       torchrun=torchrun, conf_params=params,
                       env={"OMP_NUM_THREADS": "1"}, num_envs=envs, mini_batch=mini_batch)

    specs = [
        spec("plain_1", "1 rank, python -m alf.bin.train", 1, False, BASE_ENVS,
             BASE_MINI_BATCH),
        spec("torchrun_1", "1 rank, torchrun --nproc_per_node=1", 1, True, BASE_ENVS,
             BASE_MINI_BATCH),
        spec(f"same_{n}", f"{n} ranks, same total config", n, True, BASE_ENVS,
             BASE_MINI_BATCH),
        spec(f"weak_{n}", f"{n} ranks, weak scaling (x{n} envs, x{n} mini-batch)", n, True,
             BASE_ENVS * n, BASE_MINI_BATCH * n),
    ]
    if bracket:
        specs.append(spec("plain_1_again", "1 rank, python -m alf.bin.train (again)", 1,
                          False, BASE_ENVS, BASE_MINI_BATCH))
    return specs


def cnn_specs(iterations: int, summary_interval: int, with_gpu: bool) -> list[RunSpec]:
    """Section 2's runs: the CPU, then (``with_gpu``) the GPU two ways."""
    params = _common_params(iterations, summary_interval)
    # torch's default thread count on the CPU (the config sets none): unset an inherited
    # OMP_NUM_THREADS so the CPU row gets every core.
    specs = [RunSpec(key="cnn_cpu", label="CPU (--device=cpu, torch's default threads)",
                     conf=PONG_CONF, conf_params=params, flags=["--device=cpu"],
                     env={"OMP_NUM_THREADS": None})]
    if with_gpu:
        specs += [
            RunSpec(key="cnn_cuda_collect_on_device",
                    label="1 GPU (--device=cuda, collect_on_device=True)", conf=PONG_CONF,
                    conf_params=params + ["TrainerConfig.collect_on_device=True"],
                    flags=["--device=cuda"], env={"OMP_NUM_THREADS": None}),
            RunSpec(key="cnn_cuda", label="1 GPU (--device=cuda, CPU copy collects)",
                    conf=PONG_CONF, conf_params=params, flags=["--device=cuda"],
                    env={"OMP_NUM_THREADS": None}),
        ]
    return specs


def worker_cuda_probe() -> dict[str, Any]:
    """What torch (in a fresh process) says about CUDA."""
    import torch

    result: dict[str, Any] = {"torch": torch.__version__,
                              "cuda_available": torch.cuda.is_available(),
                              "cuda_build": torch.version.cuda}
    if result["cuda_available"]:
        result["device_count"] = torch.cuda.device_count()
        result["device_name"] = torch.cuda.get_device_name(0)
    return result


# --------------------------------------------------------------------------- report
def _ratio(value: float | None, ref: float | None) -> str:
    return "-" if not value or not ref else f"{value / ref:.2f}x"


def _load(run: dict[str, Any]) -> str:
    """The 1-minute load average just before ``run`` started."""
    load = run.get("load_average_before")
    return "-" if not load else f"{load[0]:.2f}"


def _baseline(runs: list[dict[str, Any]], key: str) -> float | None:
    """The mean of the plain 1-rank runs' ``key``."""
    values = [r[key] for r in runs if r["key"].startswith("plain_1") and "error" not in r]
    return sum(values) / len(values) if values else None


def _report_cartpole(results: dict[str, Any]) -> list[str]:
    """Section 1 of the report."""
    m, s = results["machine"], results["settings"]
    out = [
        f"1. PPO CartPole-v1 ({os.path.relpath(CARTPOLE_CONF, REPO_ROOT)}), "
        f"{s['iterations']} iterations, unroll 32, 20 epochs, evaluation off, 1 torch "
        f"thread per rank, OMP_NUM_THREADS=1; steps/s over iterations "
        f"{s['summary_interval'] + 1}-{s['iterations']} (first summary window dropped)",
    ]
    runs = results["cartpole"]
    base = _baseline(runs, "total_steps_per_s")
    base_wall = _baseline(runs, "wall_steps_per_s")
    rows = []
    for r in runs:
        if "error" in r:
            rows.append([r["label"], r["nproc"], r["num_envs"], r["mini_batch"], "FAILED",
                         "-", "-", "-", "-", "-"])
            continue
        per_rank = " / ".join(fmt_num(v) for v in r["per_rank_steps_per_s"])
        spread = f"{fmt_num(r['window_fps_min'])}-{fmt_num(r['window_fps_max'])}"
        rows.append([r["label"], r["nproc"], r["num_envs"], r["mini_batch"], per_rank,
                     fmt_num(r["total_steps_per_s"]), spread,
                     fmt_num(r["wall_steps_per_s"]), _ratio(r["total_steps_per_s"], base),
                     _load(r)])
    out.append(format_table(["run", "ranks", "envs", "mini-batch", "per-rank steps/s",
                             "total steps/s", "window min-max", "wall steps/s",
                             "vs 1 rank", "load before"], rows))
    plain = [r for r in runs if r["key"].startswith("plain_1") and "error" not in r]
    out.append("")
    out.append("'vs 1 rank': total steps/s / the plain 1-rank run's"
               + (f" (mean of {len(plain)} runs)" if len(plain) > 1 else "")
               + "; envs and mini-batch are totals over the ranks; 'load before': 1-minute "
               "load average as the run started.")
    by_key = {r["key"]: r for r in runs if "error" not in r}
    n = s["ranks"]
    for key, what in (
            (f"same_{n}", f"same total config (each rank: 1/{n} of the work): {n} ranks"),
            (f"weak_{n}", f"weak scaling (each rank: the 1-rank run's work): {n} ranks"),
            ("torchrun_1", "launcher overhead: torchrun --nproc_per_node=1")):
        r = by_key.get(key)
        if r is not None:
            out.append(f"  {what} / 1 plain rank = {_ratio(r['total_steps_per_s'], base)} "
                       f"total steps/s (wall {_ratio(r['wall_steps_per_s'], base_wall)})")
    cpus = m.get("cpus_available") or m.get("nproc") or 1
    if cpus < 2 * n:
        out.append(f"  note: {n} ranks share {cpus} CPUs; each rank also runs gloo's "
                   "communication threads, so the ranks compete for the cores: do not "
                   f"expect {n}x.")
    return out


def _report_cnn(results: dict[str, Any]) -> list[str]:
    """Section 2 of the report."""
    s, cnn = results["settings"], results["cnn"]
    out = [f"2. CNN workload, 1 GPU vs CPU: PPO Pong "
           f"({os.path.relpath(PONG_CONF, REPO_ROOT)}), {s['cnn_iterations']} iterations of "
           f"1024 env steps, evaluation off; steps/s after the first summary window"]
    if cnn.get("skipped"):
        out.append(f"  GPU comparison skipped: {cnn['skipped']}")
    runs = cnn.get("runs", [])
    if runs:
        cpu = next((r.get("total_steps_per_s") for r in runs
                    if r["key"] == "cnn_cpu" and "error" not in r), None)
        rows = []
        for r in runs:
            if "error" in r:
                rows.append([r["label"], "FAILED", "-", "-", "-"])
                continue
            rows.append([r["label"], fmt_num(r["total_steps_per_s"]),
                         fmt_num(r["wall_steps_per_s"]), _ratio(r["total_steps_per_s"], cpu),
                         _load(r)])
        out.append(format_table(["run", "steps/s", "wall steps/s", "vs CPU", "load before"],
                                rows))
        if cnn.get("probe", {}).get("device_name"):
            out.append(f"  GPU: {cnn['probe']['device_name']} "
                       f"({cnn['probe']['device_count']} visible, 1 used)")
    return out


def report(results: dict[str, Any]) -> str:
    """The plain-text report of a run."""
    m, s = results["machine"], results["settings"]
    out = [
        "== ALF data-parallel benchmark ==",
        f"machine: {m['nproc']} CPUs (available: {m['cpus_available']}), {m['cpu_model']}, "
        f"load average at start {m['load_average_1_5_15min']}, at end "
        f"{m.get('load_average_at_end')}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"mode: {'quick' if s['quick'] else 'full'}",
    ]
    if "cartpole" in s["sections"]:
        out += ["", *_report_cartpole(results)]
    if "cnn" in s["sections"]:
        out += ["", *_report_cnn(results)]
    errors = [r for r in results["cartpole"] + results["cnn"].get("runs", []) if "error" in r]
    if errors:
        out.append("")
        out.append("FAILED runs:")
        for r in errors:
            out.append(f"--- {r['label']} ---\n{r['error']}")
    cpus = m.get("cpus_available") or m.get("nproc") or 1
    load = m.get("load_average_1_5_15min")
    if load and load[0] > 0.5 * cpus:
        out.append("")
        out.append(f"WARNING: the machine was busy before the benchmark started (1-min load "
                   f"average {load[0]:.2f} on {cpus} CPUs): timings are not representative.")
    return "\n".join(out)


# ------------------------------------------------------------------------------ main
def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: {QUICK['iterations']} CartPole iterations, "
                        f"{QUICK['cnn_iterations']} Pong iterations, no repeated baseline")
    p.add_argument("--ranks", type=int, default=2,
                   help="ranks of the data-parallel runs (default 2; must divide 8)")
    p.add_argument("--iterations", type=int, default=None,
                   help=f"CartPole iterations per run (default {FULL['iterations']}, "
                        f"--quick {QUICK['iterations']})")
    p.add_argument("--summary_interval", type=int, default=None,
                   help=f"CartPole iterations per summary window (default "
                        f"{FULL['summary_interval']}, --quick {QUICK['summary_interval']})")
    p.add_argument("--cnn_iterations", type=int, default=None,
                   help=f"Pong iterations per run (default {FULL['cnn_iterations']}, "
                        f"--quick {QUICK['cnn_iterations']})")
    p.add_argument("--sections", default="cartpole,cnn",
                   help="comma-separated subset of: cartpole, cnn")
    p.add_argument("--cnn_cpu", action="store_true",
                   help="without a GPU, still run the CNN section's CPU row (slow on few "
                        "cores: ~10 s per Pong iteration on 2)")
    p.add_argument("--runs_dir", default=None,
                   help="keep the runs' directories and logs here (default: a temporary "
                        "directory, removed at the end)")
    p.add_argument("--json", default=None, help="also write the raw numbers to this file")
    p.add_argument("--run_timeout_s", type=float, default=900.0,
                   help="kill a run after this many seconds (default 900)")
    p.add_argument("--verbose", action="store_true", help="show the runs' output")
    p.add_argument("--worker", choices=["cuda_probe"], help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _run_all(specs: list[RunSpec], runs_dir: str, args: argparse.Namespace) -> tuple[
        list[dict[str, Any]], int]:
    results, failures = [], 0
    for spec in specs:
        print(f"{spec.label} ...", end=" ", flush=True)
        tick = time.monotonic()
        try:
            r = run_training(spec, runs_dir, args.run_timeout_s, args.verbose)
            print(f"{time.monotonic() - tick:.0f}s, {r['total_steps_per_s']:,.0f} steps/s",
                  flush=True)
        except (WorkerError, OSError, ValueError, KeyError) as err:
            failures += 1
            r = {"key": spec.key, "label": spec.label, "nproc": spec.nproc,
                 "num_envs": spec.num_envs, "mini_batch": spec.mini_batch,
                 "error": f"{type(err).__name__}: {err}"}
            print(f"FAILED\n{err}", flush=True)
        results.append(r)
    return results, failures


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.worker == "cuda_probe":
        emit_result(worker_cuda_probe())
        return 0
    sections = {x.strip() for x in args.sections.split(",") if x.strip()}
    if sections - {"cartpole", "cnn"} or not sections:
        print(f"--sections: choose from cartpole, cnn (got {args.sections!r})", file=sys.stderr)
        return 2
    if args.ranks < 2 or BASE_ENVS % args.ranks or BASE_MINI_BATCH % args.ranks:
        print(f"--ranks must be >= 2 and divide {BASE_ENVS} and {BASE_MINI_BATCH}",
              file=sys.stderr)
        return 2
    mode = QUICK if args.quick else FULL
    iterations = args.iterations or mode["iterations"]
    summary_interval = args.summary_interval or mode["summary_interval"]
    cnn_iterations = args.cnn_iterations or mode["cnn_iterations"]
    cnn_summary_interval = min(mode["cnn_summary_interval"], max(1, cnn_iterations // 2))
    if iterations < 2 * summary_interval:
        print("--iterations must be at least 2 summary windows (the first is dropped)",
              file=sys.stderr)
        return 2

    results: dict[str, Any] = {
        "benchmark": "distributed",
        "machine": machine_info(("torch", "gymnasium", "numpy", "envpool", "ale-py", "alf")),
        "settings": {"quick": args.quick, "sections": sorted(sections), "ranks": args.ranks,
                     "iterations": iterations,
                     "summary_interval": summary_interval, "cnn_iterations": cnn_iterations,
                     "cnn_summary_interval": cnn_summary_interval,
                     "base_envs": BASE_ENVS, "base_mini_batch": BASE_MINI_BATCH},
        "cartpole": [],
        "cnn": {},
    }
    failures = 0
    with tempfile.TemporaryDirectory(prefix="alf_dp_bench_") as tmp:
        runs_dir = os.path.abspath(args.runs_dir) if args.runs_dir else tmp
        os.makedirs(runs_dir, exist_ok=True)
        if "cartpole" in sections:
            specs = cartpole_specs(args, iterations, summary_interval, mode["bracket"])
            results["cartpole"], failed = _run_all(specs, runs_dir, args)
            failures += failed
        if "cnn" in sections:
            failures += _cnn_section(results, runs_dir, args, cnn_iterations,
                                     cnn_summary_interval)
    results["machine"]["load_average_at_end"] = machine_info(())["load_average_1_5_15min"]
    write_report(results, report(results), args.json)
    return 1 if failures else 0


def _cnn_section(results: dict[str, Any], runs_dir: str, args: argparse.Namespace,
                 iterations: int, summary_interval: int) -> int:
    """Runs section 2 (or records why not) into ``results['cnn']``; returns failures."""
    cnn: dict[str, Any] = results["cnn"]
    try:
        probe = run_worker([SCRIPT, "--worker", "cuda_probe"], timeout_s=300)
    except WorkerError as err:
        cnn["skipped"] = f"could not ask torch about CUDA: {err}"
        return 1
    cnn["probe"] = probe
    missing = [name for name in ("envpool", "ale-py") if package_version(name) is None]
    if missing:
        cnn["skipped"] = (f"{', '.join(missing)} not installed (ppo_pong.gin needs the "
                          "[atari] and [envpool] extras)")
        return 0
    if not probe["cuda_available"]:
        cnn["skipped"] = (f"torch.cuda.is_available() is False (torch {probe['torch']}, "
                          f"CUDA build: {probe['cuda_build']}): no GPU to compare with"
                          + ("; the CPU row ran anyway (--cnn_cpu)" if args.cnn_cpu else
                             "; --cnn_cpu runs the CPU row anyway"))
        if not args.cnn_cpu:
            return 0
    specs = cnn_specs(iterations, summary_interval, with_gpu=probe["cuda_available"])
    cnn["runs"], failures = _run_all(specs, runs_dir, args)
    return failures


if __name__ == "__main__":
    sys.exit(main())
