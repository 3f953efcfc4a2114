r"""A plain-PyTorch PPO on CartPole-v1: the reference for how fast ALF's PPO could be.

One file, no framework: a Gymnasium ``SyncVectorEnv``, two tanh MLPs, fused Adam, and
the loop written out, with the hyperparameters of ``benchmarks/ppo/ppo_cart_pole.py``
(``HPARAMS``: 8 envs x 32 steps, 20 epochs of one 256-step mini-batch, learning rate and
clip decayed linearly to 0, GAE lambda 0.8, gamma 0.98, value coefficient 0.5, global
gradient norm clipped to 0.5, advantages normalised per mini-batch). It does nothing a
framework must do beyond the math: no summaries, checkpoints, data checks or nests.
``ppo_cart_pole.py --bare`` runs it alternating with ALF and reports ALF's throughput as
a percentage of this loop's.

Throughput counts the time spent collecting and updating (evaluations excluded), as ALF's
``RLTrainer.train_time_s`` does. Evaluations (10 deterministic episodes on 10 separately
seeded environments) run every ``--eval_every_steps`` env steps after the update, as in
the ALF and SB3 workers of ``ppo_cart_pole.py``.

Usage::

    python benchmarks/ppo/bare_ppo.py --seed 0 --num_env_steps 100000
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

ENV_NAME = "CartPole-v1"
EVAL_SEED_OFFSET = 1_000_003  # as alf.trainers.components.EVAL_SEED_OFFSET

HPARAMS: dict[str, Any] = {
    "num_envs": 8,
    "n_steps": 32,
    "n_epochs": 20,
    "batch_size": 256,
    "learning_rate": 1e-3,
    "clip_range": 0.2,
    "gae_lambda": 0.8,
    "gamma": 0.98,
    "hidden": (64, 64),
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "num_eval_episodes": 10,
}


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers with tanh between them (none after the last)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def evaluate(actor: nn.Module, envs: list[gym.Env]) -> float:
    """One greedy episode on each of ``envs``, stepped as one batch; the mean return."""
    obs = np.stack([env.reset()[0] for env in envs])
    returns = np.zeros(len(envs))
    active = np.ones(len(envs), dtype=bool)
    while active.any():
        with torch.no_grad():
            actions = actor(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()
        for i in np.flatnonzero(active):
            o, reward, terminated, truncated, _ = envs[i].step(int(actions[i]))
            returns[i] += reward
            obs[i] = o
            active[i] = not (terminated or truncated)
    return float(returns.mean())


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_value: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of ``[T, B]`` rewards; ``dones[t]``: step t ended its episode
    (a truncation's bootstrap is already in its reward)."""
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        following = next_value if t == rewards.shape[0] - 1 else values[t + 1]
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * following * not_done - values[t]
        last = delta + gamma * lam * not_done * last
        advantages[t] = last
    return advantages, advantages + values


