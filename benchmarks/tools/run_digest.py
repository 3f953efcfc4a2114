r"""Digest of short, seeded, synchronous training runs: a "no behaviour change" check.

Trains a handful of tiny runs of the example configs through the public command line
(``python -m alf.bin.train --conf=... --root_dir=... --conf_param=...``), each in its own
subprocess with ``OMP_NUM_THREADS=1`` and ``TrainerConfig.torch_num_threads=1``, and
prints one line per run::

    NAME  ckpt=ckpt-N iter=I env_steps=S eval_return=R algo=H buffer=H tensors=H
        progress=H keys=k1,k2,...

* ``iter``, ``env_steps``, ``eval_return``: from the run's ``status.json`` (the last
  evaluation record of ``progress.jsonl`` when the status has no return).
* ``algo``: sha256 (first 16 hex digits) of the tensors of the newest checkpoint's
  algorithm state (``checkpoint["algorithm"]``, or the first ``algorithm`` dict found
  anywhere in the checkpoint), walked in sorted key order; each tensor contributes its
  dtype, shape and raw bytes (key names are not hashed, so renamed keys that keep their
  order do not change it). ``-`` if there is none.
* ``buffer``: the same for the replay buffer (``replay_buffer``; ``-`` if not saved).
* ``tensors``: every tensor of the checkpoint except random-number-generator states and
  time fields, as an order-independent digest (the sorted per-tensor digests), so it
  survives a refactor that moves keys around the checkpoint.
* ``progress``: the numbers of ``progress.jsonl`` (losses, returns...) with the timing
  fields (elapsed time, fps, steps per second) left out.
* ``keys``: the checkpoint's top-level keys (informational; not compared).

Runs: PPO, A2C and DQN on CartPole, SAC, TD3 and DDPG on Pendulum, PPO on Hopper with the
``ObservationNormalizer``/``RewardNormalizer`` data transformers of
``common/mujoco_ppo.gin``, and two runs that are stopped and resumed with a larger budget
(off-policy SAC with ``ReplayBuffer.enable_checkpoint=True``, on-policy PPO); for those
the first part's checkpoint gets a line too (``NAME/part1``). Everything is stepped
synchronously (``async_unroll`` stays off) on the CPU, so the digests are reproducible on
one machine and software stack (not across torch versions or CPU types).

The alf that is trained is the one of ``--checkout`` (default: the checkout that
``import alf`` finds in this interpreter, e.g. through ``PYTHONPATH``): the training
subprocesses run in that directory with it first on ``PYTHONPATH``, which wins over an
editable install of another checkout. The script checks it (``alf.__file__`` of a
subprocess, and the ``argv`` each run records in ``run_info.json``) and stops if another
alf was used. This script itself imports only torch, never alf.

Usage::

    # the checkout this script lives in (or whichever alf is importable)
    python benchmarks/tools/run_digest.py --out /tmp/digest.json

    # another checkout, e.g. a git worktree of the commit before a refactor
    git worktree add /tmp/alf_before <commit> --detach
    python benchmarks/tools/run_digest.py --checkout /tmp/alf_before --out /tmp/before.json

    # after the change: compare (exit status 1 if any digest differs)
    python benchmarks/tools/run_digest.py --compare /tmp/before.json

    # some runs only, keeping the run directories
    python benchmarks/tools/run_digest.py --runs ppo_cart_pole,sac_pendulum --keep /tmp/digest_runs

Flags: ``--out FILE`` also writes the lines (and the parsed fields) as JSON; ``--keep
DIR`` puts the run directories there (emptied run by run) instead of a temporary
directory that is deleted at the end; ``--checkout DIR``; ``--runs A,B``; ``--seed N``
(``TrainerConfig.random_seed``, default 0); ``--compare FILE`` (a JSON of ``--out``);
``--list``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

# Per-run settings shared by every run: one thread, CPU, no trackers.
_COMMON_PARAMS = (
    "TrainerConfig.torch_num_threads=1",
    "TrainerConfig.device='cpu'",
    "TrainerConfig.async_unroll=False",
)

_CKPT_RE = re.compile(r"^ckpt-(\d+)\.pt$")
# Checkpoint keys (at any depth) that are not part of the digest.
_RNG_KEY_RE = re.compile(r"(^|_)rng(_|$)|random_state|generator_state", re.IGNORECASE)
_TIME_KEY_RE = re.compile(
    r"(time|timestamp|elapsed(_s)?|.*_time(_s)?|.*wall.*|.*_timestamp)", re.IGNORECASE
)
# progress.jsonl fields that measure time rather than learning.
_PROGRESS_SKIP_RE = re.compile(r"elapsed|time|fps|per_second|_s$", re.IGNORECASE)

# Fields of a line that --compare checks (``keys`` is informational).
COMPARED_FIELDS = (
    "ckpt",
    "iter",
    "env_steps",
    "eval_return",
    "algo",
    "buffer",
    "tensors",
    "progress",
)


@dataclass(frozen=True)
class RunSpec:
    """One digest run.

    Attributes:
        name: the run's name in the output.
        conf: the config, relative to ``alf/examples`` of the checkout.
        params: ``--conf_param`` bindings of every part.
        parts: the budget bindings of each part; more than one part means the run is
            stopped after each part's budget and resumed (same ``root_dir``) with the
            next one.
    """

    name: str
    conf: str
    params: tuple[str, ...]
    parts: tuple[tuple[str, ...], ...] = field(default=((),))


_OFF_POLICY_PENDULUM = (
    "TrainerConfig.initial_collect_steps=200",
    "TrainerConfig.summary_interval=100",
    "TrainerConfig.eval_interval=250",
    "TrainerConfig.checkpoint_interval=250",
    "TrainerConfig.num_iterations=0",
)
_PPO_CART_POLE = (
    "TrainerConfig.num_env_steps=0",
    "TrainerConfig.summary_interval=2",
    "TrainerConfig.eval_interval=4",
    "TrainerConfig.checkpoint_interval=4",
)

RUNS: tuple[RunSpec, ...] = (
    RunSpec(
        "ppo_cart_pole", "ppo_cart_pole.gin", _PPO_CART_POLE + ("TrainerConfig.num_iterations=8",)
    ),
    RunSpec(
        "a2c_cart_pole",
        "ac_cart_pole.gin",
        (
            "TrainerConfig.num_iterations=12",
            "TrainerConfig.num_env_steps=0",
            "TrainerConfig.summary_interval=4",
            "TrainerConfig.eval_interval=6",
            "TrainerConfig.checkpoint_interval=6",
        ),
    ),
    RunSpec(
        "dqn_cart_pole",
        "dqn_cart_pole.gin",
        (
            "TrainerConfig.num_env_steps=1200",
            "TrainerConfig.num_iterations=0",
            "TrainerConfig.initial_collect_steps=200",
            "TrainerConfig.summary_interval=50",
            "TrainerConfig.eval_interval=150",
            "TrainerConfig.checkpoint_interval=150",
        ),
    ),
    RunSpec(
        "sac_pendulum",
        "sac_pendulum.gin",
        _OFF_POLICY_PENDULUM + ("TrainerConfig.num_env_steps=500",),
    ),
    RunSpec(
        "td3_pendulum",
        "td3_pendulum.gin",
        _OFF_POLICY_PENDULUM + ("TrainerConfig.num_env_steps=500",),
    ),
    RunSpec(
        "ddpg_pendulum",
        "ddpg_pendulum.gin",
        _OFF_POLICY_PENDULUM + ("TrainerConfig.num_env_steps=500",),
    ),
    RunSpec(
        # ObservationNormalizer + RewardNormalizer (common/mujoco_ppo.gin).
        "ppo_hopper_normalizers",
        "ppo_hopper.gin",
        (
            "TrainerConfig.num_iterations=2",
            "TrainerConfig.num_env_steps=0",
            "TrainerConfig.summary_interval=1",
            "TrainerConfig.eval_interval=2",
            "TrainerConfig.checkpoint_interval=1",
        ),
    ),
    RunSpec(
        "sac_pendulum_buffer_resume",
        "sac_pendulum.gin",
        _OFF_POLICY_PENDULUM
        + ("ReplayBuffer.enable_checkpoint=True", "ReplayBuffer.max_length=1000"),
        parts=(("TrainerConfig.num_env_steps=400",), ("TrainerConfig.num_env_steps=700",)),
    ),
    RunSpec(
        "ppo_cart_pole_resume",
        "ppo_cart_pole.gin",
        _PPO_CART_POLE,
        parts=(("TrainerConfig.num_iterations=4",), ("TrainerConfig.num_iterations=8",)),
    ),
)


def _sort_key(key: Any) -> tuple[int, Any]:
    """Integer keys (optimizer state ids) numerically, then the others as strings."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return (0, int(key))
    return (1, str(key))


