"""Several policies in one multi-agent game: the policy mapping, MultiPolicyAlgorithm's
rows, learning and checkpoints, and runs through the train command (sync PPO, async
APPO, a frozen policy, resume, bad input)."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("pettingzoo")

from helpers_cli import REPO, assert_clean_user_error, play_cmd, run_cli, train_cmd  # noqa: E402

from alf.algorithms.factory import make_algorithm  # noqa: E402
from alf.algorithms.multi_policy import MultiPolicyAlgorithm  # noqa: E402
from alf.algorithms.policy import Policy  # noqa: E402
from alf.algorithms.ppo import PPOAlgorithm  # noqa: E402
from alf.algorithms.rl_algorithm import LearningSetup  # noqa: E402
from alf.config import ConfigValueError  # noqa: E402
from alf.data_structures import Trajectory  # noqa: E402
from alf.environments.pettingzoo_environment import pettingzoo_environment  # noqa: E402
from alf.environments.pettingzoo_games import policy_mapping  # noqa: E402
from alf.unrollers.sync_unroller import SyncUnroller  # noqa: E402

TESTS = Path(__file__).resolve().parent
RACE = "pettingzoo:alf_test_multiagent"
AGENTS = ("runner_0", "runner_1", "runner_2")


@pytest.fixture(autouse=True)
def _test_modules_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))


def test_policy_mapping_strategies() -> None:
    shared = policy_mapping(agents=AGENTS)
    assert shared.policy_names == ("shared",) and shared.agent_policies == (0, 0, 0)
    assert shared.is_shared
    per_agent = policy_mapping(agents=AGENTS, mapping="per_agent")
    assert per_agent.policy_names == AGENTS and per_agent.agent_policies == (0, 1, 2)
    teams = policy_mapping(agents=("adversary_0", "agent_0", "agent_1"), mapping="per_team")
    assert teams.policy_names == ("adversary", "agent") and teams.agent_policies == (0, 1, 1)
    chosen = policy_mapping(
        agents=AGENTS, mapping={"runner_0": "a", "runner_1": "b", "runner_2": "a"}, frozen=("b",)
    )
    assert chosen.policy_names == ("a", "b") and chosen.agent_policies == (0, 1, 0)
    assert not chosen.is_shared
    assert per_agent.groups == AGENTS and shared.groups is None
    assert teams.groups == ("adversary", "agent", "agent")
    assert policy_mapping(agents=("adversary_0", "agent_0")).groups == ("adversary", "agent")
    odd = policy_mapping(
        agents=AGENTS, mapping=lambda agent: "odd" if agent[-1] in "13" else "even"
    )
    assert odd.agent_policies == (0, 1, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mapping": "per_seat"}, "per_seat"),
        ({"mapping": {"runner_0": "a", "runner_1": "a"}}, "'runner_2' is unmapped"),
        ({"mapping": "per_agent", "frozen": ("nobody",)}, "'nobody' is none"),
        ({"mapping": lambda agent: ""}, "policy names"),
    ],
)
def test_a_bad_policy_mapping_is_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigValueError, match=message):
        policy_mapping(agents=AGENTS, **kwargs)


def _race(num_envs: int = 6) -> object:
    return pettingzoo_environment(
        env_name=RACE,
        num_envs=num_envs,
        seed=0,
        render_mode=None,
        max_episode_steps=None,
        env_kwargs=None,
        for_evaluation=False,
        first_env_index=0,
        drop_nonfinite=False,
    )


def _multi(env: object, frozen: tuple[str, ...] = ()) -> MultiPolicyAlgorithm:
    ctor = functools.partial(
        MultiPolicyAlgorithm,
        algorithm_ctor=functools.partial(PPOAlgorithm, num_epochs=2, mini_batch_size=16),
        policy_names=("fast", "slow"),
        agent_policies=(0, 1, 0),
        frozen=frozen,
    )
    torch.manual_seed(0)
    return make_algorithm(
        observation_spec=env.observation_spec(), action_spec=env.action_spec(), algorithm_ctor=ctor
    )


def test_each_policy_acts_on_the_rows_of_its_agents() -> None:
    env = _race()
    algorithm = _multi(env)
    time_step = env.reset()
    step = algorithm.predict_step(time_step, ())
    fast_rows, slow_rows = torch.tensor([0, 2, 3, 5]), torch.tensor([1, 4])
    for name, rows in (("fast", fast_rows), ("slow", slow_rows)):
        rows_only = type(time_step)(*(field[rows] for field in time_step[:6]))
        alone = algorithm.policies[name].predict_step(rows_only, ())
        torch.testing.assert_close(step.output[rows], alone.output)
    env.close()


def test_learning_updates_only_the_policies_that_are_not_frozen(tmp_path: Path) -> None:
    env = _race()
    algorithm = _multi(env, frozen=("slow",))
    policy = Policy(algorithm=algorithm)
    algorithm.prepare_learning(LearningSetup(num_envs=6, unroll_length=8))
    unroller = SyncUnroller(env=env, policy=policy, unroll_length=8)
    before = {k: v.clone() for k, v in algorithm.state_dict().items()}
    stats = algorithm.learn(unroller.collect())
    after = algorithm.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("policies.fast.") for k in changed)
    assert any(k.startswith("fast/") for k in stats) and not any(
        k.startswith("slow/") for k in stats
    )
    state = algorithm.checkpoint_state()
    assert set(state["optimizer"]) == {"fast"}
    restored = _multi(_race(), frozen=("slow",))
    restored.load_checkpoint_state(state)
    for key, value in algorithm.state_dict().items():
        torch.testing.assert_close(restored.state_dict()[key], value)
    unroller.close()


def _records(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "progress.jsonl").read_text().splitlines()]


RUN = (
    f"create_environment.env_name='{RACE}'",
    "create_environment.num_parallel_environments=6",
    "policy_mapping.mapping='per_agent'",
    "policy_mapping.frozen=('runner_2',)",
    "TrainerConfig.summary_interval=2",
    "TrainerConfig.checkpoint_interval=2",
    "TrainerConfig.eval_interval=0",
    "TrainerConfig.num_eval_environments=3",
    "PPOAlgorithm.num_epochs=1",
)


def test_a_run_with_a_policy_per_agent_and_a_frozen_one(tmp_path: Path) -> None:
    root = tmp_path / "race"
    first = run_cli(train_cmd(root, *RUN, "TrainerConfig.num_iterations=4"), pythonpath=TESTS)
    assert first.returncode == 0, first.stderr[-3000:]
    train = [r for r in _records(root) if "train/runner_0/loss" in r]
    assert train and "train/runner_1/loss" in train[-1]
    evals = [r for r in _records(root) if "eval/average_return" in r]
    # Each policy's agents' evaluation returns (the race pays 1 per move).
    assert {f"eval/runner_{i}/average_return" for i in range(3)} <= set(evals[-1])
    # play rebuilds one game: a row per agent.
    played = run_cli(play_cmd(root, "--num_episodes=3"), pythonpath=TESTS)
    assert played.returncode == 0, played.stderr[-3000:]
    assert played.stdout.count("episode ") == 3
    exported = run_cli(
        [
            sys.executable,
            "-m",
            "alf.bin.export",
            f"--root_dir={root}",
            f"--out={tmp_path / 'race.pt'}",
            "--format=torchscript",
        ],
        pythonpath=TESTS,
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    model = torch.jit.load(str(tmp_path / "race.pt"))
    actions = model(torch.ones(3, dtype=torch.int32), torch.zeros(3, 2))
    assert actions[0].shape == (3,)
    # The frozen policy learns nothing (no loss); its agent's return is reported.
    assert {key for key in train[-1] if key.startswith("train/runner_2/")} <= {
        "train/runner_2/average_return"
    }
    saved = torch.load(root / "checkpoints" / "ckpt-4.pt", weights_only=True)
    assert set(saved["algorithm"]["optimizer"]) == {"runner_0", "runner_1"}
    frozen = {k: v for k, v in saved["algorithm"]["module"].items() if ".runner_2." in k}
    assert frozen
    resumed = run_cli(train_cmd(root, *RUN, "TrainerConfig.num_iterations=6"), pythonpath=TESTS)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    later = torch.load(root / "checkpoints" / "ckpt-6.pt", weights_only=True)["algorithm"]
    for key, value in frozen.items():  # never trained, across the resume too
        torch.testing.assert_close(later["module"][key], value)
    learned = [
        k
        for k in frozen
        if not torch.equal(
            later["module"][k.replace(".runner_2.", ".runner_0.")],
            saved["algorithm"]["module"][k.replace(".runner_2.", ".runner_0.")],
        )
    ]
    assert learned  # runner_0's policy kept learning after the resume


PER_AGENT = (
    f"create_environment.env_name='{RACE}'",
    "create_environment.num_parallel_environments=6",
    "policy_mapping.mapping='per_agent'",
    "TrainerConfig.num_eval_environments=3",
)


def _every_policy_learns(root: Path, conf: str, *params: str) -> None:
    """Trains ``conf`` with a policy per agent; every policy reports its loss."""
    result = run_cli(
        train_cmd(root, *PER_AGENT, *params, conf=REPO / "alf" / "examples" / conf),
        pythonpath=TESTS,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    train = [r for r in _records(root) if "train/runner_2/loss" in r]
    assert train and {"train/runner_0/loss", "train/runner_1/loss"} <= set(train[-1])


def test_an_async_appo_run_with_a_policy_per_agent(tmp_path: Path) -> None:
    _every_policy_learns(
        tmp_path / "async",
        "appo_cart_pole.gin",
        "TrainerConfig.num_iterations=4",
        "TrainerConfig.unroll_length=8",
        "TrainerConfig.summary_interval=2",
        "TrainerConfig.eval_interval=0",
        "AppoAlgorithm.num_epochs=1",
    )


@pytest.mark.parametrize(
    ("params", "keywords"),
    [
        (
            ("policy_mapping.mapping={'runner_0': 'a', 'runner_1': 'b'}",),
            ["policy_mapping.mapping", "'runner_2' is unmapped"],
        ),
        (
            (
                "create_environment.env_name='pettingzoo:pettingzoo.classic.connect_four_v3'",
                "create_environment.num_parallel_environments=2",
                "policy_mapping.mapping='per_agent'",
            ),
            ["policy_mapping.mapping", "turn-based"],
        ),
    ],
)
def test_a_bad_mapping_stops_the_run_in_one_line(
    tmp_path: Path, params: tuple[str, ...], keywords: list[str]
) -> None:
    root = tmp_path / "run"
    base = (
        f"create_environment.env_name='{RACE}'",
        "create_environment.num_parallel_environments=6",
    )
    result = run_cli(
        train_cmd(root, *base, *params, "TrainerConfig.num_iterations=2"), pythonpath=TESTS
    )
    assert_clean_user_error(result, "alf.bin.train", *keywords)
    assert result.returncode == 2
    assert not (root / "checkpoints").exists()


def test_trajectory_rows_split_by_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows a policy learns from are exactly those of its agents (by env_id), with
    env ids among its own rows (for a replay buffer sized for them)."""
    env = _race()
    algorithm = _multi(env)
    unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=4)
    trajectory = unroller.collect()
    seen: dict[str, object] = {}
    for name, sub in algorithm.policies.items():

        def record(part: Trajectory, name: str = name) -> dict[str, float]:
            seen[name] = part.experience()
            return {}

        monkeypatch.setattr(sub, "learn", record)
    algorithm.learn(trajectory)
    whole = trajectory.experience()
    for name, rows in (("fast", [0, 2, 3, 5]), ("slow", [1, 4])):
        torch.testing.assert_close(seen[name].observation, whole.observation[:, rows])
        assert seen[name].env_id[0].tolist() == list(range(len(rows)))
    unroller.close()


def test_an_off_policy_run_with_a_policy_per_agent(tmp_path: Path) -> None:
    """DQN: each policy's replay buffer holds its own agents' rows (local env ids)."""
    _every_policy_learns(
        tmp_path / "dqn",
        "dqn_cart_pole.gin",
        "TrainerConfig.num_iterations=80",
        "TrainerConfig.initial_collect_steps=60",
        "TrainerConfig.summary_interval=20",
    )
