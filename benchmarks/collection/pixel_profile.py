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
   fragments, per environment step it consumes; ``learn_targets``: the part of it that
   APPO's ``target_log_prob_and_value`` takes (V-trace's log-probabilities and values of
   the whole trajectory, recomputed without gradients before the mini-batches);

and ``sampler``: the actor's collection loop without learning, the actor's own
``SyncUnroller.collect()`` with the config's policy followed by ``FragmentPool.write``
of the fragment, with its per-step breakdown (the environment's ``step_async`` +
``step_wait``, ``explore_step``, the write, and the rest: the unroller's bookkeeping).
The sampler's rate is compared with ``raw``'s (the issue's target: >= 50%).

6. ``queueing``: a short real asynchronous run, ``python -m alf.bin.train
   --conf=alf/examples/appo_pong.gin`` with a small ``num_env_steps`` (evaluation off,
   a summary every iteration), whose ``progress.jsonl`` gives the learner's wait share,
   the policy lag and the env steps/s of the whole run.

Another APPO config is profiled the same way with ``--conf``; for a VizDoom scenario
(``suite_gym.load.preset = "vizdoom"``, e.g. ``alf/examples/appo_doom_basic.gin``), which
EnvPool lacks, ``raw`` steps the preset's environments (frame skip, resize: what Sample
Factory's rollout workers step) one after another in the worker.

Usage (about 7 minutes on a loaded 2-core machine, half of it the training run;
``--quick`` about 4, ``--train_steps 0`` leaves the run out)::

    python benchmarks/collection/pixel_profile.py
    python -m benchmarks.collection.pixel_profile --rounds 3 --train_steps 0 --quick
    python benchmarks/collection/pixel_profile.py --conf=alf/examples/appo_doom_basic.gin
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.collection.pixel_profile_report import queue_summary, report  # noqa: E402
from benchmarks.common import (  # noqa: E402
    WorkerError,
    emit_result,
    machine_info,
    run_logged,
    run_worker,
    uptime,
    write_report,
)

SCRIPT = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(SCRIPT)))
CONF = "alf/examples/appo_pong.gin"
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
        "preset": _bound("suite_gym.load.preset", "atari"),
        "num_envs": num_envs,
        "num_actors": num_actors,
        "envs_per_actor": num_envs // num_actors,
        "unroll_length": int(config.unroll_length),
        "fragments_per_iteration": int(_bound("AsyncUnroller.fragments_per_iteration", 1)),
        "num_buffers": int(_bound("AsyncUnroller.num_buffers", 0) or 2 * num_actors),
    }


class _RawVizdoom:
    """``num_envs`` VizDoom environments with the preset's frame skip and resize (what
    Sample Factory's rollout workers step), one after another in this process, each
    reset at the end of its episode; EnvPool has no VizDoom."""

    def __init__(self, env_name: str, num_envs: int) -> None:
        from alf.environments.vizdoom import VizdoomPreset

        self.envs = [VizdoomPreset().make(env_name, training=True) for _ in range(num_envs)]
        for i, env in enumerate(self.envs):
            env.reset(seed=i)
        self.config = {"num_threads": None}  # no thread pool

    def step(self, actions: Any) -> None:
        """One step of every environment with its action of ``actions``."""
        for env, action in zip(self.envs, actions, strict=True):
            _, _, terminated, truncated, _ = env.step(int(action))
            if terminated or truncated:
                env.reset()

    def close(self) -> None:
        """Closes the environments."""
        for env in self.envs:
            env.close()


def _raw_pool(env_name: str, num_envs: int, preset_name: str) -> Any:
    """The environments without ALF: EnvPool's Atari pool with the preset's options (as
    ALF's envpool backend makes it, EnvPool's default thread count), or for a VizDoom
    scenario (``preset_name`` "vizdoom") the preset's environments stepped in turn; seed
    0, reset."""
    if preset_name == "vizdoom":
        return _RawVizdoom(env_name, num_envs)
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
        self.raw = _raw_pool(s["env_name"], n, s["preset"])
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
        self.target_sink: list[float] = []  # APPO's recompute of log-probs and values
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
        recompute = getattr(self.learner, "target_log_prob_and_value", None)
        if recompute is not None:  # APPO: V-trace's forward without gradients
            self.learner.target_log_prob_and_value = timed(recompute, self.target_sink)

    # Each contender returns the environment steps its call stands for.
    def raw_steps(self) -> int:
        """``length`` raw steps of the batch (EnvPool, or the VizDoom environments)."""
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
    times["learn_targets"] = []  # the part of ``learn`` that recomputes V-trace's inputs
    breakdown: dict[str, list[float]] = {"env": [], "policy": [], "write": [], "other": []}
    for r in range(args.rounds):
        names = [k for k in contenders if k != "learn" or r < args.learn_rounds]
        loads = os.getloadavg()[0]
        for name in names if r % 2 == 0 else names[::-1]:
            for sink in (*bench.sinks.values(), bench.target_sink):
                sink.clear()
            start = time.perf_counter()
            steps = contenders[name]()
            elapsed = time.perf_counter() - start
            if not steps:
                continue
            times[name].append(elapsed / steps * 1e6)
            if name == "learn" and bench.target_sink:
                times["learn_targets"].append(sum(bench.target_sink) / steps * 1e6)
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
        envpool_env = getattr(bench.env, "envpool_env", None)  # None: another backend
        threads = {"raw": bench.raw.config["num_threads"],
                   "alf": envpool_env.config["num_threads"] if envpool_env else None}
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