def _excluded(key: Any) -> bool:
    name = str(key)
    return bool(_RNG_KEY_RE.search(name) or _TIME_KEY_RE.fullmatch(name))


def _iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """The tensors (and numpy arrays) in ``obj``, dicts walked in sorted key order and
    sequences in order, skipping random-number states and time fields."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, np.ndarray):
        yield torch.from_numpy(np.ascontiguousarray(obj))
    elif isinstance(obj, dict):
        for key in sorted(obj, key=_sort_key):
            if not _excluded(key):
                yield from _iter_tensors(obj[key])
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _iter_tensors(item)


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    t = tensor.detach().cpu().contiguous().reshape(-1)
    header = f"{str(tensor.dtype)}{tuple(tensor.shape)};".encode()
    return header + t.view(torch.uint8).numpy().tobytes()


def ordered_digest(obj: Any) -> tuple[str, int]:
    """sha256 (16 hex) of the tensors of ``obj`` in walk order, and how many there were."""
    h = hashlib.sha256()
    count = 0
    for tensor in _iter_tensors(obj):
        h.update(_tensor_bytes(tensor))
        count += 1
    return h.hexdigest()[:16], count


def unordered_digest(obj: Any) -> tuple[str, int]:
    """sha256 (16 hex) of the sorted digests of every tensor of ``obj``: independent of
    where in the (nested) dict each tensor is kept."""
    digests = sorted(hashlib.sha256(_tensor_bytes(t)).hexdigest() for t in _iter_tensors(obj))
    return hashlib.sha256("".join(digests).encode()).hexdigest()[:16], len(digests)


def _find_key(obj: Any, key: str) -> Any:
    """``obj[key]`` if present at the top, else the first ``key`` found walking nested
    dicts in sorted order (None if nowhere)."""
    if not isinstance(obj, dict):
        return None
    if key in obj:
        return obj[key]
    for k in sorted(obj, key=_sort_key):
        found = _find_key(obj[k], key)
        if found is not None:
            return found
    return None


def progress_digest(path: str) -> str:
    """sha256 (16 hex) of the numbers in ``progress.jsonl`` (timing fields left out)."""
    h = hashlib.sha256()
    try:
        with open(path) as f:
            lines = f.readlines()
    except FileNotFoundError:
        return "-"
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        kept = {
            k: v
            for k, v in sorted(record.items())
            if not _PROGRESS_SKIP_RE.search(k) and isinstance(v, (int, float, bool))
        }
        h.update(json.dumps(kept, sort_keys=True).encode() + b"\n")
    return h.hexdigest()[:16]


def newest_checkpoint(run_dir: str) -> str | None:
    """The checkpoint file with the highest ``ckpt-N`` under ``run_dir/checkpoints`` (any
    other ``*.pt`` file by modification time if none is named so)."""
    directory = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(directory):
        return None
    names = os.listdir(directory)
    numbered = [(int(m.group(1)), n) for n in names if (m := _CKPT_RE.match(n))]
    if numbered:
        return os.path.join(directory, max(numbered)[1])
    others = [os.path.join(directory, n) for n in names if n.endswith(".pt")]
    return max(others, key=os.path.getmtime) if others else None


def load_checkpoint(path: str) -> dict[str, Any]:
    """The checkpoint at ``path``: ``weights_only=True`` (what ALF writes), falling back to
    a full unpickle of this trusted, freshly written file if the layout ever needs it."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - e.g. a new layout holding other objects
        state = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(state, dict):
        state = {"checkpoint": state}
    return state


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _last_eval_return(run_dir: str) -> float | None:
    value = None
    try:
        with open(os.path.join(run_dir, "progress.jsonl")) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and "eval/average_return" in record:
                    value = record["eval/average_return"]
    except FileNotFoundError:
        pass
    return value


