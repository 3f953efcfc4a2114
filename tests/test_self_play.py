"""Self-play in turn-based games: the league (snapshots, drawing, results, checkpoint
entries), the rating, and a self-play run through the train command (evaluation against
fixed opponents, resume with the league, bad input)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")

from helpers_cli import assert_clean_user_error, play_cmd, run_cli, train_cmd  # noqa: E402

from alf.algorithms.factory import make_algorithm  # noqa: E402
from alf.algorithms.policy import Policy  # noqa: E402
from alf.algorithms.ppo import PPOAlgorithm  # noqa: E402
from alf.environments.pettingzoo_games import game_info  # noqa: E402
from alf.environments.pettingzoo_turns import TurnBasedEnvironment, resolve_opponent  # noqa: E402
from alf.trainers.league import League, frozen_policy_maker, performance_rating  # noqa: E402
from alf.trainers.self_play import SelfPlay  # noqa: E402

CONNECT_FOUR = "pettingzoo:pettingzoo.classic.connect_four_v3"
TINY = (
    f"create_environment.env_name='{CONNECT_FOUR}'",
    "create_environment.num_parallel_environments=8",
    "TrainerConfig.self_play=@SelfPlay()",
    "SelfPlay.snapshot_interval=3",
    "SelfPlay.max_members=3",
    "SelfPlay.eval_games=6",
    "TrainerConfig.unroll_length=8",
    "TrainerConfig.eval_interval=4",
    "TrainerConfig.num_eval_episodes=4",
    "TrainerConfig.num_eval_environments=4",
    "TrainerConfig.checkpoint_interval=4",
    "PPOAlgorithm.num_epochs=1",
)


def _make_policy() -> Callable[[str], Policy]:
    """Frozen PPO policies for connect four (what a self-play run's league builds)."""
    game = TurnBasedEnvironment(info=game_info(CONNECT_FOUR), num_envs=1, seed=0)
    make = functools.partial(make_algorithm, algorithm_ctor=PPOAlgorithm, data_transformer_ctor=())
    return frozen_policy_maker(
        make, observation_spec=game.observation_spec(), action_spec=game.action_spec()
    )


def _league(**settings: object) -> League:
    settings = SelfPlay(**settings)
    info = game_info(CONNECT_FOUR)
    fixed = {name: resolve_opponent(name, info) for name in settings.fixed_opponents}
    return League(settings=settings, make_policy=_make_policy(), fixed_opponents=fixed)


def _learner() -> object:
    return _make_policy()("learner").algorithm


def test_the_league_keeps_the_newest_snapshots() -> None:
    league = _league(max_members=2)
    for iteration in (0, 10, 20):
        league.add(f"iteration-{iteration}", _learner())
    assert [m.name for m in league.members] == ["iteration-10", "iteration-20"]
    assert set(league.states()) == {"league/iteration-10", "league/iteration-20"}
    restored = _league(max_members=2)
    restored.restore({**league.states(), "other": {}})
    assert [m.name for m in restored.members] == ["iteration-10", "iteration-20"]


def test_pfsp_draws_the_snapshots_the_learner_loses_to() -> None:
    league = _league(sampling="pfsp")
    league.add("beaten", _learner())
    league.add("strong", _learner())
    for _ in range(50):
        league.record("league/beaten", 1.0)
        league.record("league/strong", -1.0)
    rng = np.random.default_rng(0)
    drawn = [league.draw(rng)[0] for _ in range(400)]
    assert drawn.count("league/strong") > 0.9 * len(drawn)
    assert league.scalars() == {"league/members": 2.0, "league/win_rate": 0.5}
    latest = _league(sampling="latest")
    latest.add("a", _learner())
    latest.add("b", _learner())
    assert {latest.draw(rng)[0] for _ in range(20)} == {"league/b"}
    # A drawn snapshot plays legal moves of the game.
    name, opponent = latest.draw(rng)
    board = {
        "observation": np.zeros((6, 7, 2), np.int8),
        "action_mask": np.eye(7, dtype=np.int8)[2],
    }
    assert int(opponent(board, rng)) == 2


def test_a_share_of_the_games_is_played_against_fixed_opponents() -> None:
    league = _league(fixed_opponents=("random", "heuristic"), fixed_opponent_share=0.25)
    league.add("a", _learner())
    rng = np.random.default_rng(0)
    drawn = [league.draw(rng)[0] for _ in range(2000)]
    fixed = [name for name in drawn if name.startswith("fixed/")]
    assert set(drawn) == {"league/a", "fixed/random", "fixed/heuristic"}
    assert abs(len(fixed) / len(drawn) - 0.25) < 0.03
    assert abs(fixed.count("fixed/random") / len(fixed) - 0.5) < 0.06
    # The heuristic wins now when it can: column 3 completes four in a row.
    board = np.zeros((6, 7, 2), np.int8)
    board[5, 0:3, 0] = 1  # the mover's three pieces on the bottom row
    observation = {"observation": board, "action_mask": np.ones(7, np.int8)}
    heuristic = next(
        op for name, op in (league.draw(rng) for _ in range(50)) if name == "fixed/heuristic"
    )
    assert int(heuristic(observation, rng)) == 3
    for result in (1.0, -1.0, 0.0, 1.0):
        league.record("fixed/heuristic", result)
    assert league.scalars()["league/vs_heuristic/win_rate"] == pytest.approx(0.625)
    assert "league/vs_random/win_rate" not in league.scalars()  # none finished yet
    with pytest.raises(ValueError, match="SelfPlay.fixed_opponents"):
        SelfPlay(fixed_opponent_share=0.5)
    with pytest.raises(ValueError, match="SelfPlay.fixed_opponent_share"):
        SelfPlay(fixed_opponents=("random",), fixed_opponent_share=1.5)


def test_a_snapshot_is_a_copy_that_does_not_follow_the_learner() -> None:
    league = _league()
    learner = _learner()
    league.add("first", learner)
    before = {k: v.clone() for k, v in league.members[0].policy.algorithm.state_dict().items()}
    with torch.no_grad():
        for parameter in learner.parameters():
            parameter.add_(1.0)
    after = league.members[0].policy.algorithm.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not any(p.requires_grad for p in league.members[0].policy.algorithm.parameters())


def test_performance_rating() -> None:
    assert performance_rating(0.5, 100.0, 10) == pytest.approx(100.0)
    assert performance_rating(0.76, 0.0, 100) == pytest.approx(400 * np.log10(0.76 / 0.24))
    # A perfect score is kept half a game below 1: finite.
    assert performance_rating(1.0, 0.0, 100) == pytest.approx(400 * np.log10(199))


def test_a_bad_self_play_setting_is_named() -> None:
    with pytest.raises(ValueError, match="SelfPlay.sampling"):
        SelfPlay(sampling="best")
    with pytest.raises(ValueError, match="SelfPlay.snapshot_interval"):
        SelfPlay(snapshot_interval=0)


def _records(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "progress.jsonl").read_text().splitlines()]


