"""ALF's SAC + HER side by side with Stable-Baselines3's SAC + ``HerReplayBuffer`` on
Gymnasium-Robotics' Fetch (issue 35).

For each seed the benchmark runs ALF (``alf.bin.train`` with
``alf/examples/sac_her_fetch_reach.gin``, the environment, budget, evaluation cadence and
seed given by ``--conf_param``) and SB3 2.9.2 (a worker of this module in SB3's own
virtual environment) one after the other, alternating which goes first from one seed to
the next so that drifting load hits both alike. Both train for ``--steps`` env steps with
the same hyperparameters, those of rl-baselines3-zoo's ``sac.yml`` FetchReach entry as
the ALF config has them (buffer 1e6, batch 256, gamma 0.95, learning rate 1e-3, tau
0.005, automatic entropy, 1000 random warm-up steps, [64, 64] networks, HER ``future``
with 4 sampled goals = relabel ratio 0.8, observations normalized, rewards not), and
evaluate their greedy policies every ``--eval_interval`` steps on ``--eval_episodes``
episodes of a separate environment: the success rate (``info["is_success"]`` at the
episode's last step) and the return.

SB3's environment is built on first use (``--sb3_venv``): a virtual environment whose
site-packages chain to this one's (a ``.pth`` file), holding only ``stable-baselines3``
itself, so both frameworks run the same torch, Gymnasium, MuJoCo and Gymnasium-Robotics
(with ALF's fix for MuJoCo >= 3.17, :mod:`alf.environments.robotics`, loaded by path).

Reported per framework: each seed's final success rate and the env steps of its first
evaluation at or above ``--target`` (default 0.9), their mean over seeds, and env
steps/s of training (ALF: ``train_time_s`` of ``progress.jsonl``; SB3: ``learn`` minus
its evaluations). ``uptime`` is printed before and after every run. Raw numbers:
``<root_dir>/results.json``; a run whose result is there already is not run again
(``--rerun`` runs it anyway).

Usage (the full comparison takes about 2 hours on 2 cores; the smoke run a minute)::

    python -m benchmarks.peers.sb3_her --seeds=0,1,2 --steps=20000 --root_dir=/tmp/her_bench
    python -m benchmarks.peers.sb3_her --seeds=0 --steps=300 --eval_interval=150 \\
        --eval_episodes=2 --root_dir=/tmp/her_smoke
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import fmt_num, format_table, machine_info, run_logged, uptime  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "alf" / "examples" / "sac_her_fetch_reach.gin"
ROBOTICS_FIX = REPO / "alf" / "environments" / "robotics.py"
DEFAULT_VENV = "/work/peer_venvs/sb3_her"
SB3 = "stable-baselines3==2.9.2"
FRAMEWORKS = ("alf", "sb3")
HPARAMS = {  # rl-baselines3-zoo sac.yml, FetchReach-v1 (as in sac_her_fetch_reach.gin)
    "buffer_size": 1_000_000,
    "batch_size": 256,
    "gamma": 0.95,
    "learning_rate": 1e-3,
    "tau": 0.005,
    "learning_starts": 1000,
    "net_arch": [64, 64],
    "n_sampled_goal": 4,
}


# --------------------------------------------------------------------------- SB3's venv


def ensure_venv(venv: str) -> str:
    """The python of SB3's venv at ``venv``, built first if SB3 does not import there: a
    venv chained to this interpreter's site-packages, plus stable-baselines3 alone."""
    python = os.path.join(venv, "bin", "python")
    check = [python, "-c", "import stable_baselines3, gymnasium_robotics, torch"]
    if os.path.exists(python) and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    import sysconfig

    print(f"building SB3's virtual environment in {venv}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "alf_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", SB3], check=True)
    subprocess.run(check, check=True)
    return python


# --------------------------------------------------------------------------- SB3 worker


def _fetch_env(env_id: str, seed: int) -> Any:
    import importlib.util

    import gymnasium as gym

    spec = importlib.util.spec_from_file_location("alf_robotics_fix", ROBOTICS_FIX)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.import_robotics()
    env = gym.make(env_id)
    env.reset(seed=seed)
    return env


def _evaluate(model: Any, venv: Any, env: Any, episodes: int) -> tuple[float, float]:
    """Success rate and mean return of ``episodes`` greedy episodes in ``env``."""
    successes, returns = [], []
    for _ in range(episodes):
        obs, _ = env.reset()
        done, total, info = False, 0.0, {}
        while not done:
            action, _ = model.predict(venv.normalize_obs(obs), deterministic=True)
            obs, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            done = terminated or truncated
        successes.append(float(info.get("is_success", 0.0)))
        returns.append(total)
    return sum(successes) / episodes, sum(returns) / episodes


def worker_sb3(spec: dict[str, Any]) -> dict[str, Any]:
    """One SB3 run as ``spec`` says; its evaluations and training time."""
    import torch
    from stable_baselines3 import SAC, HerReplayBuffer
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    torch.set_num_threads(1)
    seed, env_id = spec["seed"], spec["env"]
    venv = VecNormalize(
        DummyVecEnv([lambda: _fetch_env(env_id, seed)]), norm_obs=True, norm_reward=False
    )
    eval_env = _fetch_env(env_id, seed + 10_000)
    hp = HPARAMS
    model = SAC(
        "MultiInputPolicy",
        venv,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs={
            "n_sampled_goal": hp["n_sampled_goal"],
            "goal_selection_strategy": "future",
        },
        buffer_size=hp["buffer_size"],
        batch_size=hp["batch_size"],
        gamma=hp["gamma"],
        learning_rate=hp["learning_rate"],
        tau=hp["tau"],
        learning_starts=hp["learning_starts"],
        ent_coef="auto",
        policy_kwargs={"net_arch": hp["net_arch"]},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    evals: list[dict[str, float]] = []
    eval_time = [0.0]

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % spec["eval_interval"] == 0:
                start = time.perf_counter()
                rate, ret = _evaluate(model, venv, eval_env, spec["eval_episodes"])
                evals.append({"env_steps": self.num_timesteps, "success_rate": rate, "return": ret})
                eval_time[0] += time.perf_counter() - start
            return True

    start = time.perf_counter()
    model.learn(total_timesteps=spec["steps"], callback=Evaluate())
    wall = time.perf_counter() - start
    return {"evals": evals, "train_time_s": wall - eval_time[0], "wall_s": wall}


# --------------------------------------------------------------------------- the runs


def run_alf(args: argparse.Namespace, seed: int, out: Path) -> dict[str, Any]:
    """One ALF run; its evaluations and training time from ``progress.jsonl``."""
    root = out / f"alf_seed{seed}"
    params = [
        f"create_environment.env_name={json.dumps(args.env)}",
        f"TrainerConfig.random_seed={seed}",
        f"TrainerConfig.num_env_steps={args.steps}",
        f"TrainerConfig.eval_interval={args.eval_interval}",
        f"TrainerConfig.num_eval_episodes={args.eval_episodes}",
        "TrainerConfig.checkpoint_interval=1000000",
    ]
    cmd = [sys.executable, "-m", "alf.bin.train", f"--conf={CONF}", f"--root_dir={root}"]
    cmd += [f"--conf_param={p}" for p in params]
    rc, wall = run_logged(cmd, log=out / f"alf_seed{seed}.log", cwd=REPO, timeout_s=args.timeout_s)
    records = [json.loads(line) for line in (root / "progress.jsonl").read_text().splitlines()]
    evals = [
        {
            "env_steps": r["env_steps"],
            "success_rate": r["eval/success_rate"],
            "return": r["eval/average_return"],
        }
        for r in records
        if "eval/success_rate" in r
    ]
    train_time = max((r.get("train_time_s", 0.0) for r in records), default=0.0)
    return {"rc": rc, "evals": evals, "train_time_s": train_time, "wall_s": wall}


def run_sb3(args: argparse.Namespace, python: str, seed: int, out: Path) -> dict[str, Any]:
    """One SB3 run in its venv (a worker of this module)."""
    spec = {
        "seed": seed,
        "env": args.env,
        "steps": args.steps,
        "eval_interval": args.eval_interval,
        "eval_episodes": args.eval_episodes,
    }
    spec_path, result_path = out / f"sb3_seed{seed}.json", out / f"sb3_seed{seed}.result.json"
    spec_path.write_text(json.dumps(spec))
    result_path.unlink(missing_ok=True)
    cmd = [
        python,
        str(Path(__file__).resolve()),
        f"--worker={spec_path}",
        f"--worker_out={result_path}",
    ]
    rc, wall = run_logged(cmd, log=out / f"sb3_seed{seed}.log", cwd=REPO, timeout_s=args.timeout_s)
    result = json.loads(result_path.read_text()) if result_path.exists() else {"evals": []}
    return {"rc": rc, **result, "wall_s": wall}


def summarize(run: dict[str, Any], steps: int, target: float) -> dict[str, Any]:
    """A run's final success rate, env steps to ``target`` and training steps/s."""
    evals = run.get("evals") or []
    reached = next((e["env_steps"] for e in evals if e["success_rate"] >= target), None)
    train = run.get("train_time_s") or 0.0
    return {
        "final_success": evals[-1]["success_rate"] if evals else None,
        "steps_to_target": reached,
        "steps_per_s": steps / train if train > 0 else None,
    }


def report(results: dict[str, Any], frameworks: list[str], target: float) -> str:
    """The table: per framework and seed, then the mean over seeds."""
    rows = []
    for framework in frameworks:
        runs = results["runs"].get(framework, {})
        finals, rates = [], []
        for seed, run in sorted(runs.items(), key=lambda kv: int(kv[0])):
            s = run["summary"]
            rows.append(
                [
                    f"{framework} seed {seed}",
                    fmt_num(s["final_success"], 2),
                    fmt_num(s["steps_to_target"]),
                    fmt_num(s["steps_per_s"], 1),
                ]
            )
            if s["final_success"] is not None:
                finals.append(s["final_success"])
            if s["steps_per_s"] is not None:
                rates.append(s["steps_per_s"])
        if finals:
            rows.append(
                [
                    f"{framework} mean",
                    fmt_num(sum(finals) / len(finals), 2),
                    "",
                    fmt_num(sum(rates) / len(rates), 1) if rates else "-",
                ]
            )
    header = ["run", "final success", f"steps to {target}", "train steps/s"]
    return format_table(header, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="FetchReach-v4")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--eval_interval", type=int, default=2000)
    parser.add_argument("--eval_episodes", type=int, default=20)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--frameworks", default="alf,sb3")
    parser.add_argument("--root_dir", default="/tmp/sb3_her_bench")
    parser.add_argument("--sb3_venv", default=DEFAULT_VENV)
    parser.add_argument("--timeout_s", type=float, default=4 * 3600)
    parser.add_argument("--rerun", action="store_true")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker_out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        result = worker_sb3(json.loads(Path(args.worker).read_text()))
        Path(args.worker_out).write_text(json.dumps(result))
        return
    frameworks = [f for f in args.frameworks.split(",") if f]
    if not set(frameworks) <= set(FRAMEWORKS):
        parser.error(f"--frameworks: from {FRAMEWORKS}")
    out = Path(args.root_dir)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {"runs": {}}
    results["machine"] = machine_info(("torch", "gymnasium", "mujoco", "gymnasium-robotics"))
    python = ensure_venv(args.sb3_venv) if "sb3" in frameworks else ""
    for i, seed in enumerate(int(s) for s in args.seeds.split(",")):
        order = frameworks if i % 2 == 0 else frameworks[::-1]
        for framework in order:
            done = results["runs"].get(framework, {}).get(str(seed))
            if done and not args.rerun:
                continue
            print(f"{framework} seed {seed}: {uptime()}", flush=True)
            run = (
                run_alf(args, seed, out) if framework == "alf" else run_sb3(args, python, seed, out)
            )
            run["summary"] = summarize(run, args.steps, args.target)
            print(
                f"  {run['summary']} (rc {run['rc']}, {run['wall_s']:.0f} s); {uptime()}",
                flush=True,
            )
            results["runs"].setdefault(framework, {})[str(seed)] = run
            results_path.write_text(json.dumps(results, indent=1))
    print()
    print(f"{args.env}, {args.steps} env steps, evaluations of {args.eval_episodes} episodes")
    print(report(results, frameworks, args.target))
    print(f"raw numbers: {results_path}")


if __name__ == "__main__":
    main()
