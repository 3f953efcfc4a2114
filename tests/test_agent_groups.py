"""Per-agent-group returns in the train summary (``train/<group>/average_return``): the
bookkeeping of :class:`GroupReturns`, :class:`TrainingReport` on one and on two ranks,
which runs have groups, and tiny simple_spread runs (sync PPO, async APPO) whose
``progress.jsonl`` has them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gin
import pytest
from helpers_cli import REPO, run_cli, train_cmd

from alf.trainers.agent_groups import GroupReturns, summary_groups
from alf.trainers.train_report import TrainingReport
from alf.unrollers.episode_tracker import CompletedEpisodes

# A game of 3 agents: runner_0 and runner_2 are the team "a", runner_1 is "b".
GROUPS = ("a", "b", "a")


class _Summary:
    """Records what :class:`TrainingReport` writes."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def write(
        self, group: str, scalars: dict, record: dict, *, env_steps: int, iteration: int
    ) -> None:
        self.lines.append({f"{group}/{name}": value for name, value in scalars.items()})


class _TwoRanks:
    """A data-parallel context whose other rank reports ``other``'s figures."""

    def __init__(self, other: list[float]) -> None:
        self.other = other

    def all_gather(self, values: list[float], *, what: str) -> list[list[float]]:
        assert len(values) == len(self.other)  # every rank sends the same figures
        return [list(values), self.other]


def test_returns_are_kept_per_group_of_rows() -> None:
    recent = GroupReturns(groups=GROUPS, maxlen=2)
    assert recent.names == ("a", "b")
    # Rows 0, 2, 3 and 5 are group a (agents 0 and 2 of games 0 and 1), 1 and 4 are b.
    recent.add([1.0, 2.0, 3.0, 4.0], [0, 1, 5, 4])
    assert recent.figures() == [4.0, 2, 6.0, 2]
    recent.add([10.0], [3])  # a keeps its last 2 episodes: 3.0 and 10.0
    assert recent.figures() == [13.0, 2, 6.0, 2]
    assert recent.scalars(recent.figures()) == {"a/average_return": 6.5, "b/average_return": 3.0}
    assert GroupReturns(groups=GROUPS).scalars([0.0, 0, 5.0, 2]) == {"b/average_return": 2.5}
    with pytest.raises(ValueError):
        recent.add([1.0], [])


def _report(**kwargs: Any) -> tuple[TrainingReport, _Summary]:
    summary = _Summary()
    report = TrainingReport(summary=summary, start_iteration=0, start_env_steps=0, **kwargs)
    return report, summary


NAN = float("nan")


def _episodes(
    returns: list[float], env_ids: list[int], successes: list[float] | None = None
) -> CompletedEpisodes:
    successes = [NAN] * len(returns) if successes is None else successes
    return CompletedEpisodes(returns, [5] * len(returns), env_ids, successes)


def _write(report: TrainingReport) -> None:
    report.write_summary(1, {}, {}, env_steps=10, clipped_actions=0)


def test_the_train_summary_has_each_groups_return() -> None:
    report, summary = _report(distributed=None, groups=GROUPS)
    report.add_iteration(10, 1.0, _episodes([1.0, 2.0, 3.0], [0, 1, 2]))
    _write(report)
    line = summary.lines[-1]
    assert line["train/average_return"] == 2.0
    assert line["train/a/average_return"] == 2.0 and line["train/b/average_return"] == 2.0


def test_a_run_without_groups_writes_no_group_keys() -> None:
    report, summary = _report(distributed=None)
    report.add_iteration(10, 1.0, _episodes([1.0, 2.0], [0, 1]))
    _write(report)
    assert not [key for key in summary.lines[-1] if key.count("/") > 1]
    assert report.group_returns is None


def test_data_parallel_group_returns_are_over_all_ranks() -> None:
    # The other rank: fps, returns, lengths, episodes, clipped, dropped, successes and
    # known successes, then a and b.
    other = [10.0, 9.0, 30.0, 3, 0, 0, 0.0, 0, 9.0, 3, 0.0, 0]
    report, summary = _report(distributed=_TwoRanks(other), groups=GROUPS)
    report.add_iteration(10, 1.0, _episodes([1.0, 4.0], [0, 1]))
    _write(report)
    line = summary.lines[-1]
    assert line["train/average_return"] == 14.0 / 5
    assert line["train/a/average_return"] == 10.0 / 4
    assert line["train/b/average_return"] == 4.0


