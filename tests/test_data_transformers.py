"""Tests of alf.data_transformers: statistics, frame stacking on both paths, image and
reward transforms, and how the trainer's algorithm carries them."""

from pathlib import Path

import numpy as np
import pytest
import torch

from alf import nest
from alf.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf.algorithms.policy import Policy
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_structures import AlgStep, Experience, StepType, TimeStep
from alf.data_transformers import (
    DataTransformerChain,
    FrameStacker,
    ImageScale,
    ObservationNormalizer,
    RewardNormalizer,
    RewardScaling,
    RunningMeanStd,
    build_data_transformer,
)
from alf.environments import create_environment
from alf.replay_buffers import ReplayBuffer
from alf.tensor_specs import BoundedTensorSpec, TensorSpec, sample_uniform
from alf.unrollers import SyncUnroller


class ObservationEcho(RLAlgorithm):
    """Acts uniformly at random and keeps the observation its policy saw as
    ``rollout_info``: what the policy saw can then be compared with what training sees."""

    def rollout_step(self, time_step: TimeStep, state):
        batch = time_step.step_type.shape[0]
        return AlgStep(output=sample_uniform(self.action_spec, batch), info=time_step.observation)

    predict_step = rollout_step


class ReplayedEcho(ObservationEcho, OffPolicyAlgorithm):
    """The same, stored in a replay buffer."""


def with_transformers(cls, env, ctors, **kwargs):
    transformer = build_data_transformer(ctors, env.observation_spec())
    algorithm = cls(
        observation_spec=transformer.transformed_observation_spec,
        action_spec=env.action_spec(),
        **kwargs,
    )
    algorithm.set_data_transformer(transformer)
    return algorithm


def test_running_mean_std_equals_numpy_over_all_batches():
    stats = RunningMeanStd(shape=(3,))
    rng = np.random.default_rng(0)
    batches = [rng.normal(2.0, 3.0, size=(n, 3)) for n in (5, 1, 40, 7)]
    for batch in batches:
        stats.update(torch.from_numpy(batch))
    everything = np.concatenate(batches)
    np.testing.assert_allclose(stats.mean.numpy(), everything.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats.var.numpy(), everything.var(0), rtol=1e-12)
    assert stats.count.item() == len(everything)


def test_observation_normalizer_transforms_with_the_old_statistics_then_updates():
    spec = TensorSpec((2,), torch.float32)
    normalizer = ObservationNormalizer(observation_spec=spec, clip_value=3.0)
    chain = DataTransformerChain(transformers=[normalizer], observation_spec=spec)
    obs = torch.tensor([[[10.0, -4.0]], [[12.0, -2.0]], [[14.0, 0.0]]])  # [T=3, B=1, 2]
    exp = Experience(
        step_type=torch.full((3, 1), StepType.MID),
        reward=torch.zeros(3, 1),
        discount=torch.ones(3, 1),
        observation=obs,
        prev_action=torch.zeros(3, 1),
        env_id=torch.zeros(3, 1, dtype=torch.int64),
        action=torch.zeros(3, 1),
    )
    first = chain.transform_experience(exp, update="rollout")
    # Transformed with the initial statistics (mean 0, variance 1), clipped at 3.
    assert torch.equal(first.observation, obs.clamp(-3, 3))
    np.testing.assert_allclose(normalizer.stats[0].mean.numpy(), [12.0, -2.0])
    second = chain.transform_experience(exp)  # no update
    expected = (obs - torch.tensor([12.0, -2.0])) / torch.sqrt(torch.tensor(8 / 3 + 1e-8))
    torch.testing.assert_close(second.observation, expected)
    assert normalizer.stats[0].count.item() == 3
    # A "replay" batch leaves rollout-mode statistics alone.
    chain.transform_experience(exp, update="replay")
    assert normalizer.stats[0].count.item() == 3


