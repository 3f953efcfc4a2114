"""Offline data for the offline RL tests: buffers filled with generated episodes (random
transitions, or a scripted Pendulum controller's), installed as an algorithm's only
training data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from alf import nest
from alf.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf.data_structures import Experience, StepType, TimeStep
from alf.replay_buffers import ReplayBuffer
from alf.tensor_specs import BoundedTensorSpec, TensorSpec


def random_leaf(
    spec: TensorSpec, batch: int, generator: torch.Generator, *, mask: bool = False
) -> torch.Tensor:
    """``[batch, ...]`` values of ``spec``: uniform in a bounded spec's bounds (integers
    for a discrete one; all ones for an action ``mask``), standard normal otherwise."""
    shape = (batch, *spec.shape)
    if not isinstance(spec, BoundedTensorSpec):
        return torch.randn(shape, generator=generator).to(spec.dtype)
    if mask:  # everything allowed
        return torch.ones(shape, dtype=spec.dtype)
    low, high = (
        torch.as_tensor(np.broadcast_to(b, spec.shape).copy(), dtype=torch.float32)
        for b in (spec.minimum, spec.maximum)
    )
    if spec.is_discrete:
        values = low + (high - low + 1) * torch.rand(shape, generator=generator)
        return values.floor().clamp(max=high).to(spec.dtype)
    return (low + (high - low) * torch.rand(shape, generator=generator)).to(spec.dtype)


def random_buffer(
    algorithm: OffPolicyAlgorithm,
    *,
    num_envs: int = 2,
    steps: int = 48,
    episode_length: int = 8,
    seed: int = 0,
) -> ReplayBuffer:
    """A buffer of ``algorithm``'s experience spec holding ``steps`` steps per
    environment of random episodes (``episode_length`` steps each, the last a terminal
    one), random observations, actions and rewards."""
    spec = algorithm.experience_spec()
    buffer = ReplayBuffer(data_spec=spec, num_envs=num_envs, max_length=steps)
    generator = torch.Generator().manual_seed(seed)
    for t in range(steps):
        position = t % episode_length
        kind = (
            StepType.FIRST
            if position == 0
            else StepType.LAST
            if position == episode_length - 1
            else StepType.MID
        )
        step = nest.map_structure(lambda s: random_leaf(s, num_envs, generator), spec)
        step = step._replace(
            observation=nest.map_structure_with_path(
                lambda path, s: random_leaf(s, num_envs, generator, mask="mask" in str(path)),
                algorithm.observation_spec,
            ),
            action=nest.map_structure(
                lambda s: random_leaf(s, num_envs, generator), algorithm.action_spec
            ),
            step_type=torch.full((num_envs,), int(kind), dtype=spec.step_type.dtype),
            discount=torch.full((num_envs,), 0.0 if kind == StepType.LAST else 1.0),
            reward=torch.zeros(num_envs) if kind == StepType.FIRST else step.reward,
            env_id=torch.arange(num_envs),
        )
        buffer.add_batch(step)
    return buffer


def train_offline_on(algorithm: OffPolicyAlgorithm, buffer: ReplayBuffer) -> None:
    """Makes ``buffer`` the algorithm's only training data (an empty online buffer)."""
    algorithm.build_replay_buffer(num_envs=1)
    algorithm.set_offline_buffers([buffer], 1.0)


def pendulum_expert(observation: np.ndarray) -> np.ndarray:
    """A swing-up controller for Pendulum-v1 (about -160 average return): pumps energy
    towards the upright state's, then holds it with a PD law near the top."""
    cos, sin, speed = observation[..., 0], observation[..., 1], observation[..., 2]
    angle = np.arctan2(sin, cos)
    energy = 0.5 * speed**2 + 15.0 * cos  # 15 at rest upright
    pump = np.clip(0.2 * (15.0 - energy) * np.sign(speed + 1e-6), -2.0, 2.0)
    hold = np.clip(-10.0 * angle - 2.0 * speed, -2.0, 2.0)
    return np.where(cos > 0.85, hold, pump)[..., None].astype(np.float32)


def pendulum_buffer(
    algorithm: OffPolicyAlgorithm,
    *,
    episodes: int,
    noise: float,
    seed: int = 0,
    policy: Callable[[np.ndarray], np.ndarray] = pendulum_expert,
) -> ReplayBuffer:
    """``episodes`` Pendulum-v1 episodes (200 steps, time-limit truncated) of ``policy``
    with Gaussian action noise of std ``noise``, one environment each, as ALF stores
    them (a FIRST step with reward 0, the action taken at each step)."""
    spec = algorithm.experience_spec()
    env = gym.make("Pendulum-v1")
    buffer = ReplayBuffer(data_spec=spec, num_envs=episodes, max_length=201)
    rng = np.random.default_rng(seed)
    steps: list[list[Experience]] = []
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed + episode)
        rows = []
        reward, kind = 0.0, StepType.FIRST
        for t in range(201):
            action = policy(observation) + noise * rng.standard_normal(1).astype(np.float32)
            action = np.clip(action, -2.0, 2.0)
            rows.append((kind, reward, observation.astype(np.float32), action))
            if t < 200:
                observation, reward, _, _, _ = env.step(action)
            kind = StepType.LAST if t == 199 else StepType.MID
        steps.append(rows)
    env.close()
    for t in range(201):
        kinds, rewards, observations, actions = zip(*(rows[t] for rows in steps), strict=True)
        step = Experience(
            step_type=torch.tensor([int(k) for k in kinds], dtype=spec.step_type.dtype),
            reward=torch.tensor(rewards, dtype=torch.float32),
            discount=torch.ones(episodes),
            observation=torch.from_numpy(np.stack(observations)),
            prev_action=torch.zeros(episodes, 1),
            env_id=torch.arange(episodes),
            action=torch.from_numpy(np.stack(actions)),
        )
        buffer.add_batch(step)
    return buffer


def greedy_return(algorithm: Any, *, episodes: int = 5, seed: int = 1000) -> float:
    """The average return of ``algorithm.predict_step`` (after its data transformers)
    on Pendulum-v1."""
    env = gym.make("Pendulum-v1")
    returns = []
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed + episode)
        total = 0.0
        for _ in range(200):
            time_step = TimeStep(
                step_type=torch.full((1,), int(StepType.MID), dtype=torch.int32),
                reward=torch.zeros(1),
                discount=torch.ones(1),
                observation=torch.from_numpy(observation[None].astype(np.float32)),
                prev_action=torch.zeros(1, 1),
                env_id=torch.zeros(1, dtype=torch.int64),
            )
            transformer = algorithm.data_transformer
            with torch.no_grad():
                time_step, _ = transformer.transform_timestep(
                    time_step, transformer.initial_state(1)
                )
                action = algorithm.predict_step(time_step, ()).output
            observation, reward, _, _, _ = env.step(action[0].numpy())
            total += float(reward)
        returns.append(total)
    env.close()
    return float(np.mean(returns))
