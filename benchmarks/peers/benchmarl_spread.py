"""BenchMARL's IPPO on PettingZoo MPE ``simple_spread_v3``: the peer of ALF's
``alf/examples/ppo_simple_spread.gin`` (issue 33).

Trains BenchMARL 1.5.2 (TorchRL 0.11.1) IPPO with one policy and one critic shared by the
3 agents (``share_policy_params``, ``share_param_critic``; each agent acts and is valued
on its own observation, as ALF's shared PPO) on ``mpe2.simple_spread_v3`` (N=3,
local_ratio 0.5, 25-step episodes, Discrete(5) actions) for a budget of agent-steps and
one seed per run, and writes its evaluations as CSV: the return per agent per episode
(each agent's episode return, the mean over the 3 agents and the evaluation episodes)
against agent-steps (= BenchMARL's frames x 3; ALF counts agent-steps as env steps).

Hyperparameters, as ``ppo_simple_spread.gin`` sets them:

=============================  ==========================  ==============================
ALF                            value                       BenchMARL
=============================  ==========================  ==============================
num_parallel_environments      48 rows = 16 games          on_policy_n_envs_per_worker 16
unroll_length                  25 (1,200 agent-steps)      collected_frames_per_batch 400
num_epochs / mini_batch_size   10 / 400 agent-steps        n_minibatch_iters 10 /
                                                           minibatch_size 134 frames (402)
learning_rate                  7e-4 linear to 0            7e-4, set before each update
                                                           by a callback, linear to 0
gamma / gae_lambda / clip      0.99 / 0.95 / 0.2           gamma / lmbda / clip_epsilon
entropy / value coef           0.01 / 0.5 (squared error)  entropy_coef / critic_coef, l2
max_grad_norm                  10                          clip_grad_norm, clip_grad_val 10
advantages                     normalised per mini-batch   ClipPPOLoss.normalize_advantage
                                                           set True by a callback
Adam eps                       1e-5                        adam_eps 1e-5
networks                       actor, critic: 2x64 tanh    MlpConfig [64, 64], Tanh
evaluation                     every 50 iterations, 96     every 20,000 frames (50
                               agent-episodes, greedy      iterations), 32 games x 3
                                                           agents, deterministic actions
torch threads                  1                           torch.set_num_threads(1)
=============================  ==========================  ==============================

Why IPPO: ALF's shared PPO gives each agent's critic that agent's own observation, which
is IPPO (with shared parameters); BenchMARL's MAPPO gives the critic all agents'
observations (a centralised critic), a different algorithm. ``--algorithm=mappo`` runs
MAPPO with the same settings, for the comparison with that one.

Differences left: BenchMARL steps its actor and its critic with two Adam optimizers,
each clipped to norm 10 (ALF: one optimizer over both); its evaluation plays its 32 games
one after another (ALF: 16 at a time); network initialisation differs.

Why not BenchMARL's own PettingZoo task: with PettingZoo 1.27 (the version ALF's
``[multiagent]`` extra installs), ``pettingzoo.mpe`` only raises ``ImportError: MPE has
been moved into its own package: MPE2``; TorchRL 0.11.1's ``PettingZooEnv(task=...)``
looks tasks up there (catching only ``ModuleNotFoundError``) and fails. This script keeps
BenchMARL's ``PettingZooClass`` task (specs, groups, ``max_cycles``) and builds each game
with TorchRL's ``PettingZooWrapper`` around ``mpe2.simple_spread_v3.parallel_env(...)``:
the same game ALF trains on.

BenchMARL runs from its own virtual environment (``--venv``), which this script builds on
first use: ``torch==2.13.0`` (the CPU build ALF runs with) first, then ``benchmarl``,
``torchrl``, ``tensordict``, ``pettingzoo``, ``mpe2`` at the pinned versions. BenchMARL
requires ``torchvision``, which resolves to a CUDA build whose operators do not load with
the CPU torch; nothing on this path imports it, so the script uninstalls it. Never
install these into ALF's environment.

Usage::

    python benchmarks/peers/benchmarl_spread.py --seeds 0,1,2 --agent_steps 2000000 \\
        --out /tmp/benchmarl_spread            # the full comparison: 3 seeds x 2M
    python benchmarks/peers/benchmarl_spread.py --seeds 0 --agent_steps 24000 \\
        --eval_every_iterations 5 --out /tmp/bm_smoke   # smoke run (~1-2 minutes)

Re-running the same command resumes: finished seeds (with ``run.json``) are skipped, and a
killed run continues from its last checkpoint (one after every evaluation, the last two
kept; BenchMARL's checkpoint plus the two Adam optimizers' states and the wall clock, which
the script adds; the random generators restart from the seed). Evaluation rows written
after that checkpoint are dropped.

Each seed writes ``<out>/seed-<s>/evaluations.csv`` (``agent_steps, frames, iteration,
return_per_agent, return_std, episodes, wall_s``) and ``run.json`` (settings, versions,
wall time); the parent prints a summary with ``uptime`` before and after each run. Once a
seed has finished, the parent also writes its evaluations as an ALF run directory there
(``progress.jsonl``, ``run_info.json``, ``status.json``; framework ``benchmarl``), so
``python -m alf.bin.plot <out> <ALF runs>`` draws both frameworks on one plot and
``alf.bin.report`` tabulates both.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import format_table, machine_info, uptime  # noqa: E402
from benchmarks.peers.benchmarl_results import report, write_alf_format  # noqa: E402

DEFAULT_VENV = "/work/peer_venvs/benchmarl"
TORCH = "torch==2.13.0"
PACKAGES = (
    "benchmarl==1.5.2",
    "torchrl==0.11.1",
    "tensordict==0.11.0",
    "pettingzoo==1.27.0",
    "mpe2==1.1.1",
)

NUM_AGENTS = 3
MAX_CYCLES = 25
GAMES = 16  # ALF: 48 rows / 3 agents
FRAMES_PER_BATCH = GAMES * MAX_CYCLES  # ALF: unroll_length 25 x 16 games
EPOCHS = 10
MINIBATCH_FRAMES = 134  # 402 agent-steps; ceil(400 / 134) = 3 mini-batches per epoch
LEARNING_RATE = 7e-4
EVAL_GAMES = 32  # ALF: 96 agent-episodes = 32 games


# --------------------------------------------------------------------------- venv


def ensure_venv(venv: str) -> str:
    """The python of ``venv``, building the venv first if BenchMARL does not import there."""
    python = os.path.join(venv, "bin", "python")
    check = "import benchmarl, torchrl, tensordict, pettingzoo, mpe2, torch"
    if (
        os.path.exists(python)
        and subprocess.run([python, "-c", check], capture_output=True, check=False).returncode == 0
    ):
        return python
    print(f"building BenchMARL's virtual environment in {venv} (a few minutes)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [python, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TORCH], check=True)
    subprocess.run([*pip, TORCH, *PACKAGES], check=True)
    subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", "torchvision"], check=False)
    subprocess.run([python, "-c", check], check=True)
    return python


# --------------------------------------------------------------------------- inside the venv


def _by_name(cls: type) -> type:
    """``cls`` (defined in a function, as it needs BenchMARL) made findable by its name
    at this module's top level: BenchMARL pickles the task and the callbacks into its run
    folder."""
    cls.__qualname__ = cls.__name__
    globals()[cls.__name__] = cls
    return cls


def _task() -> Any:
    """BenchMARL's simple_spread task whose games are ``mpe2``'s."""
    from benchmarl.environments.pettingzoo.common import PettingZooClass
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    class Mpe2SimpleSpread(PettingZooClass):
        def get_env_fun(self, num_envs, continuous_actions, seed, device):  # noqa: ANN001, ANN202
            del num_envs  # not vectorised: BenchMARL runs num_envs of them
            config = dict(self.config)
            config.pop("task")

            def make() -> Any:
                from mpe2 import simple_spread_v3

                game = simple_spread_v3.parallel_env(
                    continuous_actions=continuous_actions, **config
                )
                return PettingZooWrapper(
                    env=game,
                    categorical_actions=True,
                    device=device,
                    seed=seed,
                    return_state=self.has_state(),
                )

            return make

    return _by_name(Mpe2SimpleSpread)(
        name="SIMPLE_SPREAD",
        config={
            "task": "simple_spread_v3",
            "max_cycles": MAX_CYCLES,
            "N": NUM_AGENTS,
            "local_ratio": 0.5,
        },
    )


@dataclasses.dataclass
class _RunState:
    """What the callbacks of one BenchMARL run share with ``run_inside``.

    Attributes:
        csv_path: the evaluations' CSV.
        restore: the checkpoint the run resumes from, or None.
        max_frames: the run's budget in frames (the learning rate decays to 0 there).
        start: ``time.monotonic()`` when this attempt started.
        wall_before_s: wall seconds of the earlier attempts, up to the checkpoint.
    """

    csv_path: Path
    restore: Path | None
    max_frames: int
    start: float
    wall_before_s: float = 0.0

    def wall_s(self) -> float:
        """Wall seconds of the whole run so far (earlier attempts included)."""
        return self.wall_before_s + time.monotonic() - self.start


def _experiment_config(args: argparse.Namespace, out: Path, state: _RunState) -> Any:
    """BenchMARL's experiment settings: ALF's collection, optimizer and evaluation."""
    from benchmarl.experiment import ExperimentConfig

    config = ExperimentConfig.get_from_yaml()
    config.sampling_device = config.train_device = config.buffer_device = "cpu"
    config.share_policy_params = True
    config.prefer_continuous_actions = False
    config.gamma = 0.99
    config.lr = LEARNING_RATE
    config.adam_eps = 1e-5
    config.clip_grad_norm = True
    config.clip_grad_val = 10.0
    config.max_n_iters = None
    config.max_n_frames = state.max_frames
    config.on_policy_collected_frames_per_batch = FRAMES_PER_BATCH
    config.on_policy_n_envs_per_worker = GAMES
    config.on_policy_n_minibatch_iters = EPOCHS
    config.on_policy_minibatch_size = MINIBATCH_FRAMES
    config.evaluation = True
    config.render = False
    config.evaluation_interval = args.eval_every_iterations * FRAMES_PER_BATCH
    config.evaluation_episodes = EVAL_GAMES
    config.evaluation_deterministic_actions = True
    config.loggers = []
    config.create_json = True  # BenchMARL evaluates only with a logger or this
    config.save_folder = str(out)
    # A checkpoint after every evaluation (the last two kept): a killed run resumes there.
    config.checkpoint_interval = args.eval_every_iterations * FRAMES_PER_BATCH
    config.keep_checkpoints_num = 2
    config.checkpoint_at_end = False
    config.restore_file = str(state.restore) if state.restore is not None else None
    return config


def _algorithm_config(algorithm: str) -> Any:
    """BenchMARL's IPPO or MAPPO with ALF's PPO settings."""
    from benchmarl.algorithms import IppoConfig, MappoConfig

    config = (MappoConfig if algorithm == "mappo" else IppoConfig).get_from_yaml()
    config.share_param_critic = True
    config.clip_epsilon = 0.2
    config.entropy_coef = 0.01
    config.critic_coef = 0.5
    config.loss_critic_type = "l2"
    config.lmbda = 0.95
    config.minibatch_advantage = False
    return config


def _mlp() -> Any:
    """ALF's 2x64 tanh network as BenchMARL's model config."""
    import torch
    from benchmarl.models.mlp import MlpConfig

    return MlpConfig(
        num_cells=[64, 64], layer_class=torch.nn.Linear, activation_class=torch.nn.Tanh
    )


def _append_evaluation(state: _RunState, rollouts: list[Any], frames: int, iteration: int) -> None:
    """One evaluation's row in the CSV: the return per agent over its games."""
    returns = []
    for rollout in rollouts:  # one game each: reward [T, agents, 1]
        per_agent = rollout.get(("next", "agent", "reward")).sum(dim=0).flatten()
        returns.append(float(per_agent.mean()))
    mean = sum(returns) / len(returns)
    std = math.sqrt(sum((r - mean) ** 2 for r in returns) / len(returns))
    with open(state.csv_path, "a", newline="") as f:
        csv.writer(f).writerow(
            [
                frames * NUM_AGENTS,
                frames,
                iteration,
                f"{mean:.4f}",
                f"{std:.4f}",
                len(returns),
                f"{state.wall_s():.1f}",
            ]
        )
    print(f"agent-steps {frames * NUM_AGENTS:>9,}  eval return per agent {mean:8.3f}", flush=True)