def _fmt_number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(round(value, 6))
    return str(value)


def digest_run_dir(name: str, run_dir: str) -> dict[str, Any]:
    """The digest fields of the run in ``run_dir`` (its newest checkpoint and status)."""
    status = _read_json(os.path.join(run_dir, "status.json"))
    eval_return = status.get("eval_average_return")
    if eval_return is None:
        eval_return = _last_eval_return(run_dir)
    result: dict[str, Any] = {
        "name": name,
        "ckpt": "-",
        "iter": status.get("iteration"),
        "env_steps": status.get("env_steps"),
        "eval_return": _fmt_number(eval_return),
        "algo": "-",
        "buffer": "-",
        "tensors": "-",
        "progress": progress_digest(os.path.join(run_dir, "progress.jsonl")),
        "keys": [],
    }
    path = newest_checkpoint(run_dir)
    if path is not None:
        state = load_checkpoint(path)
        result["ckpt"] = os.path.splitext(os.path.basename(path))[0]
        result["keys"] = sorted(str(k) for k in state)
        algorithm = _find_key(state, "algorithm")
        if algorithm is not None:
            result["algo"], result["algo_tensors"] = ordered_digest(algorithm)
        buffer = _find_key(state, "replay_buffer")
        if buffer is not None:
            result["buffer"], result["buffer_tensors"] = ordered_digest(buffer)
        result["tensors"], result["num_tensors"] = unordered_digest(state)
    result["line"] = format_line(result)
    return result


