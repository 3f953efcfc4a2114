r"""Benchmark: where an APPO Pong iteration's time goes, and the sampler against raw EnvPool.

With ``alf/examples/appo_pong.gin``'s settings (EnvPool ``PongNoFrameskip-v4`` with the
Atari preset, ``num_parallel_environments / AsyncUnroller.num_actors`` environments per
actor, ``unroll_length``-step fragments, ``FrameStacker`` of 4 and ``ImageScale``, the
Nature-DQN actor and value networks), one worker process (1 torch thread, 1 BLAS thread,
as an actor and as the config's learner run) measures, in alternating rounds (the order
reversed every round), microseconds per environment step of:

1. ``raw``: EnvPool's own ``step`` with numpy actions, no ALF (the same env count and
   EnvPool thread count as ALF's ``envpool`` backend, whose default is EnvPool's own);
2. ``alf env``: ALF's environment (``create_environment`` with the config) ``step``;
3. ``policy``: the actor's policy forward, ``Policy.explore_step`` on a time step of the
   actor's batch, inside ``Policy.session()`` and under ``no_grad`` (as
   ``SyncUnroller.unroll`` runs it): frame stacking, scaling, both networks, sampling;
   ``actor_net``: the actor network alone with a draw (APPO recomputes the values in
   training, so the actor's value forward is not needed);
4. ``write``: ``FragmentPool.write`` of one fragment into the shared-memory buffers (and
   ``read``, the learner's copy out of them), per environment step of the fragment;
5. ``learn``: the learner's ``algorithm.learn`` (V-trace, 4 epochs of mini-batches,
   forward, backward, Adam) on a trajectory of ``fragments_per_iteration`` collected
   fragments, per environment step it consumes;

and ``sampler``: the actor's collection loop without learning, the actor's own
``SyncUnroller.collect()`` with the config's policy followed by ``FragmentPool.write``
of the fragment, with its per-step breakdown (the environment's ``step_async`` +
``step_wait``, ``explore_step``, the write, and the rest: the unroller's bookkeeping).
The sampler's rate is compared with ``raw``'s (the issue's target: >= 50%).

6. ``queueing``: a short real asynchronous run, ``python -m alf.bin.train
   --conf=alf/examples/appo_pong.gin`` with a small ``num_env_steps`` (evaluation off,
   a summary every iteration), whose ``progress.jsonl`` gives the learner's wait share,
   the policy lag and the env steps/s of the whole run.

Usage (about 7 minutes on a loaded 2-core machine, half of it the training run;
``--quick`` about 4, ``--train_steps 0`` leaves the run out)::

    python benchmarks/collection/pixel_profile.py
    python -m benchmarks.collection.pixel_profile --rounds 3 --train_steps 0 --quick
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import (  # noqa: E402
    WorkerError,
    emit_result,
    format_table,
    machine_info,
    run_logged,
    run_worker,
    uptime,
    write_report,
)

SCRIPT = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(SCRIPT)))
CONF = "alf/examples/appo_pong.gin"
TARGET = 0.5
"""The issue's target: the sampler at >= 50% of raw EnvPool's steps/s."""

LABELS: dict[str, str] = {
    "raw": "1. raw EnvPool step (numpy, no ALF)",
    "alf_env": "2. ALF env step (envpool backend)",
    "policy": "3. actor policy forward (explore_step)",
    "actor_net": "3b. the actor network alone (no value net)",
    "write": "4. frame copy into shared memory (write)",
    "read": "4b. learner's copy out of it (read)",
    "learn": "5. learner: learn() on one batch",
    "sampler": "sampler: collect() + write",
}
"""Contender key -> row label of the report."""


# ----------------------------------------------------------------- pure helpers
def summarize(times: Mapping[str, Sequence[float]]) -> dict[str, dict[str, float]]:
    """Min, median and max of each contender's per-round values (microseconds per step).

    Args:
        times: contender -> one value per round.

    Returns:
        contender -> ``{"min", "median", "max", "rounds"}`` (contenders without values
        are left out).
    """
    return {
        name: {"min": min(v), "median": statistics.median(v), "max": max(v), "rounds": len(v)}
        for name, v in times.items()
        if v
    }


def round_ratios(raw: Sequence[float], sampler: Sequence[float]) -> list[float]:
    """Raw EnvPool's steps/s over the sampler's, per round: ``sampler_us / raw_us`` is
    the sampler's rate as a fraction of raw's (``raw_us / sampler_us``)."""
    return [r / s for r, s in zip(raw, sampler, strict=True) if s > 0]


def shares(parts: Mapping[str, float]) -> dict[str, float]:
    """Each part's fraction of the parts' sum (all zeros for an empty or zero sum)."""
    total = sum(parts.values())
    return {name: (value / total if total > 0 else 0.0) for name, value in parts.items()}


def iteration_parts(
    medians: Mapping[str, float], breakdown: Mapping[str, float]
) -> dict[str, float]:
    """The CPU work of one environment step of APPO, in microseconds: the actor's
    environment step, policy forward, fragment write and collector bookkeeping (from the
    sampler's breakdown), and the learner's copy-out and ``learn``.

    Args:
        medians: contender -> median microseconds per step (``read`` and ``learn`` used).
        breakdown: the sampler's median breakdown (``env``, ``policy``, ``write``,
            ``other``).
    """
    return {
        "actor: env step (ALF)": breakdown.get("env", 0.0),
        "actor: policy forward": breakdown.get("policy", 0.0),
        "actor: frame copy (write)": breakdown.get("write", 0.0),
        "actor: collector bookkeeping": breakdown.get("other", 0.0),
        "learner: copy out (read)": medians.get("read", 0.0),
        "learner: learn (fwd/bwd/Adam)": medians.get("learn", 0.0),
    }


def queue_summary(records: Sequence[Mapping[str, Any]], skip: int = 1) -> dict[str, float]:
    """The async statistics of a run's ``progress.jsonl`` training records.

    Args:
        records: the records in order (evaluation records are skipped: they have no
            ``async/`` keys).
        skip: leading training records to leave out (start-up).

    Returns:
        Means of ``async/learner_wait_fraction``, ``async/policy_lag_mean``,
        ``async/queue_depth`` and ``async/actor_env_steps_per_second`` over the kept
        records, their count, and the env steps/s between the first and last kept ones
        (empty if fewer than two records carry async statistics).
    """
    rows = [_async_keys(r) for r in records]
    rows = [r for r in rows if "async/learner_wait_fraction" in r][skip:]
    if len(rows) < 2:
        return {}
    out: dict[str, float] = {"records": float(len(rows))}
    for key in ("learner_wait_fraction", "policy_lag_mean", "queue_depth",
                "actor_env_steps_per_second"):
        values = [float(r[f"async/{key}"]) for r in rows if f"async/{key}" in r]
        if values:
            out[key] = statistics.fmean(values)
    first, last = rows[0], rows[-1]
    seconds = float(last.get("elapsed_s", 0)) - float(first.get("elapsed_s", 0))
    if seconds > 0:
        out["env_steps_per_s"] = (float(last["env_steps"]) - float(first["env_steps"])) / seconds
    return out


def _async_keys(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with each ``.../async/name`` key (``train/async/name`` in
    ``progress.jsonl``) shortened to ``async/name``."""
    return {**record, **{k[k.index("async/"):]: v for k, v in record.items() if "async/" in k}}