def train(
    *, seed: int, num_env_steps: int, eval_every_steps: int, threads: int = 1
) -> dict[str, Any]:
    """Trains for ``num_env_steps``; returns the timing and evaluation records."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    hp = HPARAMS
    num_envs, n_steps = hp["num_envs"], hp["n_steps"]
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make(ENV_NAME)] * num_envs,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    eval_envs = [gym.make(ENV_NAME) for _ in range(hp["num_eval_episodes"])]
    for i, env in enumerate(eval_envs):
        env.reset(seed=seed + EVAL_SEED_OFFSET + i)
    obs_dim = envs.single_observation_space.shape[0]
    num_actions = int(envs.single_action_space.n)
    actor = mlp([obs_dim, *hp["hidden"], num_actions])
    critic = mlp([obs_dim, *hp["hidden"], 1])
    params = [*actor.parameters(), *critic.parameters()]
    optimizer = torch.optim.Adam(params, lr=hp["learning_rate"], eps=1e-5, fused=True)

    obs_buf = torch.zeros(n_steps, num_envs, obs_dim)
    act_buf = torch.zeros(n_steps, num_envs, dtype=torch.long)
    logp_buf = torch.zeros(n_steps, num_envs)
    rew_buf = torch.zeros(n_steps, num_envs)
    done_buf = torch.zeros(n_steps, num_envs)
    val_buf = torch.zeros(n_steps, num_envs)

    obs = torch.as_tensor(envs.reset(seed=seed)[0], dtype=torch.float32)
    num_iterations = num_env_steps // (num_envs * n_steps)
    env_steps = 0
    train_s = 0.0
    evals: list[dict[str, Any]] = []
    start = time.monotonic()
    next_eval = eval_every_steps
    for iteration in range(num_iterations):
        tick = time.monotonic()
        remaining = 1.0 - iteration / num_iterations
        optimizer.param_groups[0]["lr"] = hp["learning_rate"] * remaining
        clip = hp["clip_range"] * remaining
        for t in range(n_steps):
            with torch.no_grad():
                logits = actor(obs)
                value = critic(obs).squeeze(-1)
                dist = torch.distributions.Categorical(logits=logits, validate_args=False)
                action = dist.sample()
                logp = dist.log_prob(action)
            next_obs, reward, terminated, truncated, info = envs.step(action.numpy())
            reward = torch.as_tensor(reward, dtype=torch.float32)
            cut = np.flatnonzero(truncated & ~terminated)
            if cut.size:  # bootstrap time limits from the final observation
                final = torch.as_tensor(np.stack([info["final_obs"][i] for i in cut]))
                with torch.no_grad():
                    reward[cut] += hp["gamma"] * critic(final.float()).squeeze(-1)
            obs_buf[t], act_buf[t], logp_buf[t], val_buf[t] = obs, action, logp, value
            rew_buf[t] = reward
            done_buf[t] = torch.as_tensor(terminated | truncated, dtype=torch.float32)
            obs = torch.as_tensor(next_obs, dtype=torch.float32)
        with torch.no_grad():
            next_value = critic(obs).squeeze(-1)
        advantages, returns = gae(
            rew_buf, val_buf, next_value, done_buf, hp["gamma"], hp["gae_lambda"]
        )
        b_obs, b_act = obs_buf.reshape(-1, obs_dim), act_buf.reshape(-1)
        b_logp, b_adv, b_ret = logp_buf.reshape(-1), advantages.reshape(-1), returns.reshape(-1)
        batch = b_obs.shape[0]
        for _ in range(hp["n_epochs"]):
            for index in torch.randperm(batch).split(hp["batch_size"]):
                dist = torch.distributions.Categorical(
                    logits=actor(b_obs[index]), validate_args=False
                )
                ratio = torch.exp(dist.log_prob(b_act[index]) - b_logp[index])
                adv = b_adv[index]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = -torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
                value_loss = (critic(b_obs[index]).squeeze(-1) - b_ret[index]).pow(2).mean()
                loss = pg_loss.mean() + hp["vf_coef"] * value_loss
                if hp["ent_coef"]:
                    loss = loss - hp["ent_coef"] * dist.entropy().mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(params, hp["max_grad_norm"])
                optimizer.step()
        env_steps += num_envs * n_steps
        train_s += time.monotonic() - tick
        last = iteration == num_iterations - 1
        if (eval_every_steps and env_steps >= next_eval) or last:
            eval_tick = time.monotonic()
            average = evaluate(actor, eval_envs)
            done = time.monotonic()
            evals.append(
                {
                    "env_steps": env_steps,
                    "average_return": average,
                    "eval_s": done - eval_tick,
                    "t_end_s": done - start,
                }
            )
            while next_eval <= env_steps:
                next_eval += eval_every_steps
    wall_s = time.monotonic() - start
    envs.close()
    eval_s = sum(e["eval_s"] for e in evals)
    return {
        "framework": "bare",
        "seed": seed,
        "torch_num_threads": torch.get_num_threads(),
        "env_steps": env_steps,
        "iterations": num_iterations,
        "train_time_s": train_s,
        "loop_time_excl_eval_s": wall_s - eval_s,
        "eval_time_s": eval_s,
        "wall_s": wall_s,
        "setup_s": 0.0,
        "evals": evals,
        "versions": {"torch": torch.__version__, "gymnasium": gym.__version__},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_env_steps", type=int, default=100_000)
    parser.add_argument("--eval_every_steps", type=int, default=10_240)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    result = train(
        seed=args.seed,
        num_env_steps=args.num_env_steps,
        eval_every_steps=args.eval_every_steps,
        threads=args.threads,
    )
    print(
        f"bare PPO seed {args.seed}: {result['env_steps'] / result['train_time_s']:.0f} "
        f"env steps/s (train {result['train_time_s']:.1f} s), evaluations: "
        + ", ".join(f"{e['env_steps']}: {e['average_return']:.0f}" for e in result["evals"])
    )
    print(json.dumps({k: v for k, v in result.items() if k != "evals"}))


if __name__ == "__main__":
    main()