def _set_learning_rate(optimizers: dict[str, dict[str, Any]], lr: float) -> None:
    """Sets ``lr`` in every parameter group of BenchMARL's optimizers (group -> name -> Adam)."""
    for by_name in optimizers.values():
        for optimizer in by_name.values():
            for group in optimizer.param_groups:
                group["lr"] = lr


def _alf_settings(state: _RunState) -> Any:
    """The callback giving a BenchMARL run ALF's settings (class made in a function, as
    it needs BenchMARL)."""
    from benchmarl.experiment.callback import Callback

    class AlfSettings(Callback):
        """ALF's advantage normalisation and learning-rate decay; the evaluations' CSV;
        the optimizers and the wall clock in BenchMARL's checkpoints (it saves neither)."""

        def on_setup(self) -> None:
            for loss in self.experiment.losses.values():
                loss.normalize_advantage = True
            if state.restore is None:
                with open(state.csv_path, "w", newline="") as f:
                    csv.writer(f).writerow(CSV_COLUMNS)

        def on_state_dict(self, state_dict: dict[str, Any]) -> None:
            state_dict["alf_optimizers"] = {
                group: {name: opt.state_dict() for name, opt in optimizers.items()}
                for group, optimizers in self.experiment.optimizers.items()
            }
            state_dict["alf_wall_s"] = state.wall_s()

        def on_load_state_dict(self, state_dict: dict[str, Any]) -> None:
            for group, optimizers in state_dict["alf_optimizers"].items():
                for name, optimizer_state in optimizers.items():
                    self.experiment.optimizers[group][name].load_state_dict(optimizer_state)
            state.wall_before_s = state_dict["alf_wall_s"]
            keep_evaluations_up_to(state.csv_path, state_dict["state"]["total_frames"])

        def on_batch_collected(self, batch: Any) -> None:
            # ALF's schedules read the progress before the iteration's collection.
            before = self.experiment.total_frames - batch.numel()
            lr = LEARNING_RATE * max(0.0, 1.0 - before / state.max_frames)
            _set_learning_rate(self.experiment.optimizers, lr)

        def on_evaluation_end(self, rollouts: list[Any]) -> None:
            iteration = self.experiment.n_iters_performed + 1
            _append_evaluation(state, rollouts, self.experiment.total_frames, iteration)

    return _by_name(AlfSettings)()