# ----------------------------------------------------------------- the worker
def _bound(name: str, default: Any) -> Any:
    """The config's value of gin binding ``name`` (``default`` when it is not bound)."""
    import gin

    try:
        return gin.query_parameter(name)
    except ValueError:
        return default


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """Loads ``args.conf`` (with ``args.conf_param``) and returns the settings the
    profile copies from it."""
    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.trainers.trainer_config import TrainerConfig

    import_configurables()
    alf_config.load_config(args.conf, list(args.conf_param))
    config = TrainerConfig()
    num_envs = int(_bound("create_environment.num_parallel_environments", 1))
    num_actors = int(_bound("AsyncUnroller.num_actors", 2))
    return {
        "config": config,
        "env_name": _bound("create_environment.env_name", "PongNoFrameskip-v4"),
        "num_envs": num_envs,
        "num_actors": num_actors,
        "envs_per_actor": num_envs // num_actors,
        "unroll_length": int(config.unroll_length),
        "fragments_per_iteration": int(_bound("AsyncUnroller.fragments_per_iteration", 1)),
        "num_buffers": int(_bound("AsyncUnroller.num_buffers", 0) or 2 * num_actors),
    }


def _raw_pool(env_name: str, num_envs: int) -> Any:
    """EnvPool's Atari pool with the preset's options (as ALF's envpool backend makes it,
    EnvPool's default thread count), seed 0, reset."""
    import envpool

    from alf.environments.atari import AtariPreset, envpool_atari_id

    preset = AtariPreset()
    pool = envpool.make(envpool_atari_id(env_name), env_type="gymnasium", num_envs=num_envs,
                        seed=0, max_episode_steps=preset.max_episode_steps,
                        **preset.envpool_kwargs(training=True))
    pool.reset()
    return pool