def test_normalizer_and_image_scale_refuse_observations_they_cannot_handle():
    with pytest.raises(ValueError, match="floating-point"):
        ObservationNormalizer(observation_spec=TensorSpec((2,), torch.uint8))
    with pytest.raises(ValueError, match="uint8"):
        ImageScale(observation_spec=TensorSpec((2,), torch.float32))
    with pytest.raises(ValueError, match="update_mode"):
        ObservationNormalizer(observation_spec=TensorSpec((2,), torch.float32), update_mode="x")
    with pytest.raises(TypeError, match="not a DataTransformer"):
        build_data_transformer([lambda observation_spec: object()], TensorSpec((2,)))


def test_image_scale_maps_bytes_to_the_range_and_leaves_other_leaves():
    spec = {"image": TensorSpec((1, 2, 2), torch.uint8), "speed": TensorSpec((1,))}
    scale = ImageScale(observation_spec=spec, min=-1.0, max=1.0)
    out_spec = scale.transformed_observation_spec
    assert out_spec["image"].dtype == torch.float32 and out_spec["speed"] is spec["speed"]
    image = torch.tensor([0, 255, 51, 255], dtype=torch.uint8).reshape(1, 1, 2, 2)
    ts = TimeStep(
        step_type=torch.zeros(1),
        reward=torch.zeros(1),
        discount=torch.ones(1),
        observation={"image": image, "speed": torch.ones(1, 1)},
        prev_action=torch.zeros(1),
        env_id=torch.zeros(1),
    )
    out, _ = scale.transform_timestep(ts, ())
    torch.testing.assert_close(out.observation["image"].flatten(), torch.tensor([-1, 1, -0.6, 1.0]))
    assert torch.equal(out.observation["speed"], torch.ones(1, 1))


def test_reward_transforms_change_only_training_rewards():
    spec = TensorSpec((2,))
    ts = TimeStep(
        step_type=torch.tensor([StepType.FIRST, StepType.MID]),
        reward=torch.tensor([0.0, 4.0]),
        discount=torch.ones(2),
        observation=torch.zeros(2, 2),
        prev_action=torch.zeros(2),
        env_id=torch.arange(2),
    )
    scaled, _ = RewardScaling(observation_spec=spec, scale=0.5).transform_timestep(ts, ())
    assert scaled.reward.tolist() == [0.0, 2.0]
    normalizer = RewardNormalizer(observation_spec=spec)
    chain = DataTransformerChain(transformers=[normalizer], observation_spec=spec)
    exp = Experience.from_time_step(ts, torch.zeros(2))
    exp = nest.map_structure(lambda x: torch.stack([x, x, x]), exp)
    exp = exp._replace(reward=torch.tensor([[0.0, 2.0], [0.0, 4.0], [0.0, 6.0]]))
    chain.transform_experience(exp, update="rollout")
    # FIRST steps' placeholder rewards are not statistics.
    assert normalizer.stats.count.item() == 3
    out = chain.transform_experience(exp)
    torch.testing.assert_close(out.reward[:, 1], exp.reward[:, 1] / np.sqrt(8 / 3))


def _stack_reference(frames: list[torch.Tensor], starts: list[bool], k: int) -> torch.Tensor:
    """Stacked observation of the last frame, from a per-env list of frames and FIRST flags."""
    start = max(i for i, s in enumerate(starts) if s)
    picked = [frames[max(len(frames) - 1 - j, start)] for j in reversed(range(k))]
    return torch.cat(picked)


def test_frame_stacker_policy_input_matches_a_direct_stack_at_episode_boundaries():
    env = create_environment("CartPole-v1", 3, seed=0, max_episode_steps=5)
    algorithm = with_transformers(ObservationEcho, env, [FrameStacker])
    assert algorithm.observation_spec.shape == (16,)
    unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=6)
    history = [([], []) for _ in range(3)]
    try:
        for call in range(3):
            exp = unroller.unroll()
            assert exp.step_type.shape[0] == 3 + 6 + 1
            assert unroller.num_old_rows == (3 if call == 0 else 4)
            new = unroller.new_rows(exp)
            for t in range(new.step_type.shape[0]):
                for b in range(3):
                    frames, starts = history[b]
                    frames.append(new.observation[t, b])
                    starts.append(bool(new.step_type[t, b] == StepType.FIRST))
                    expected = _stack_reference(frames, starts, 4)
                    assert torch.equal(new.rollout_info[t, b], expected)
            # Raw frames in the experience, stacked ones only in what the policy saw.
            assert exp.observation.shape[-1] == 4
    finally:
        unroller.close()
    assert any(sum(s) > 1 for _, s in history)  # episodes ended inside the unrolls


