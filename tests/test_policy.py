"""One policy object acts everywhere: sync and async collection, evaluation, ``play``,
``export`` and the Python API all act through :class:`alf.algorithms.policy.Policy`, and
none of them builds its own act step."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import cloudpickle
import pytest
import torch
from helpers_cli import REPO

import alf
from alf.algorithms.policy import Policy, PolicyState
from alf.algorithms.ppo import PPOAlgorithm
from alf.data_structures import StepType
from alf.environments import create_environment
from alf.unrollers import SyncUnroller
from alf.unrollers.actor import ActorSetup, _build_collector

ALF = REPO / "alf"
CONF = str(ALF / "examples" / "ppo_cart_pole.gin")

# What acting is made of: only the policy calls these on behalf of others.
ACT_STEP_CALLS = {"rollout_step", "predict_step", "transform_timestep", "reset_state_on_first"}
# The algorithm layer defines the hooks and derives specs and training passes from them.
ALGORITHM_LAYER = {ALF / "algorithms", ALF / "networks", ALF / "data_transformers"}


def _called_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            names.add(name)
    return names


def test_no_module_above_the_algorithms_builds_its_own_act_step() -> None:
    offenders = {}
    for path in sorted(ALF.rglob("*.py")):
        if any(path == layer or layer in path.parents for layer in ALGORITHM_LAYER):
            continue
        calls = _called_names(path) & ACT_STEP_CALLS
        if calls:
            offenders[str(path.relative_to(REPO))] = sorted(calls)
    assert not offenders, f"act steps built outside alf/algorithms/policy.py: {offenders}"


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts the policy's exploring and greedy steps, whoever takes them."""
    counts: Counter = Counter()
    for name in ("explore_step", "greedy_step"):
        original = getattr(Policy, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            counts[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Policy, name, counting)
    return counts


def test_training_collects_and_evaluates_through_the_policy(tmp_path: Path, counted) -> None:
    bindings = {
        "TrainerConfig.num_env_steps": 512,
        "TrainerConfig.eval_interval": 2,
        "TrainerConfig.num_eval_episodes": 1,
        "TrainerConfig.progress_interval_s": 0,
    }
    run = alf.train(CONF, root_dir=str(tmp_path / "run"), bindings=bindings)
    assert counted["explore_step"] >= 512 // 8  # 8 environments: one step each per call
    assert counted["greedy_step"] > 0  # the evaluations
    counted.clear()
    run.evaluate(num_episodes=1, seed=0)
    assert counted["greedy_step"] > 0 and counted["explore_step"] == 0
    counted.clear()
    play = alf.load(run.root_dir).policy
    assert isinstance(play, Policy) and play.name == "policy"
    play(torch.zeros(4).numpy())
    assert counted["greedy_step"] == 1

    from alf.export import export_policy
    from alf.trainers.trained_run import load_trained_run

    env, algorithm = load_trained_run(run.root_dir)
    env.close()
    counted.clear()
    export_policy(algorithm, str(tmp_path / "policy.pt"), format="torchscript")
    assert counted["greedy_step"] >= 1  # traced through the policy


def test_an_actor_collects_through_its_policy(counted) -> None:
    def make_env(**kwargs):
        return create_environment("CartPole-v1", **kwargs)

    def make_algorithm(**kwargs):
        return PPOAlgorithm(**kwargs)

    setup = ActorSetup(
        actor_id=0,
        config_text="",
        env_factory=cloudpickle.dumps(make_env),
        envs_per_actor=2,
        algorithm_factory=cloudpickle.dumps(make_algorithm),
        env_seed=0,
        torch_seed=0,
        unroll_length=5,
        initial_collect_steps_left=0,
        env_id_offset=0,
    )
    collector = _build_collector(setup, make_env, make_algorithm)
    try:
        assert isinstance(collector.policy, Policy)
        assert not collector.policy.algorithm.training
        collector.collect()
        assert counted["explore_step"] == 6  # the first row and 5 steps
    finally:
        collector.close()


def test_publish_is_how_parameters_reach_a_collecting_policy() -> None:
    env = create_environment("CartPole-v1", 2, seed=0)
    spec = {"observation_spec": env.observation_spec(), "action_spec": env.action_spec()}
    learner, copy = PPOAlgorithm(**spec), PPOAlgorithm(**spec)
    unroller = SyncUnroller(env=env, policy=Policy(algorithm=copy), unroll_length=2)
    try:
        differs = any(
            not torch.equal(a, b)
            for a, b in zip(learner.state_dict().values(), copy.state_dict().values(), strict=True)
        )
        assert differs
        unroller.publish(Policy(algorithm=learner))
        for name, value in learner.state_dict().items():
            assert torch.equal(copy.state_dict()[name], value), name
    finally:
        unroller.close()


def test_greedy_steps_reset_the_state_where_episodes_start() -> None:
    env = create_environment("CartPole-v1", 3, seed=0)
    try:
        algorithm = PPOAlgorithm(
            observation_spec=env.observation_spec(), action_spec=env.action_spec()
        )
        policy = Policy(algorithm=algorithm.eval())
        state = policy.initial_state(3, greedy=True)
        assert isinstance(state, PolicyState)
        time_step = env.reset()
        assert (time_step.step_type == StepType.FIRST).all()
        with torch.no_grad():
            action, state = policy.greedy_step(time_step, state)
        assert action.shape == (3,)
        assert policy.state_spec(greedy=True) == PolicyState(
            algorithm=algorithm.predict_state_spec, transform=algorithm.data_transformer.state_spec
        )
    finally:
        env.close()


def test_a_policy_name_must_be_a_plain_word() -> None:
    env = create_environment("CartPole-v1", 1, seed=0)
    try:
        algorithm = PPOAlgorithm(
            observation_spec=env.observation_spec(), action_spec=env.action_spec()
        )
        with pytest.raises(ValueError, match="name"):
            Policy(algorithm=algorithm, name="a/b")
    finally:
        env.close()