class _Bench:
    """What the contenders step: raw pool, ALF env, the actor's collector and policy,
    the shared-memory fragment pool and the learner."""

    def __init__(self, s: dict[str, Any], closers: list[Any]) -> None:
        import functools

        import numpy as np
        import torch

        from alf.algorithms.policy import Policy
        from alf.environments import create_environment
        from alf.trainers.algorithm_builder import algorithm_factory, build_algorithm
        from alf.trainers.collection import learning_setup
        from alf.trainers.data_parallel import Ranks
        from alf.unrollers import SyncUnroller
        from alf.unrollers.shared_memory import FragmentPool

        config, n, length = s["config"], s["envs_per_actor"], s["unroll_length"]
        self.n, self.length, self.fragments = n, length, s["fragments_per_iteration"]
        self.raw = _raw_pool(s["env_name"], n)
        closers.append(self.raw)
        # The actor's environment factory (AsyncUnroller's), the same seeds for both.
        make_env = functools.partial(create_environment,
                                     drop_nonfinite=config.drops_nonfinite_episodes)
        self.env = make_env(num_parallel_environments=n, seed=0)
        closers.append(self.env)
        collector_env = make_env(num_parallel_environments=n, seed=0)
        closers.append(collector_env)
        num_actions = self.env.action_spec().num_actions
        rng = np.random.default_rng(0)
        self.np_actions = rng.integers(0, num_actions, (256, n)).astype(np.int32)
        self.actions = torch.as_tensor(self.np_actions)
        torch.manual_seed(0)
        actor_algorithm = algorithm_factory(config)(
            observation_spec=self.env.observation_spec(), action_spec=self.env.action_spec())
        self.policy = Policy(algorithm=actor_algorithm.eval())
        self.collector = SyncUnroller(env=collector_env, policy=self.policy, unroll_length=length)
        self.time_step = self.env.reset()
        self.state = self.policy.initial_state(n, greedy=False)
        with torch.no_grad(), self.policy.session():  # stacked, scaled, as the networks see it
            self.observation = self.policy._prepare(self.time_step, self.state)[0].observation
        self.learner = build_algorithm(config, self.env)
        self.learner.prepare_learning(learning_setup(
            config, num_envs=s["num_envs"], ranks=Ranks(context=None, async_collection=True)))
        self.learner.set_progress(0.0)
        self.learner.record_statistics = False
        self.pool = FragmentPool(spec=self.learner.experience_spec(), num_buffers=s["num_buffers"],
                                 length=self.policy.history_length + length + 1, batch_size=n)
        self.sinks: dict[str, list[float]] = {"env": [], "policy": [], "write": []}
        self._instrument()
        self.segments: list[Any] = []
        self.version = 0
        for _ in range(self.fragments):  # the learner's first batch (and a warm-up)
            self.sampler()

    def _instrument(self) -> None:
        """Times the collector's environment calls and policy steps into :attr:`sinks`."""
        from benchmarks.collection.collection_common import timed

        env = self.collector.env
        for name in ("step_async", "step_wait") if env.steps_in_background else ("step",):
            setattr(env, name, timed(getattr(env, name), self.sinks["env"]))
        self.policy.explore_step = timed(self.policy.explore_step, self.sinks["policy"])

    # Each contender returns the environment steps its call stands for.
    def raw_steps(self) -> int:
        """``length`` raw EnvPool steps of the batch."""
        for i in range(self.length):
            self.raw.step(self.np_actions[i % 256])
        return self.length * self.n

    def alf_env_steps(self) -> int:
        """``length`` steps of ALF's environment."""
        for i in range(self.length):
            self.env.step(self.actions[i % 256])
        return self.length * self.n

    def policy_steps(self, calls: int) -> int:
        """``calls`` policy forwards on one time step of the actor's batch."""
        import torch

        with torch.no_grad(), self.policy.session():
            for _ in range(calls):
                self.policy.explore_step(self.time_step, self.state)
        return calls * self.n

    def actor_net_steps(self, calls: int) -> int:
        """``calls`` forwards of the actor network alone, with a draw: what collecting
        would cost if it skipped the value network (APPO recomputes the values)."""
        import torch

        network = getattr(self.policy.algorithm, "actor_network", None)
        if not isinstance(network, torch.nn.Module):  # a shared torso: nothing to skip
            return 0
        with torch.no_grad():
            for _ in range(calls):
                network(self.observation).sample()
        return calls * self.n

    def writes(self, calls: int) -> int:
        """``calls`` fragment writes into buffer 0 (new steps of a fragment counted)."""
        exp = self.segments[-1].exp
        for _ in range(calls):
            self.pool.write(0, exp)
        return calls * self.length * self.n

    def reads(self, calls: int) -> int:
        """``calls`` copies of buffer 0 out of shared memory."""
        for _ in range(calls):
            self.pool.read(0)
        return calls * self.length * self.n

    def sampler(self) -> int:
        """The actor's loop body: one fragment collected and written to shared memory
        (the write's time goes to ``sinks["write"]``)."""
        from alf.unrollers.async_unroller import Fragment

        (segment,) = self.collector.collect()
        buffer = self.version % self.pool.num_buffers
        tick = time.perf_counter()
        self.pool.write(buffer, segment.exp)
        self.sinks["write"].append(time.perf_counter() - tick)
        # Fragments as the learner receives them: actor k's env ids offset by k * n.
        actor = self.version % self.fragments
        exp = segment.exp._replace(env_id=segment.exp.env_id + actor * self.n)
        self.segments = [*self.segments, Fragment(exp=exp, num_old_rows=segment.num_old_rows,
                                                  actor_id=actor, version=self.version)]
        self.segments = self.segments[-self.fragments:]
        self.version += 1
        return self.length * self.n

    def learn(self) -> int:
        """One training iteration of the learner on the newest fragments."""
        from alf.data_structures import Trajectory

        steps = self.length * self.n * len(self.segments)
        self.learner.learn(Trajectory(segments=tuple(self.segments), env_steps=steps))
        return steps


