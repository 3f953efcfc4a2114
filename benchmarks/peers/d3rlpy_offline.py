"""d3rlpy's offline algorithms on a Minari-format dataset: the peer of ALF's offline RL
configs (``alf/examples/{bc,td3bc,iql,cql}_hopper_medium.gin``) for
``benchmarks/peers/offline.py`` (issue 34).

This module has two halves:

- :func:`ensure_venv` (run by ``benchmarks/peers/offline.py`` in ALF's environment) builds
  d3rlpy's own virtual environment on first use. d3rlpy 2.8.1 pins
  ``gymnasium==1.0.0`` (ALF runs 1.4), so it never goes into ALF's environment. The venv
  gets ``torch==2.13.0`` first (the CPU build ALF runs with, from the local wheel; never
  a CUDA build), then ``d3rlpy==2.8.1``, ``gymnasium[mujoco]==1.0.0`` and the MuJoCo
  release ALF's environment has (the same physics). ``h5py`` comes with d3rlpy and
  reads the dataset's HDF5 file directly (no ``minari`` needed).
- :func:`run_inside` (this file run by the venv's interpreter with ``--spec``) trains one
  algorithm for one seed: it reads the dataset's episodes into d3rlpy's
  ``ReplayBuffer``, builds the algorithm from the spec (the hyperparameters that
  ``benchmarks/peers/offline.py`` read from ALF's config and mapped to d3rlpy's fields), runs
  d3rlpy's own ``fitter`` loop (sampling and update, as ``fit``) for the budget of
  gradient steps, evaluates the greedy policy (``predict``) in the same Gymnasium
  environment after every ``eval_interval`` steps, and writes ``result.json``.

How the data is read: a Minari episode of ``T`` transitions holds ``T + 1``
observations. A terminated episode becomes a d3rlpy ``Episode`` of ``T`` steps with
``terminated=True`` (its last transition's next state is never bootstrapped). A
truncated one (a time limit) gets its final observation as an extra step with a zero
action and reward: d3rlpy counts ``size - 1`` transitions in an unterminated episode,
so all ``T`` transitions are trained on, with their real next states, as ALF trains on
them (d3rlpy's own D4RL loader drops each timed-out episode's last transition). The
extra step is never the start of a transition and adds nothing to the returns that
``ReturnBasedRewardScaler`` measures.

Actions: d3rlpy's policies squash with ``tanh`` into ``[-1, 1]``; a
``MinMaxActionScaler`` with the action space's bounds (from the dataset's metadata) maps
them to the environment's range, the identity for Hopper's ``[-1, 1]``. ALF measures
its behaviour-cloning errors and target noise in half action ranges, the same units.

Usage (normally through ``benchmarks/peers/offline.py``)::

    python benchmarks/peers/d3rlpy_offline.py --build [--venv=/work/peer_venvs/d3rlpy]
    /work/peer_venvs/d3rlpy/bin/python benchmarks/peers/d3rlpy_offline.py \\
        --spec=RUN/spec.json --out=RUN [--unsquashed_iql_mean]
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

DEFAULT_VENV = "/work/peer_venvs/d3rlpy"
TORCH = "torch==2.13.0"
PACKAGES = ("d3rlpy==2.8.1", "gymnasium[mujoco]==1.0.0")
_CHECK = "import d3rlpy, gymnasium, h5py, mujoco, torch"


# --------------------------------------------------------------------------- venv


def ensure_venv(venv: str = DEFAULT_VENV) -> str:
    """The python of ``venv``, building the venv first if d3rlpy does not import there.

    MuJoCo is pinned to the release in the calling (ALF's) environment when it has one,
    so both frameworks simulate Hopper with the same engine.
    """
    python = os.path.join(venv, "bin", "python")
    if (
        os.path.exists(python)
        and subprocess.run([python, "-c", _CHECK], capture_output=True, check=False).returncode == 0
    ):
        return python
    from importlib import metadata

    extra = []
    try:
        extra.append(f"mujoco=={metadata.version('mujoco')}")
    except metadata.PackageNotFoundError:
        pass
    print(f"building d3rlpy's virtual environment in {venv} (a few minutes)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [python, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TORCH], check=True)
    subprocess.run([*pip, TORCH, *PACKAGES, *extra], check=True)
    subprocess.run([python, "-c", _CHECK], check=True)
    return python


# --------------------------------------------------------------------------- inside the venv


def read_episodes(hdf5_path: str) -> list[Any]:
    """The dataset's episodes as d3rlpy ``Episode`` objects (see the module's notes)."""
    import h5py
    import numpy as np
    from d3rlpy.dataset import Episode

    episodes = []
    with h5py.File(hdf5_path, "r") as f:
        names = sorted(f.keys(), key=lambda name: int(name.split("_")[-1]))
        for name in names:
            group = f[name]
            observations = np.asarray(group["observations"], dtype=np.float32)
            actions = np.asarray(group["actions"], dtype=np.float32)
            rewards = np.asarray(group["rewards"], dtype=np.float32).reshape(-1, 1)
            terminated = bool(np.asarray(group["terminations"])[-1])
            if terminated:
                observations = observations[: len(actions)]
            else:
                actions = np.concatenate([actions, np.zeros_like(actions[:1])])
                rewards = np.concatenate([rewards, np.zeros_like(rewards[:1])])
            episodes.append(
                Episode(
                    observations=observations,
                    actions=actions,
                    rewards=rewards,
                    terminated=terminated,
                )
            )
    return episodes


def _encoder(spec: dict[str, Any]) -> Any:
    from d3rlpy.models.encoders import VectorEncoderFactory

    return VectorEncoderFactory(
        hidden_units=list(spec["hidden_units"]), activation=spec["activation"]
    )


def _optimizer(spec: dict[str, Any]) -> Any:
    from d3rlpy.optimizers import AdamFactory
    from d3rlpy.optimizers.lr_schedulers import CosineAnnealingLRFactory

    scheduler = None
    if spec.get("cosine_t_max"):
        scheduler = CosineAnnealingLRFactory(T_max=int(spec["cosine_t_max"]))
    return AdamFactory(
        eps=float(spec["eps"]),
        betas=tuple(spec["betas"]),
        clip_grad_norm=spec.get("clip_grad_norm"),
        lr_scheduler_factory=scheduler,
    )


def build_algorithm(spec: dict[str, Any]) -> Any:
    """The d3rlpy algorithm of a spec: ``config`` (the class name in ``d3rlpy.algos``),
    plain ``fields``, ``encoders`` and ``optimizers`` by field name, the scalers."""
    import d3rlpy
    import numpy as np

    d3 = spec["d3rlpy"]
    kwargs: dict[str, Any] = dict(d3["fields"])
    for field, encoder in d3.get("encoders", {}).items():
        kwargs[field] = _encoder(encoder)
    for field, optimizer in d3.get("optimizers", {}).items():
        kwargs[field] = _optimizer(optimizer)
    kwargs["action_scaler"] = d3rlpy.preprocessing.MinMaxActionScaler(
        minimum=np.asarray(spec["action_low"], dtype=np.float32),
        maximum=np.asarray(spec["action_high"], dtype=np.float32),
    )
    if d3.get("observation_scaler") == "standard":
        kwargs["observation_scaler"] = d3rlpy.preprocessing.StandardObservationScaler()
    if d3.get("reward_scaler_return_range"):
        kwargs["reward_scaler"] = d3rlpy.preprocessing.ReturnBasedRewardScaler(
            multiplier=float(d3["reward_scaler_return_range"])
        )
    config = getattr(d3rlpy.algos, d3["config"])(**kwargs)
    return config.create(device="cpu")


def _episode_return(algo: Any, env: Any, seed: int | None) -> float:
    """The return of one greedy episode (``predict``) from ``env.reset(seed=seed)``."""
    import numpy as np

    observation, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        action = algo.predict(np.asarray(observation, dtype=np.float32)[None])[0]
        observation, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        done = terminated or truncated
    return total


def evaluate(algo: Any, env: Any, episodes: int, seed: int) -> list[float]:
    """Returns of ``episodes`` greedy episodes, the first reset seeded."""
    return [_episode_return(algo, env, seed if i == 0 else None) for i in range(episodes)]


def evaluate_seeded(algo: Any, env: Any, seeds: list[int]) -> list[float]:
    """Returns of greedy episodes from the resets seeded ``seeds``, one episode each (the
    benchmark's matched final evaluation: the same starts for both frameworks)."""
    return [_episode_return(algo, env, seed) for seed in seeds]


def run_inside(spec_path: str, out: str) -> None:
    """One d3rlpy run of a spec written by ``benchmarks/peers/offline.py``: ``result.json``
    in ``out`` (the evaluations, update time, versions)."""
    import d3rlpy
    import gymnasium as gym
    import numpy as np
    import torch
    from d3rlpy.algos.utility import build_scalers_with_transition_picker
    from d3rlpy.constants import ActionSpace
    from d3rlpy.dataset import InfiniteBuffer, ReplayBuffer
    from d3rlpy.logging import NoopAdapterFactory

    spec = json.loads(Path(spec_path).read_text())
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(int(spec.get("torch_num_threads", 1)))
    seed = int(spec["seed"])
    d3rlpy.seed(seed)
    start = time.monotonic()
    episodes = read_episodes(spec["dataset_hdf5"])
    dataset = ReplayBuffer(
        InfiniteBuffer(),
        episodes=episodes,
        action_space=ActionSpace.CONTINUOUS,
        action_size=int(np.prod(np.shape(spec["action_low"]))),
    )
    algo = build_algorithm(spec)
    # What ``fitter`` does before its first step (it skips both when done): fit the
    # scalers, build the networks; outside the timed updates, as ALF's preparation is.
    build_scalers_with_transition_picker(algo, dataset)
    algo.build_with_dataset(dataset)
    setup_s = time.monotonic() - start
    env = gym.make(spec["env"])
    steps, interval = int(spec["steps"]), int(spec["eval_interval"])
    if steps % interval:
        raise ValueError(f"steps ({steps}) must be a multiple of eval_interval ({interval})")
    evaluations = []
    train_s = eval_s = 0.0
    fitter = algo.fitter(
        dataset,
        n_steps=steps,
        n_steps_per_epoch=interval,
        experiment_name=f"{spec['algo']}_seed{seed}",
        with_timestamp=False,
        logger_adapter=NoopAdapterFactory(),
        show_progress=False,
        save_interval=steps // interval + 1,
    )
    tick = time.perf_counter()
    for epoch, metrics in fitter:
        train_s += time.perf_counter() - tick
        tick = time.perf_counter()
        returns = evaluate(algo, env, int(spec["eval_episodes"]), seed=10_000 * (seed + 1) + epoch)
        eval_s += time.perf_counter() - tick
        record = {
            "step": epoch * interval,
            "average_return": float(np.mean(returns)),
            "returns": returns,
            "train_s": round(train_s, 3),
            "metrics": {k: float(v) for k, v in metrics.items()},
        }
        evaluations.append(record)
        print(
            f"step {record['step']:>8}  return {record['average_return']:9.2f}  "
            f"train {train_s:8.1f} s",
            flush=True,
        )
        tick = time.perf_counter()
    matched = evaluate_seeded(algo, env, list(spec.get("matched_seeds", [])))
    result = {
        "framework": "d3rlpy",
        "algo": spec["algo"],
        "seed": seed,
        "steps": steps,
        "evaluations": evaluations,
        "matched_returns": matched,
        "train_s": train_s,
        "eval_s": eval_s,
        "setup_s": setup_s,
        "wall_s": time.monotonic() - start,
        "transitions": sum(e.transition_count for e in episodes),
        "torch_num_threads": torch.get_num_threads(),
        "versions": {
            "d3rlpy": d3rlpy.__version__,
            "torch": torch.__version__,
            "gymnasium": gym.__version__,
            "numpy": np.__version__,
        },
    }
    (out_dir / "result.json").write_text(json.dumps(result, indent=1))


def use_unsquashed_iql_mean() -> None:
    """A diagnostic variant: d3rlpy's IQL with ALF's actor, a Gaussian whose mean is not
    squashed by ``tanh`` (in the scaled ``[-1, 1]`` units), clipped to the bounds when
    acting (d3rlpy squashes the mean: ``GaussianDistribution(loc=tanh(mu))``)."""
    import d3rlpy.algos.qlearning.torch.iql_impl as iql_impl
    from d3rlpy.models.torch import GaussianDistribution

    def unsquashed(action: Any) -> Any:
        return GaussianDistribution(loc=action.mu, std=action.logstd.exp(), raw_loc=action.mu)

    def clipped_mean(self: Any, x: Any) -> Any:
        return self._modules.policy(x).mu.clamp(-1.0, 1.0)

    iql_impl.build_gaussian_distribution = unsquashed
    iql_impl.IQLImpl.inner_predict_best_action = clipped_mean


def main() -> None:
    """``--build``: builds the venv; ``--spec``/``--out``: one run (in the venv)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true", help="build the venv and exit")
    parser.add_argument("--venv", default=DEFAULT_VENV)
    parser.add_argument("--spec", default=None, help="a run's spec.json (in the venv)")
    parser.add_argument("--out", default=None, help="the run's folder (in the venv)")
    parser.add_argument(
        "--unsquashed_iql_mean",
        action="store_true",
        help="diagnostic: IQL's actor mean without tanh, as ALF's (see README)",
    )
    args = parser.parse_args()
    if args.build:
        print(ensure_venv(args.venv))
        return
    if not (args.spec and args.out):
        parser.error("give --build, or --spec and --out")
    if args.unsquashed_iql_mean:
        use_unsquashed_iql_mean()
    run_inside(args.spec, args.out)


if __name__ == "__main__":
    main()
