"""The agent groups of a multi-agent run's summaries: ``<group>/average_return`` under
``train/`` (the recent episodes of training) and ``eval/`` (an evaluation).

A group is a policy when the game's agents have several, else a team when they form
several (see :attr:`~alf.environments.pettingzoo_games.AgentPolicies.groups`). Row
``r`` of a multi-agent batch is agent ``r mod A`` (every collector numbers the rows of
the training batch so, see :meth:`~alf.unrollers.Collector.pop_episodes`), so its group
is ``groups[r mod A]``.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from alf.environments.pettingzoo_games import configured_game, policy_mapping
from alf.trainers.evaluator import EvalResult

__all__ = ["GroupReturns", "eval_group_scalars", "summary_groups"]


def summary_groups() -> tuple[str, ...] | None:
    """Each agent's group of the configured PettingZoo game; None for any other
    environment, when all agents are one group, and for a turn-based game (its one
    learner row per game plays a different seat each game, so a row is no agent)."""
    info = configured_game()
    if info is None or info.turn_based:
        return None
    return policy_mapping(agents=info.agents).groups


def eval_group_scalars(groups: tuple[str, ...] | None, result: EvalResult) -> dict[str, float]:
    """An evaluation's ``<group>/average_return`` (none when ``groups`` is None)."""
    if groups is None:
        return {}
    by_group = result.average_return_by_group(groups)
    return {f"{group}/average_return": value for group, value in by_group.items()}


class GroupReturns:
    """The returns of the last ``maxlen`` episodes of each agent group, for the train
    summary.

    Args:
        groups: each agent's group (row ``r``'s group is ``groups[r mod len(groups)]``).
        maxlen: episodes kept per group.
    """

    def __init__(self, *, groups: tuple[str, ...], maxlen: int = 100) -> None:
        self.groups = groups
        self.names = tuple(dict.fromkeys(groups))  # in order of first agent: same on every rank
        self.recent: dict[str, collections.deque[float]] = {
            name: collections.deque(maxlen=maxlen) for name in self.names
        }

    def add(self, returns: Sequence[float], env_ids: Sequence[int]) -> None:
        """Counts finished episodes: their returns and the rows that played them."""
        groups, num_agents = self.groups, len(self.groups)
        for env_id, ret in zip(env_ids, returns, strict=True):
            self.recent[groups[env_id % num_agents]].append(ret)

    def figures(self) -> list[float]:
        """``[sum, count]`` of the kept returns of each group, in :attr:`names` order
        (summed over ranks, they give :meth:`scalars`)."""
        figures: list[float] = []
        for name in self.names:
            figures += [sum(self.recent[name]), len(self.recent[name])]
        return figures

    def scalars(self, figures: Sequence[float]) -> dict[str, float]:
        """``<group>/average_return`` of each group with episodes, from :meth:`figures`
        (one rank's, or the sums of every rank's)."""
        scalars = {}
        for i, name in enumerate(self.names):
            total, count = figures[2 * i], figures[2 * i + 1]
            if count:
                scalars[f"{name}/average_return"] = total / count
        return scalars