def _rounds(bench: _Bench, args: argparse.Namespace) -> tuple[dict[str, list[float]], dict]:
    """Runs the alternating rounds; returns contender -> microseconds per env step per
    round, and the sampler's breakdown per round (microseconds per env step)."""
    contenders: dict[str, Callable[[], int]] = {
        "raw": bench.raw_steps,
        "sampler": bench.sampler,
        "alf_env": bench.alf_env_steps,
        "policy": lambda: bench.policy_steps(args.policy_calls),
        "actor_net": lambda: bench.actor_net_steps(args.policy_calls),
        "write": lambda: bench.writes(args.copies),
        "read": lambda: bench.reads(args.copies),
        "learn": bench.learn,
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    breakdown: dict[str, list[float]] = {"env": [], "policy": [], "write": [], "other": []}
    for r in range(args.rounds):
        names = [k for k in contenders if k != "learn" or r < args.learn_rounds]
        loads = os.getloadavg()[0]
        for name in names if r % 2 == 0 else names[::-1]:
            for sink in bench.sinks.values():
                sink.clear()
            start = time.perf_counter()
            steps = contenders[name]()
            elapsed = time.perf_counter() - start
            if not steps:
                continue
            times[name].append(elapsed / steps * 1e6)
            if name == "sampler":
                parts = {k: sum(v) / steps * 1e6 for k, v in bench.sinks.items()}
                parts["other"] = elapsed / steps * 1e6 - sum(parts.values())
                for k, v in parts.items():
                    breakdown[k].append(v)
        line = ", ".join(f"{k} {v[-1]:.0f}" for k, v in times.items() if len(v) > r)
        print(f"round {r + 1}/{args.rounds} (load {loads:.1f}): us/step {line}",
              file=sys.stderr, flush=True)
    return times, breakdown


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """The in-process measurements (items 1-5 and the sampler), in one process."""
    from benchmarks.collection.collection_common import quiet_warnings

    quiet_warnings()
    import torch

    from alf.utils.threads import set_cpu_threads

    set_cpu_threads(1)  # torch's and numpy's BLAS threads, as an actor and this learner
    s = _settings(args)
    closers: list[Any] = []
    try:
        built = time.perf_counter()
        bench = _Bench(s, closers)
        build_s = time.perf_counter() - built
        times, breakdown = _rounds(bench, args)
        threads = {"raw": bench.raw.config["num_threads"],
                   "alf": bench.env.envpool_env.config["num_threads"]}
    finally:
        for c in closers:
            c.close()
    return {
        "settings": {k: v for k, v in s.items() if k != "config"},
        "envpool_num_threads": threads,
        "torch_num_threads": torch.get_num_threads(),
        "build_s": build_s,
        "times_us": times,
        "breakdown_us": breakdown,
    }


# ----------------------------------------------------------------- the training run
def train_run(args: argparse.Namespace) -> dict[str, Any]:
    """A short real ``alf.bin.train`` run of the config (item 6): its async statistics."""
    from alf.run_dir import layout

    root = tempfile.mkdtemp(prefix="pixel_profile_")
    params = [*args.conf_param, f"TrainerConfig.num_env_steps={args.train_steps}",
              "TrainerConfig.summary_interval=1", "TrainerConfig.evaluate=False"]
    cmd = [sys.executable, "-m", "alf.bin.train", f"--conf={args.conf}", f"--root_dir={root}",
           *(f"--conf_param={p}" for p in params)]
    log = os.path.join(root, "train.log")
    load = uptime()
    rc, wall_s = run_logged(cmd, log=Path(log), cwd=Path(REPO), timeout_s=args.train_timeout_s)
    records = layout.read_progress(root)
    result: dict[str, Any] = {"rc": rc, "wall_s": wall_s, "root_dir": root, "uptime": load,
                              "summary": queue_summary(records, skip=args.train_skip),
                              "num_records": len(records)}
    if records:
        keys = ("iteration", "env_steps", "elapsed_s", "train_time_s")
        result["last"] = {k: records[-1].get(k) for k in keys}
    if rc != 0 or not result["summary"]:
        with open(log) as f:
            result["log_tail"] = f.read()[-3000:]
    if not args.keep_run_dir:
        shutil.rmtree(root, ignore_errors=True)
    return result


# ----------------------------------------------------------------- the report
def _us(value: float) -> str:  # microseconds: whole above 10, else one decimal
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def report(results: dict[str, Any]) -> str:
    """The plain-text report of a run: contenders, the iteration's shares, the sampler
    against raw EnvPool, and the training run's queueing."""
    m = results["machine"]
    lines = [f"machine: {m['nproc']} CPUs ({m['cpu_model']})", f"start: {results['uptime_start']}"]
    w = results.get("worker")
    if w is None:
        lines.append(f"in-process worker failed: {results.get('worker_error')}")
    else:
        s = w["settings"]
        lines.append(
            f"{s['env_name']}, {s['envs_per_actor']} envs per actor ({s['num_envs']} over "
            f"{s['num_actors']} actors), fragments of {s['unroll_length']} steps, "
            f"{s['fragments_per_iteration']} per iteration; EnvPool num_threads raw "
            f"{w['envpool_num_threads']['raw']} / ALF {w['envpool_num_threads']['alf']} "
            f"(0: EnvPool's default); torch threads {w['torch_num_threads']}")
        lines += ["", *_contender_lines(w)]
    t = results.get("train")
    if t is not None:
        lines += ["", *_train_lines(t)]
    lines.append(f"end: {results['uptime_end']}")
    return "\n".join(lines)


def _contender_lines(w: dict[str, Any]) -> list[str]:
    """The worker's tables."""
    stats = summarize(w["times_us"])
    rows = [[LABELS[k], _us(v["min"]), _us(v["median"]), _us(v["max"]), v["rounds"]]
            for k, v in stats.items()]
    out = ["us per env step (per round: min / median / max)",
           format_table(["contender", "min", "median", "max", "rounds"], rows)]
    medians = {k: v["median"] for k, v in stats.items()}
    parts_med = {k: statistics.median(v) for k, v in w["breakdown_us"].items() if v}
    parts = iteration_parts(medians, parts_med)
    fraction = shares(parts)
    out += ["", "one APPO env step's CPU work (median us; share of their sum)",
            format_table(["part", "us/step", "share"],
                         [[k, _us(v), f"{100 * fraction[k]:.1f}%"] for k, v in parts.items()]
                         + [["sum", _us(sum(parts.values())), "100%"]])]
    ratios = round_ratios(w["times_us"]["raw"], w["times_us"]["sampler"])
    raw, sampler = medians["raw"], medians["sampler"]
    met = "met" if statistics.median(ratios) >= TARGET else "NOT met"
    out += ["", "sampler alone vs raw EnvPool (same envs, alternating rounds)",
            format_table(
                ["", "us/step", "steps/s"],
                [["raw EnvPool", _us(raw), f"{1e6 / raw:,.0f}"],
                 ["sampler (collect + write)", _us(sampler), f"{1e6 / sampler:,.0f}"]]),
            "sampler / raw per round: " + ", ".join(f"{100 * r:.1f}%" for r in ratios)
            + f"; median {100 * statistics.median(ratios):.1f}% (target >= "
            f"{100 * TARGET:.0f}%: {met})"]
    return out


def _train_lines(t: dict[str, Any]) -> list[str]:
    """The training run's queueing lines."""
    out = [f"training run (alf.bin.train, {t.get('last', {}).get('env_steps')} env steps, "
           f"exit {t['rc']}, {t['wall_s']:.0f} s wall; {t['uptime']})"]
    q = t["summary"]
    if not q:
        return [*out, "no async statistics recorded; log tail:", t.get("log_tail", "")]
    rows = [["learner waiting for fragments", f"{100 * q.get('learner_wait_fraction', 0):.1f}%"],
            ["policy lag (mean)", f"{q.get('policy_lag_mean', float('nan')):.2f}"],
            ["fragments queued (mean)", f"{q.get('queue_depth', float('nan')):.2f}"],
            ["actors' env steps/s (sum of latest)",
             f"{q.get('actor_env_steps_per_second', float('nan')):,.0f}"],
            ["run env steps/s", f"{q.get('env_steps_per_s', float('nan')):,.0f}"],
            ["summaries averaged", f"{q['records']:.0f}"]]
    return [*out, format_table(["statistic", "value"], rows)]


# ----------------------------------------------------------------- main
def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conf", default=CONF, help="the APPO config (default %(default)s)")
    p.add_argument("--conf_param", action="append", default=[], help="extra gin binding")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (5)")
    p.add_argument("--learn_rounds", type=int, default=2,
                   help="rounds that include the learner's iteration (2; it is long)")
    p.add_argument("--policy_calls", type=int, default=64, help="policy forwards per round")
    p.add_argument("--copies", type=int, default=20, help="fragment writes / reads per round")
    p.add_argument("--train_steps", type=int, default=4096,
                   help="env steps of the training run (0: skip it)")
    p.add_argument("--train_skip", type=int, default=1,
                   help="leading summaries of the training run left out")
    p.add_argument("--train_timeout_s", type=float, default=480.0)
    p.add_argument("--keep_run_dir", action="store_true",
                   help="keep the training run's directory (removed by default)")
    p.add_argument("--quick", action="store_true",
                   help="3 rounds, 1 with the learner, 32 policy calls, a 3-iteration run")
    p.add_argument("--json", help="also write the raw numbers to this file")
    p.add_argument("--worker_timeout_s", type=float, default=900.0)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.learn_rounds, args.policy_calls = 3, 1, 32
        args.train_steps = min(args.train_steps, 3072) if args.train_steps else 0
    return args


def _worker_argv(args: argparse.Namespace) -> list[str]:
    argv = [SCRIPT, "--worker", "--conf", args.conf, "--rounds", str(args.rounds),
            "--learn_rounds", str(args.learn_rounds), "--policy_calls", str(args.policy_calls),
            "--copies", str(args.copies)]
    for param in args.conf_param:
        argv += ["--conf_param", param]
    return argv


def main(argv: list[str] | None = None) -> int:
    """Runs the worker, then the training run, and prints the report."""
    args = _parse_args(argv)
    if args.worker:
        emit_result(worker(args))
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    results: dict[str, Any] = {"benchmark": "pixel_profile", "uptime_start": uptime(),
                               "machine": machine_info(("torch", "numpy", "envpool", "ale-py")),
                               "settings": {k: v for k, v in vars(args).items() if k != "worker"}}
    print(results["uptime_start"], flush=True)
    failed = False
    try:
        results["worker"] = run_worker(_worker_argv(args), timeout_s=args.worker_timeout_s,
                                       verbose=True)
    except WorkerError as err:
        results["worker_error"], failed = str(err), True
    print(uptime(), flush=True)
    if args.train_steps:
        print(f"training run of {args.train_steps} env steps ...", flush=True)
        results["train"] = train_run(args)
        failed = failed or results["train"]["rc"] != 0
    results["uptime_end"] = uptime()
    write_report(results, report(results), args.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
