"""Tests of the AsyncUnroller with real actor processes (in-process learner), and of its
shared-memory parts."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
import torch
from helpers_async import leaked_shm_entries, shm_entries
from helpers_off_policy import PPO_CONF, _trainer

from alf import nest
from alf.algorithms.policy import Policy
from alf.algorithms.ppo import PPOAlgorithm
from alf.data_structures import StepType
from alf.environments import create_environment
from alf.tensor_specs import TensorSpec
from alf.unrollers import AsyncUnroller
from alf.unrollers.shared_memory import FragmentPool, SharedParameters

UNROLL = 5
ENVS = 4
ACTORS = 2


def make_ppo(**specs) -> PPOAlgorithm:
    return PPOAlgorithm(**specs)


@pytest.fixture
def algorithm():
    torch.manual_seed(0)
    with create_environment("CartPole-v1", 1) as env:
        return make_ppo(observation_spec=env.observation_spec(), action_spec=env.action_spec())


def make_unroller(algorithm, *, num_actors: int = ACTORS, **kwargs) -> AsyncUnroller:
    return AsyncUnroller(
        env_factory=lambda **kw: create_environment("CartPole-v1", **kw),
        policy=Policy(algorithm=algorithm),
        algorithm_factory=make_ppo,
        num_envs=ENVS,
        unroll_length=UNROLL,
        seed=3,
        num_actors=num_actors,
        startup_timeout_s=60,
        **kwargs,
    )


def test_fragment_pool_round_trip():
    spec = {"a": TensorSpec((3,), torch.float32), "b": TensorSpec((), torch.int64)}
    pool = FragmentPool(spec=spec, num_buffers=3, length=4, batch_size=2)
    assert pool.storage["a"].shape == (3, 4, 2, 3) and pool.storage["a"].is_shared()
    data = {"a": torch.randn(4, 2, 3), "b": torch.arange(8).reshape(4, 2)}
    pool.write(1, data)
    out = pool.read(1)
    assert torch.equal(out["a"], data["a"]) and torch.equal(out["b"], data["b"])
    pool.write(1, {"a": torch.zeros(4, 2, 3), "b": torch.zeros(4, 2, dtype=torch.int64)})
    assert torch.equal(out["a"], data["a"]), "read() must return a private copy"
    assert not pool.read(0)["a"].any()


def test_shared_parameters_publish_and_load(algorithm):
    shared = SharedParameters(module=algorithm, lock=threading.Lock())
    assert shared.version == 0
    copy = make_ppo(observation_spec=algorithm.observation_spec, action_spec=algorithm.action_spec)
    with torch.no_grad():
        for p in algorithm.parameters():
            p.add_(1.0)
    assert shared.publish(algorithm) == 1
    assert shared.load_into(copy) == 1
    for a, b in zip(algorithm.state_dict().values(), copy.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_fragments_are_continuous_per_actor_with_global_env_ids(algorithm):
    before = shm_entries()
    unroller = make_unroller(algorithm, fragments_per_iteration=1)
    try:
        seen: dict[int, list] = {0: [], 1: []}
        while min(len(v) for v in seen.values()) < 3:
            (fragment,) = unroller.collect()
            seen[fragment.actor_id].append(fragment)
    finally:
        unroller.close()
    assert not multiprocessing.active_children()
    assert not leaked_shm_entries(before)
    for actor_id, fragments in seen.items():
        first_env = actor_id * (ENVS // ACTORS)
        for k, fragment in enumerate(fragments):
            exp = fragment.exp
            assert exp.step_type.shape == (UNROLL + 1, ENVS // ACTORS)
            assert exp.env_id[0].tolist() == [first_env, first_env + 1]
            assert fragment.num_old_rows == (0 if k == 0 else 1)
            assert fragment.version == 1  # nothing was published after the start
            new = fragment.new_rows()
            assert new.step_type.shape[0] == (UNROLL + 1 if k == 0 else UNROLL)
        assert (fragments[0].exp.step_type[0] == StepType.FIRST).all()
        for prev, nxt in zip(fragments, fragments[1:], strict=False):
            # The last row of a fragment is the first row of the actor's next one.
            last = nest.map_structure(lambda x: x[-1], prev.exp)
            head = nest.map_structure(lambda x: x[0], nxt.exp)
            for a, b in zip(nest.flatten(last), nest.flatten(head), strict=True):
                assert torch.equal(a, b)
    assert unroller.env_steps_taken >= 6 * UNROLL * (ENVS // ACTORS)


def test_published_parameters_reach_the_actors_and_versions_are_stamped(algorithm):
    unroller = make_unroller(algorithm, num_buffers=2)
    try:
        unroller.collect()
        # Make the policy always push right: a huge bias on action 1's logit.
        with torch.no_grad():
            last = [m for m in algorithm.actor_network.modules() if isinstance(m, torch.nn.Linear)]
            last[-1].bias.copy_(torch.tensor([-1e4, 1e4]))
        for _ in range(2):
            unroller.publish(Policy(algorithm=algorithm))
        assert unroller.version == 3
        newest = []
        for _ in range(20):
            (fragment,) = unroller.collect()
            if fragment.version == 3:
                newest.append(fragment)
            if len(newest) >= 2:
                break
        stats = unroller.pop_stats()
    finally:
        unroller.close()
    assert len(newest) >= 2
    for fragment in newest:
        # Row 0 repeats the previous fragment's last row, chosen by the older version.
        acted = fragment.exp.action[1:][fragment.exp.step_type[1:] != StepType.LAST]
        assert (acted == 1).all()
    assert stats["async/policy_lag_max"] >= stats["async/policy_lag_min"] >= 0
    assert stats["async/actor_env_steps_per_second"] > 0


def test_fragments_older_than_max_policy_lag_are_dropped(algorithm):
    unroller = make_unroller(algorithm, num_buffers=4, max_policy_lag=0)
    try:
        unroller.collect()
        # Let the actors fill every free buffer with the current version, then publish:
        # everything already collected is one version too old.
        deadline = 50
        while unroller._queue_depth() < 3 and deadline:
            threading.Event().wait(0.1)
            deadline -= 1
        unroller.publish(Policy(algorithm=algorithm))
        (fragment,) = unroller.collect()
        stats = unroller.pop_stats()
        version = unroller.version
    finally:
        unroller.close()
    assert fragment.version == version
    assert stats["async/fragments_dropped"] >= 1
    assert stats["async/policy_lag_max"] == 0


def test_bad_actor_and_fragment_counts_are_refused(algorithm):
    with pytest.raises(ValueError, match="multiple of num_actors"):
        make_unroller(algorithm, num_actors=3)
    with pytest.raises(ValueError, match="fragments_per_iteration"):
        make_unroller(algorithm, num_buffers=2, fragments_per_iteration=3)


def test_actions_clipped_by_the_actors_environments_are_counted():
    torch.manual_seed(0)
    with create_environment("Pendulum-v1", 1) as env:
        algorithm = make_ppo(observation_spec=env.observation_spec(), action_spec=env.action_spec())
    with torch.no_grad():
        algorithm.actor_network.mean.bias.fill_(100.0)  # every action far above the bound 2
    unroller = AsyncUnroller(
        env_factory=lambda **kw: create_environment("Pendulum-v1", **kw),
        policy=Policy(algorithm=algorithm),
        algorithm_factory=make_ppo,
        num_envs=2,
        unroll_length=UNROLL,
        num_actors=2,
        fragments_per_iteration=2,
    )
    try:
        fragments = unroller.collect()
        clipped = unroller.num_clipped_actions
    finally:
        unroller.close()
    assert clipped == sum(f.exp.step_type.shape[0] - 1 for f in fragments) * 1
    assert all((f.exp.prev_action[1:] == 2.0).all() for f in fragments)


def test_off_policy_runs_refuse_max_policy_lag(algorithm):
    with pytest.raises(ValueError, match="on-policy algorithms only"):
        make_unroller(algorithm, max_policy_lag=1, keep_every_fragment=True)


def test_resumed_async_run_starts_its_actors_with_the_restored_parameters(tmp_path):
    params = [
        "TrainerConfig.async_unroll=True",
        "create_environment.num_parallel_environments=4",
        "TrainerConfig.unroll_length=8",
        "TrainerConfig.evaluate=False",
        "TrainerConfig.progress_interval_s=1000000",
        "PPOAlgorithm.num_epochs=1",
    ]
    with _trainer(tmp_path, [*params, "TrainerConfig.num_iterations=3"], PPO_CONF) as trainer:
        trainer.train()
        trained = {k: v.clone() for k, v in trainer.algorithm.state_dict().items()}
    with _trainer(tmp_path, [*params, "TrainerConfig.num_iterations=6"], PPO_CONF) as trainer:
        assert trainer.iteration == 3
        published = trainer.unroller._channels.parameters.tensors
        assert trainer.unroller.version == 1
        for name, value in trained.items():
            assert torch.equal(published[name], value), name