def test_frame_stacker_on_trajectories_reproduces_what_the_policy_saw():
    env = create_environment("CartPole-v1", 2, seed=1, max_episode_steps=7)
    algorithm = with_transformers(ObservationEcho, env, [FrameStacker])
    unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=5)
    try:
        for _ in range(4):
            exp = unroller.unroll()
            out = algorithm.data_transformer.transform_experience(exp)
            assert out.step_type.shape[0] == 6
            assert torch.equal(out.observation, out.rollout_info)
    finally:
        unroller.close()


def test_replayed_frames_are_stacked_once_from_single_frames_in_the_buffer():
    env = create_environment("CartPole-v1", 2, seed=2, max_episode_steps=9)
    algorithm = with_transformers(
        ReplayedEcho,
        env,
        [FrameStacker],
        mini_batch_size=64,
        mini_batch_length=3,
        replay_buffer_ctor=lambda **kw: ReplayBuffer(max_length=200, **kw),
    )
    buffer = algorithm.build_replay_buffer(num_envs=2)
    assert buffer.data_spec.observation.shape == (4,)  # single frames are stored
    assert algorithm.sample_length == 3 + 3
    unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=4)
    try:
        while not algorithm.can_train():
            algorithm.observe_for_replay(unroller.new_rows(unroller.unroll()))
        for _ in range(30):
            algorithm.observe_for_replay(unroller.new_rows(unroller.unroll()))
    finally:
        unroller.close()
    for _ in range(5):
        batch, _ = algorithm.sample_batch()
        assert batch.observation.shape == (3, 64, 16)
        assert torch.equal(batch.observation, batch.rollout_info)
        assert batch.batch_info.env_ids.shape == (64,)


def test_frame_stacker_tiles_vector_bounds():
    spec = BoundedTensorSpec((2,), torch.float32, minimum=np.array([-1.0, -2.0]), maximum=3.0)
    stacked = FrameStacker(observation_spec=spec, stack_size=3).transformed_observation_spec
    assert stacked.shape == (6,)
    assert np.asarray(stacked.minimum).tolist() == [-1.0, -2.0] * 3


def test_the_transformed_spec_must_be_the_algorithms():
    env = create_environment("CartPole-v1", 1)
    algorithm = ObservationEcho(
        observation_spec=env.observation_spec(), action_spec=env.action_spec()
    )
    chain = build_data_transformer([FrameStacker], env.observation_spec())
    with pytest.raises(ValueError, match="produce observations of spec"):
        algorithm.set_data_transformer(chain)
    env.close()


NORMALIZED_PPO = (
    "TrainerConfig.data_transformer_ctor=[@ObservationNormalizer, @RewardNormalizer]",
    "TrainerConfig.summary_interval=1",
    "TrainerConfig.evaluate=False",
    "TrainerConfig.progress_interval_s=0",
    "TrainerConfig.checkpoint_interval=1000",
)


def _statistics(module_state: dict) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module_state.items() if k.startswith("data_transformer.")}


def _train(root, iterations: int):
    from alf import config as alf_config
    from alf.trainers import RLTrainer, TrainerConfig

    conf = str(Path(__file__).resolve().parents[1] / "alf" / "examples" / "ppo_cart_pole.gin")
    alf_config.load_config(conf, [*NORMALIZED_PPO, f"TrainerConfig.num_iterations={iterations}"])
    return RLTrainer(config=TrainerConfig(), root_dir=str(root))