def test_a_self_play_run_rates_itself_and_resumes_with_its_league(tmp_path: Path) -> None:
    root = tmp_path / "c4"
    first = run_cli(train_cmd(root, *TINY, "TrainerConfig.num_iterations=8"))
    assert first.returncode == 0, first.stderr[-3000:]
    evals = [r for r in _records(root) if "eval/rating" in r]
    assert [r["iteration"] for r in evals] == [4, 8]
    for opponent in ("random", "heuristic"):
        for seat in ("player_0", "player_1"):
            prefix = f"eval/vs_{opponent}/{seat}/"
            rates = [evals[-1][prefix + k] for k in ("win_rate", "draw_rate", "loss_rate")]
            assert sum(rates) == pytest.approx(1.0)
    assert evals[-1]["eval/league/members"] == 3.0
    saved = torch.load(root / "checkpoints" / "ckpt-8.pt", weights_only=True)["policies"]
    assert sorted(saved) == ["league/iteration-0", "league/iteration-3", "league/iteration-6"]

    resumed = run_cli(train_cmd(root, *TINY, "TrainerConfig.num_iterations=12"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = torch.load(root / "checkpoints" / "ckpt-12.pt", weights_only=True)["policies"]
    # The resumed league still holds the first session's snapshots (and the new one).
    assert sorted(after) == ["league/iteration-12", "league/iteration-6", "league/iteration-9"]
    torch.testing.assert_close(after["league/iteration-6"], saved["league/iteration-6"])

    # play pits the run against a fixed opponent, or against a run (itself here).
    for opponent in ("random", str(root)):
        played = run_cli(play_cmd(root, f"--opponent={opponent}", "--num_episodes=4"))
        assert played.returncode == 0, played.stderr[-3000:]
        lines = played.stdout.splitlines()
        assert [line.split(":")[0] for line in lines] == ["as player_0", "as player_1", "win_rate"]
        assert all("in 4 games" in line for line in lines[:2])
    wrong = run_cli(play_cmd(root, "--opponent=nobody"))
    assert_clean_user_error(wrong, "alf.bin.play", "nobody")


def test_self_play_needs_a_turn_based_game(tmp_path: Path) -> None:
    result = run_cli(
        train_cmd(
            tmp_path / "run",
            "TrainerConfig.self_play=@SelfPlay()",
            "TrainerConfig.num_iterations=2",
        )
    )
    assert_clean_user_error(result, "alf.bin.train", "TrainerConfig.self_play", "turn-based")
    assert result.returncode == 2