def _run_info(
    args: argparse.Namespace, state: _RunState, experiment: Any, setup_s: float
) -> dict[str, Any]:
    """``run.json``: the run's budget, wall time, learning rates at the end and versions."""
    import benchmarl
    import mpe2
    import pettingzoo
    import tensordict
    import torch
    import torchrl

    return {
        "seed": args.seed,
        "agent_steps": state.max_frames * NUM_AGENTS,
        "frames": state.max_frames,
        "iterations": state.max_frames // FRAMES_PER_BATCH,
        "wall_s": state.wall_s(),
        "setup_s": setup_s,
        "resumed_from": str(state.restore) if state.restore is not None else None,
        "torch_num_threads": torch.get_num_threads(),
        "final_learning_rates": sorted(
            {
                g["lr"]
                for opts in experiment.optimizers.values()
                for o in opts.values()
                for g in o.param_groups
            }
        ),
        "versions": {
            "benchmarl": benchmarl.__version__,
            "torchrl": torchrl.__version__,
            "tensordict": tensordict.__version__,
            "torch": torch.__version__,
            "pettingzoo": pettingzoo.__version__,
            "mpe2": getattr(mpe2, "__version__", None),
        },
    }


def run_inside(args: argparse.Namespace) -> None:
    """One BenchMARL IPPO (or MAPPO) run (in BenchMARL's venv)."""
    import warnings

    warnings.filterwarnings("ignore", message=".*PettingZoo in TorchRL is tested.*")
    warnings.filterwarnings("ignore", message=".*SyncDataCollector has been deprecated.*")
    # ALF normalises a mini-batch's advantages over all its rows (every agent's steps),
    # which is what ClipPPOLoss does without normalize_advantage_exclude_dims.
    warnings.filterwarnings("ignore", message=".*advantage key has more dimensions.*")
    import torch
    from benchmarl.experiment import Experiment

    torch.set_num_threads(1)
    out = Path(args.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    iterations = math.ceil(args.agent_steps / (NUM_AGENTS * FRAMES_PER_BATCH))
    state = _RunState(
        csv_path=out / "evaluations.csv",
        restore=latest_checkpoint(out),
        max_frames=iterations * FRAMES_PER_BATCH,
        start=time.monotonic(),
    )
    if state.restore is not None:
        print(f"resuming from {state.restore}", flush=True)
    experiment = Experiment(
        task=_task(),
        algorithm_config=_algorithm_config(args.algorithm),
        model_config=_mlp(),
        critic_model_config=_mlp(),
        seed=args.seed,
        config=_experiment_config(args, out, state),
        callbacks=[_alf_settings(state)],
    )
    setup_s = time.monotonic() - state.start
    experiment.run()
    info = _run_info(args, state, experiment, setup_s)
    (out / "run.json").write_text(json.dumps(info, indent=2))


CSV_COLUMNS = (
    "agent_steps",
    "frames",
    "iteration",
    "return_per_agent",
    "return_std",
    "episodes",
    "wall_s",
)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest BenchMARL checkpoint under ``run_dir`` that loads, or None.

    BenchMARL writes ``<run_dir>/<experiment>/checkpoints/checkpoint_<frames>.pt`` in
    place, so a run killed while saving leaves a truncated newest file: the one before it
    (two are kept) is used then.
    """
    import torch

    found = sorted(
        run_dir.glob("*/checkpoints/checkpoint_*.pt"),
        key=lambda p: int(p.stem.rsplit("_", 1)[1]),
        reverse=True,
    )
    for path in found:
        try:
            torch.load(path, map_location="cpu", weights_only=False)
        except Exception as error:  # noqa: BLE001 - any unreadable file is skipped
            print(f"skipping unreadable checkpoint {path}: {error}", flush=True)
            continue
        return path
    return None


def keep_evaluations_up_to(csv_path: Path, frames: int) -> None:
    """Drops the evaluation rows written after the checkpoint a run resumes from."""
    rows = list(csv.DictReader(open(csv_path)))
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            if int(row["frames"]) <= frames:
                writer.writerow([row[c] for c in CSV_COLUMNS])


# --------------------------------------------------------------------------- parent


def _summary(run_dir: Path) -> list[Any]:
    rows = list(csv.DictReader(open(run_dir / "evaluations.csv")))
    info = json.loads((run_dir / "run.json").read_text())
    last = rows[-1] if rows else {}
    best = max((float(r["return_per_agent"]) for r in rows), default=float("nan"))
    return [
        run_dir.name,
        f"{info['agent_steps']:,}",
        len(rows),
        last.get("return_per_agent", "-"),
        f"{best:.3f}",
        f"{info['wall_s']:.0f}",
    ]


def main() -> None:
    """Builds the venv if needed and runs one BenchMARL training per seed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--agent_steps",
        type=int,
        default=2_000_000,
        help="budget in agent-steps (rounded up to whole iterations of 1,200)",
    )
    parser.add_argument(
        "--eval_every_iterations",
        type=int,
        default=50,
        help="iterations (of 400 frames = 1,200 agent-steps) between evaluations",
    )
    parser.add_argument("--out", default="/tmp/benchmarl_spread")
    parser.add_argument("--venv", default=DEFAULT_VENV)
    parser.add_argument(
        "--alf_runs",
        default=None,
        help="with this (ALF's ppo_simple_spread runs, e.g. a sweep root): no training; "
        "print both frameworks' evaluation returns per agent at --report_points as IQM "
        "with a 95%% CI over seeds",
    )
    parser.add_argument(
        "--report_points",
        default="480000,1020000,1500000",
        help="agent-steps compared (those both evaluated; the last common one is added)",
    )
    parser.add_argument(
        "--algorithm",
        default="ippo",
        choices=("ippo", "mappo"),
        help="BenchMARL's IPPO (each agent's critic sees its own observation, as ALF's "
        "shared PPO; the default) or MAPPO (a centralised critic over all agents' "
        "observations)",
    )
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--run_dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        run_inside(args)
        return
    if args.alf_runs:
        report(args)
        return

    python = ensure_venv(args.venv)
    print(json.dumps(machine_info(("torch", "pettingzoo", "mpe2"))))
    env = dict(os.environ, OMP_NUM_THREADS="1", TQDM_DISABLE="1")
    summaries = []
    for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
        run_dir = Path(args.out) / f"seed-{seed}"
        if (run_dir / "run.json").exists():
            print(f"seed {seed}: finished earlier, skipped", flush=True)
            write_alf_format(run_dir, seed=seed, algorithm=args.algorithm)
            summaries.append(_summary(run_dir))
            continue
        print(f"seed {seed}: uptime before: {uptime()}", flush=True)
        subprocess.run(
            [
                python,
                os.path.abspath(__file__),
                "--inside",
                "--seed",
                str(seed),
                "--run_dir",
                str(run_dir),
                "--agent_steps",
                str(args.agent_steps),
                "--eval_every_iterations",
                str(args.eval_every_iterations),
                "--algorithm",
                args.algorithm,
            ],
            env=env,
            check=True,
        )
        print(f"seed {seed}: uptime after:  {uptime()}", flush=True)
        write_alf_format(run_dir, seed=seed, algorithm=args.algorithm)
        summaries.append(_summary(run_dir))
    print()
    print(
        format_table(
            ["run", "agent-steps", "evaluations", "last return per agent", "best", "wall s"],
            summaries,
        )
    )
    print(f"evaluations: {args.out}/seed-*/evaluations.csv")


if __name__ == "__main__":
    main()