def test_normalizer_statistics_are_restored_exactly_on_resume_and_in_play(tmp_path):
    from alf.bin.play import load_trained_run
    from alf.trainers import Checkpointer

    root = tmp_path / "run"
    trainer = _train(root, 3)
    try:
        trainer.train()
    finally:
        trainer.close()
    checkpoints = Checkpointer(directory=str(root / "checkpoints"))
    saved = _statistics(checkpoints.load(None, ("algorithm",))["algorithm"]["module"])
    assert set(saved) == {
        "data_transformer.transformers.0.stats.0.mean",
        "data_transformer.transformers.0.stats.0.var",
        "data_transformer.transformers.0.stats.0.count",
        "data_transformer.transformers.1.stats.mean",
        "data_transformer.transformers.1.stats.var",
        "data_transformer.transformers.1.stats.count",
    }
    # Three unrolls of 8 envs x 32 steps (the first row of each is a repeat).
    assert saved["data_transformer.transformers.0.stats.0.count"].item() == 3 * 8 * 33
    assert saved["data_transformer.transformers.0.stats.0.var"].ne(1.0).all()

    resumed = _train(root, 5)
    try:
        restored = _statistics(resumed.algorithm.state_dict())
        for name, value in saved.items():
            assert torch.equal(restored[name], value), name
        resumed.train()
        after = _statistics(resumed.algorithm.state_dict())
    finally:
        resumed.close()
    assert after["data_transformer.transformers.0.stats.0.count"].item() == 5 * 8 * 33

    env, algorithm = load_trained_run(str(root))
    try:
        played = _statistics(algorithm.state_dict())
    finally:
        env.close()
    for name, value in after.items():
        assert torch.equal(played[name], value), name


def _reward_batch(rewards: list[list[float]], firsts: list[list[bool]], env_ids: list[int]):
    t, b = len(rewards), len(env_ids)
    return Experience(
        step_type=torch.tensor(
            [[StepType.FIRST if f else StepType.MID for f in row] for row in firsts]
        ),
        reward=torch.tensor(rewards),
        discount=torch.ones(t, b),
        observation=torch.zeros(t, b, 2),
        prev_action=torch.zeros(t, b),
        env_id=torch.tensor([env_ids] * t),
        action=torch.zeros(t, b),
    )


def test_return_based_reward_normalizer_uses_discounted_returns_across_overlapping_unrolls():
    gamma = 0.9
    normalizer = RewardNormalizer(
        observation_spec=TensorSpec((2,)), return_based=True, gamma=gamma, clip_value=None
    )
    rng = np.random.default_rng(3)
    # Two environments, 9 steps, an episode restart in env 1 at step 5.
    rewards = rng.normal(1.0, 2.0, size=(9, 2))
    firsts = np.zeros((9, 2), dtype=bool)
    firsts[0, :] = True
    firsts[5, 1] = True
    rewards[firsts] = 0.0
    expected = []
    returns = [0.0, 0.0]
    for t in range(1, 9):
        for b in range(2):
            if firsts[t, b]:
                returns[b] = 0.0
                continue
            returns[b] = gamma * returns[b] + rewards[t, b]
            expected.append(returns[b])
    # Unrolls of 4 steps overlap by a row: rows 0-4 then 4-8 (the second batch's
    # columns are in the other order: statistics follow env_id, not the column).
    first_batch = _reward_batch(rewards[:5].tolist(), firsts[:5].tolist(), [0, 1])
    second_batch = _reward_batch(rewards[4:, ::-1].tolist(), firsts[4:, ::-1].tolist(), [1, 0])
    normalizer.update_statistics(first_batch)
    normalizer.update_statistics(second_batch)
    assert normalizer.stats.count.item() == len(expected)
    assert normalizer.stats.mean.item() == pytest.approx(np.mean(expected))
    assert normalizer.stats.var.item() == pytest.approx(np.var(expected))


def test_return_based_reward_normalizer_refuses_replay_updates_and_centering():
    with pytest.raises(ValueError, match="update_mode='rollout'"):
        RewardNormalizer(observation_spec=TensorSpec((2,)), return_based=True, update_mode="replay")
    with pytest.raises(ValueError, match="center"):
        RewardNormalizer(observation_spec=TensorSpec((2,)), return_based=True, center=True)
