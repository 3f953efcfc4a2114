"""PettingZoo games as batch rows: simultaneous games (``parallel_env``), agents that
leave before their game ends, turn-based games with opponents, and bad input through the
train command."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")

from helpers_cli import assert_clean_user_error, run_cli, snapshot, train_cmd  # noqa: E402

from alf.data_structures import StepType  # noqa: E402
from alf.environments.create_environment import create_environment  # noqa: E402
from alf.environments.game_heuristics import (  # noqa: E402
    connect_four,
    connect_four_wins,
    tictactoe,
)
from alf.environments.pettingzoo_environment import pettingzoo_environment  # noqa: E402
from alf.environments.pettingzoo_games import game_info  # noqa: E402
from alf.environments.pettingzoo_turns import TurnBasedEnvironment  # noqa: E402
from alf.environments.suite_gym import MissingExtraError, UnknownEnvironmentError  # noqa: E402
from alf.unrollers.episode_tracker import EpisodeTracker  # noqa: E402

TESTS = Path(__file__).resolve().parent
SPREAD = "pettingzoo:mpe2.simple_spread_v3"
RACE = "pettingzoo:alf_test_multiagent"
CONNECT_FOUR = "pettingzoo:pettingzoo.classic.connect_four_v3"


@pytest.fixture(autouse=True)
def _test_modules_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))


def _build(env_name: str, num_envs: int, seed: int | None = 0, **kwargs: object) -> object:
    return pettingzoo_environment(
        env_name=env_name,
        num_envs=num_envs,
        seed=seed,
        render_mode=None,
        max_episode_steps=kwargs.pop("max_episode_steps", None),
        env_kwargs=kwargs or None,
        for_evaluation=False,
        first_env_index=0,
        drop_nonfinite=False,
    )


def test_each_agent_of_each_game_is_a_row() -> None:
    env = _build(SPREAD, 6)
    assert env.batch_size == 6
    assert env.agent_names == ("agent_0", "agent_1", "agent_2") * 2
    first = env.reset()
    assert first.observation.shape == (6, 18)
    assert (first.step_type == StepType.FIRST).all()
    steps = [env.step(torch.zeros(6, dtype=torch.int64)) for _ in range(26)]
    kinds = [s.step_type.tolist() for s in steps]
    # MPE's games last 25 cycles: truncated (discount 1) at the 25th step, then all FIRST.
    assert kinds[23] == [StepType.MID] * 6
    assert kinds[24] == [StepType.LAST] * 6 and steps[24].discount.tolist() == [1.0] * 6
    assert kinds[25] == [StepType.FIRST] * 6 and steps[25].reward.tolist() == [0.0] * 6
    env.close()


def test_sync_and_subprocess_batches_are_the_same_games() -> None:
    """Seeded alike, both backends give the same rows for the same actions, the
    subprocess workers each holding whole games."""
    actions = torch.from_numpy(np.random.default_rng(0).integers(0, 5, (30, 12)))
    observations = []
    for mode in ("sync", "subprocess"):
        env = create_environment(
            env_name=SPREAD,
            num_parallel_environments=12,
            vectorization_mode=mode,
            num_workers=2,
            seed=3,
        )
        seen = [env.reset().observation]
        seen += [env.step(a).observation for a in actions]
        observations.append(torch.stack(seen))
        env.close()
    torch.testing.assert_close(observations[0], observations[1])


def test_an_agent_that_leaves_early_stays_last_until_its_game_ends() -> None:
    """runner_0 terminates after 2 moves, runner_1 after 3, runner_2 after 4: each row
    ends once (LAST, discount 0, its reward), stays LAST (reward 0) until the game
    ends, and the three start again together."""
    env = _build(RACE, 3)
    tracker = EpisodeTracker(batch_size=3)
    time_step = env.reset()
    tracker.update(time_step)
    kinds, rewards, discounts = [], [], []
    for _ in range(5):
        time_step = env.step(torch.ones(3, dtype=torch.int64))
        tracker.update(time_step)
        kinds.append(time_step.step_type.tolist())
        rewards.append(time_step.reward.tolist())
        discounts.append(time_step.discount.tolist())
    first, mid, last = StepType.FIRST, StepType.MID, StepType.LAST
    assert kinds == [
        [mid, mid, mid],
        [last, mid, mid],
        [last, last, mid],
        [last, last, last],
        [first, first, first],
    ]
    assert rewards[:4] == [[1, 1, 1], [1, 1, 1], [0, 1, 1], [0, 0, 1]]
    assert discounts[1][0] == 0.0 and discounts[3] == [0.0, 0.0, 0.0]
    # Each agent's episode is counted once, with its own length and return.
    assert sorted(zip(tracker.completed_env_ids, tracker.completed_lengths, strict=True)) == [
        (0, 2),
        (1, 3),
        (2, 4),
    ]
    assert sorted(tracker.completed_returns) == [2.0, 3.0, 4.0]
    env.close()


def test_a_game_cut_by_max_episode_steps_truncates_its_agents() -> None:
    env = _build(RACE, 3, max_episode_steps=2)
    env.reset()
    env.step(torch.zeros(3, dtype=torch.int64))
    capped = env.step(torch.zeros(3, dtype=torch.int64))
    assert capped.step_type.tolist() == [StepType.LAST] * 3
    assert capped.discount.tolist() == [1.0] * 3
    assert env.step(torch.zeros(3, dtype=torch.int64)).step_type.tolist() == [StepType.FIRST] * 3


def _win_rate(opponent: str, episodes: int = 300) -> float:
    info = game_info(CONNECT_FOUR)
    env = TurnBasedEnvironment(info=info, num_envs=6, seed=0, opponent=opponent)
    time_step, returns = env.reset(), []
    current = torch.zeros(6)
    while len(returns) < episodes:
        legal = time_step.observation["action_mask"].float() + 1e-6
        time_step = env.step(torch.multinomial(legal, 1).squeeze(1))
        current += time_step.reward
        returns += current[time_step.step_type == StepType.LAST].tolist()
        current[time_step.step_type == StepType.FIRST] = 0.0
    env.close()
    return float(np.mean(np.array(returns) > 0))


def test_turn_based_game_one_learner_row_per_game_with_rotating_seats() -> None:
    info = game_info(CONNECT_FOUR)
    assert info.turn_based and info.agents == ("player_0", "player_1")
    env = TurnBasedEnvironment(info=info, num_envs=2, seed=0, opponent="random")
    first = env.reset()
    assert env.agent_names == ("player_0", "player_1")
    # The learner moving second finds the opponent's first piece on the board.
    boards = first.observation["observation"]
    assert int(boards[0].sum()) == 0 and int(boards[1][:, :, 1].sum()) == 1
    # Random play against random play wins about half the games; against the
    # heuristic (win, else block, else random) far fewer.
    assert 0.35 < _win_rate("random") < 0.65
    assert _win_rate("heuristic") < 0.15


def test_connect_four_heuristic_wins_then_blocks() -> None:
    planes = np.zeros((6, 7, 2), dtype=np.int8)
    planes[5, 0:3, 1] = 1  # the opponent threatens the bottom row at column 3
    mask = np.ones(7, dtype=np.int8)
    rng = np.random.default_rng(0)
    assert connect_four({"observation": planes, "action_mask": mask}, rng) == 3
    planes[2:5, 6, 0] = 1  # and we can win at once in column 6
    assert connect_four({"observation": planes, "action_mask": mask}, rng) == 6
    assert connect_four_wins(planes[:, :, 0], 1, 6)


def test_tictactoe_heuristic_wins_then_blocks_then_takes_the_centre() -> None:
    planes = np.zeros((3, 3, 2), dtype=np.int8)
    mask = np.ones(9, dtype=np.int8)
    rng = np.random.default_rng(0)
    assert tictactoe({"observation": planes, "action_mask": mask}, rng) == 4
    planes[0, 0, 1] = planes[0, 1, 1] = 1  # the opponent threatens square 2
    mask[[0, 1]] = 0
    assert tictactoe({"observation": planes, "action_mask": mask}, rng) == 2
    planes[1, 0, 0] = planes[2, 0, 0] = 1  # our marks on squares 3, 6 and 7:
    planes[2, 1, 0] = 1  # square 8 completes our bottom row: a win beats a block
    mask[[3, 6, 7]] = 0
    assert tictactoe({"observation": planes, "action_mask": mask}, rng) == 8


def test_missing_package_and_bad_modules_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UnknownEnvironmentError, match="neither parallel_env"):
        game_info("pettingzoo:alf_test_bad_envs")
    # Its agents' spaces differ: padded into one batch (refused under one policy).
    assert game_info("pettingzoo:alf_test_multiagent_bad").spaces.padded
    with pytest.raises(UnknownEnvironmentError, match="PYTHONPATH"):
        game_info("pettingzoo:no_such_game_module")
    for name in [n for n in sys.modules if n == "mpe2" or n.startswith("mpe2.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mpe2", None)  # as if it were not installed
    with pytest.raises(MissingExtraError, match=r"alf-rl\[multiagent\]"):
        game_info("pettingzoo:mpe2.simple_spread_v3")
    with pytest.raises(ValueError, match="multiple of 3"):
        _build(RACE, 4)


@pytest.mark.parametrize(
    ("env_name", "keywords", "extra"),
    [
        ("pettingzoo:alf_test_bad_envs", ["neither parallel_env", "alf_test_bad_envs"], []),
        (
            "pettingzoo:alf_test_multiagent_bad",
            ["different observation spaces", "runner_2", "policy_mapping.mapping"],
            ["create_environment.num_parallel_environments=6"],
        ),
        (RACE, ["multiple of 3", "num_parallel_environments"], []),
        (
            RACE,
            ["envpool", "alf_test_multiagent"],
            ["create_environment.vectorization_mode='envpool'"],
        ),
    ],
)
def test_bad_multiagent_input_is_one_line_and_writes_nothing(
    tmp_path: Path, env_name: str, keywords: list[str], extra: list[str]
) -> None:
    root = tmp_path / "run"
    result = run_cli(
        train_cmd(
            root,
            f"create_environment.env_name='{env_name}'",
            "create_environment.num_parallel_environments=4",
            *extra,
        ),
        pythonpath=TESTS,
    )
    assert_clean_user_error(result, "alf.bin.train", *keywords)
    assert result.returncode == 2
    assert not root.exists() or snapshot(root) == {}