def format_line(r: dict[str, Any]) -> str:
    """The printed line of a digest result."""
    return (
        f"{r['name']:<32} ckpt={r['ckpt']} iter={_fmt_number(r['iter'])} "
        f"env_steps={_fmt_number(r['env_steps'])} eval_return={r['eval_return']} "
        f"algo={r['algo']} buffer={r['buffer']} tensors={r['tensors']} "
        f"progress={r['progress']} keys={','.join(r['keys']) or '-'}"
    )


def default_checkout() -> str:
    """The directory holding the ``alf`` package this interpreter would import."""
    spec = importlib.util.find_spec("alf")
    if spec is None or not spec.origin:
        raise SystemExit("run_digest: alf is not importable; pass --checkout DIR")
    return os.path.dirname(os.path.dirname(os.path.abspath(spec.origin)))


def subprocess_env(checkout: str) -> dict[str, str]:
    """The environment of the training subprocesses: ``checkout`` first on the path,
    one thread everywhere, CPU only, no trackers."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = checkout + (os.pathsep + path if path else "")
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        PYTHONHASHSEED="0",
        CUDA_VISIBLE_DEVICES="",
        WANDB_MODE="disabled",
    )
    return env


def check_checkout(checkout: str, env: dict[str, str]) -> str:
    """Checks that a subprocess imports alf from ``checkout``; returns its ``__file__``."""
    out = subprocess.run(
        [sys.executable, "-c", "import alf; print(alf.__file__)"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    expected = os.path.join(os.path.realpath(checkout), "alf") + os.sep
    if not os.path.realpath(out).startswith(expected):
        raise SystemExit(f"run_digest: subprocesses import alf from {out}, not from {checkout}")
    return out


def _git(checkout: str, *args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", checkout, *args], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def train(
    spec: RunSpec,
    part: tuple[str, ...],
    run_dir: str,
    checkout: str,
    env: dict[str, str],
    seed: int,
) -> None:
    """Runs ``alf.bin.train`` for one part of ``spec`` into ``run_dir``."""
    conf = os.path.join(checkout, "alf", "examples", spec.conf)
    params = (*spec.params, *part, *_COMMON_PARAMS, f"TrainerConfig.random_seed={seed}")
    cmd = [sys.executable, "-m", "alf.bin.train", f"--conf={conf}", f"--root_dir={run_dir}"]
    cmd += [f"--conf_param={p}" for p in params]
    os.makedirs(run_dir, exist_ok=True)
    log_path = os.path.join(run_dir, "digest_train.log")
    with open(log_path, "a") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.run(cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        with open(log_path) as f:
            tail = "".join(f.readlines()[-30:])
        raise RuntimeError(f"{spec.name}: training failed (exit {proc.returncode}):\n{tail}")
    argv0 = str(_read_json(os.path.join(run_dir, "run_info.json")).get("argv", [""])[0])
    if argv0 and not os.path.realpath(argv0).startswith(os.path.realpath(checkout) + os.sep):
        raise RuntimeError(f"{spec.name}: trained with {argv0}, not the alf of {checkout}")


def run_spec(
    spec: RunSpec, run_dir: str, checkout: str, env: dict[str, str], seed: int
) -> list[dict[str, Any]]:
    """Trains every part of ``spec`` and returns the digests (one per part)."""
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    results = []
    for i, part in enumerate(spec.parts):
        train(spec, part, run_dir, checkout, env, seed)
        last = i == len(spec.parts) - 1
        name = spec.name if last else f"{spec.name}/part{i + 1}"
        if i > 0:
            resumes = _read_json(os.path.join(run_dir, "run_info.json")).get("resumes")
            if not resumes:
                raise RuntimeError(f"{spec.name}: part {i + 1} did not resume")
        results.append(digest_run_dir(name, run_dir))
    return results


def compare(results: list[dict[str, Any]], path: str) -> bool:
    """Prints how ``results`` differ from the JSON at ``path``; True if they match."""
    with open(path) as f:
        before = {r["name"]: r for r in json.load(f)["runs"]}
    same = True
    for r in results:
        old = before.get(r["name"])
        if old is None:
            print(f"compare: {r['name']}: not in {path}")
            same = False
            continue
        diffs = [
            f"{k}: {old.get(k)} -> {r.get(k)}" for k in COMPARED_FIELDS if old.get(k) != r.get(k)
        ]
        print(f"compare: {r['name']}: " + ("SAME" if not diffs else "DIFF " + "; ".join(diffs)))
        same = same and not diffs
    return same


def main(argv: list[str] | None = None) -> int:
    """Parses the flags, trains the runs and prints (and writes) the digest."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", help="also write the lines and fields as JSON to this file")
    parser.add_argument("--keep", help="directory for the run directories (default: temp)")
    parser.add_argument("--checkout", help="ALF checkout to train (default: importable alf)")
    parser.add_argument("--runs", help="comma-separated run names (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="TrainerConfig.random_seed")
    parser.add_argument("--compare", help="a JSON of --out to compare the digests with")
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    args = parser.parse_args(argv)

    if args.list:
        for spec in RUNS:
            print(f"{spec.name:<32} {spec.conf} {' '.join(spec.params)} parts={spec.parts}")
        return 0
    specs = list(RUNS)
    if args.runs:
        wanted = args.runs.split(",")
        unknown = sorted(set(wanted) - {s.name for s in RUNS})
        if unknown:
            parser.error(f"unknown runs: {', '.join(unknown)}")
        specs = [s for s in RUNS if s.name in wanted]

    checkout = os.path.realpath(args.checkout or default_checkout())
    env = subprocess_env(checkout)
    alf_file = check_checkout(checkout, env)
    revision = _git(checkout, "rev-parse", "HEAD")
    dirty = bool(_git(checkout, "status", "--porcelain", "--untracked-files=no"))
    print(
        f"# alf: {alf_file} (git {revision[:12] or '?'}{', dirty' if dirty else ''}); "
        f"torch {torch.__version__}; python {sys.version.split()[0]}",
        flush=True,
    )

    base = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="run_digest_")
    os.makedirs(base, exist_ok=True)
    results: list[dict[str, Any]] = []
    start = time.time()
    try:
        for spec in specs:
            tick = time.time()
            for result in run_spec(spec, os.path.join(base, spec.name), checkout, env, args.seed):
                results.append(result)
                print(result["line"], flush=True)
            print(f"#   ({spec.name}: {time.time() - tick:.0f}s)", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"# {len(results)} lines in {time.time() - start:.0f}s", file=sys.stderr)

    if args.out:
        data = {
            "alf_file": alf_file,
            "checkout": checkout,
            "git_revision": revision,
            "git_dirty": dirty,
            "torch": torch.__version__,
            "python": sys.version.split()[0],
            "seed": args.seed,
            "runs": results,
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    if args.compare:
        return 0 if compare(results, args.compare) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