def test_the_success_rate_is_over_the_known_successes_of_all_ranks() -> None:
    # The other rank: 3 known successes, 2 of them successful; no groups.
    other = [10.0, 0.0, 0.0, 0, 0, 0, 2.0, 3]
    report, summary = _report(distributed=_TwoRanks(other))
    report.add_iteration(10, 1.0, _episodes([0.0, 0.0, 0.0], [0, 1, 0], [1.0, NAN, 0.0]))
    _write(report)
    assert summary.lines[-1]["train/success_rate"] == 3.0 / 5  # the NaN is not counted
    report, summary = _report(distributed=None)
    report.add_iteration(10, 1.0, _episodes([0.0], [0], [NAN]))
    _write(report)
    assert "train/success_rate" not in summary.lines[-1]  # no environment reported one


@pytest.mark.parametrize(
    ("bindings", "groups"),
    [
        ("create_environment.env_name = 'CartPole-v1'", None),
        ("create_environment.env_name = 'pettingzoo:mpe2.simple_spread_v3'", None),
        (
            "create_environment.env_name = 'pettingzoo:mpe2.simple_spread_v3'\n"
            "policy_mapping.mapping = 'per_agent'",
            ("agent_0", "agent_1", "agent_2"),
        ),
        (  # one team: one group
            "create_environment.env_name = 'pettingzoo:mpe2.simple_spread_v3'\n"
            "policy_mapping.mapping = 'per_team'",
            None,
        ),
    ],
)
def test_the_groups_are_those_of_the_eval_summaries(bindings: str, groups: Any) -> None:
    """Per agent or team as :attr:`AgentPolicies.groups`; none for one group."""
    if "mpe2" in bindings:
        pytest.importorskip("mpe2")
    gin.parse_config(bindings)
    assert summary_groups() == groups


AGENTS = ("agent_0", "agent_1", "agent_2")
SPREAD_PER_AGENT = (
    "create_environment.env_name='pettingzoo:mpe2.simple_spread_v3'",
    "create_environment.num_parallel_environments=6",  # 2 games of 3 agents
    "policy_mapping.mapping='per_agent'",
    "TrainerConfig.unroll_length=13",
    "TrainerConfig.eval_interval=0",
    "TrainerConfig.evaluate=False",
)


def _train_lines(root: Path, conf: str, *params: str) -> list[dict]:
    result = run_cli(
        train_cmd(root, *SPREAD_PER_AGENT, *params, conf=REPO / "alf" / "examples" / conf)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in (root / "progress.jsonl").read_text().splitlines()]
    return [line for line in lines if "train/average_return" in line]


def _check_group_returns(line: dict) -> None:
    groups = [line[f"train/{agent}/average_return"] for agent in AGENTS]
    # A game's agents end together: each group has as many episodes as the others.
    assert line["train/average_return"] == pytest.approx(sum(groups) / len(groups))


@pytest.mark.parametrize(
    ("conf", "params"),
    [
        (
            "ppo_simple_spread.gin",
            (
                "TrainerConfig.num_iterations=4",
                "TrainerConfig.summary_interval=2",
                "PPOAlgorithm.num_epochs=1",
            ),
        ),
        (  # 2 actors of one game each; 4 fragments of 13 steps per summary
            "appo_cart_pole.gin",
            (
                "TrainerConfig.num_iterations=4",
                "TrainerConfig.summary_interval=4",
                "AppoAlgorithm.num_epochs=1",
            ),
        ),
    ],
    ids=["sync", "async"],
)
def test_a_run_with_a_policy_per_agent_reports_each_agents_train_return(
    tmp_path: Path, conf: str, params: tuple[str, ...]
) -> None:
    pytest.importorskip("mpe2")
    lines = _train_lines(tmp_path / "run", conf, *params)
    assert lines
    _check_group_returns(lines[-1])
