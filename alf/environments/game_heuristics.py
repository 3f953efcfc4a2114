"""Simple fixed opponents for turn-based games, to measure self-play against.

Each is an :data:`~alf.environments.pettingzoo_turns.Opponent`: ``heuristic(observation,
rng) -> action`` for the agent to move, from that agent's observation.
:data:`HEURISTICS` maps a PettingZoo game's name (its module name without the version)
to its heuristic (``turn_based_opponent.name = "heuristic"``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

__all__ = ["HEURISTICS", "connect_four", "connect_four_wins"]

_ROWS, _COLUMNS = 6, 7
_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


def _landing_row(board: np.ndarray, column: int) -> int | None:
    """The row a piece dropped into ``column`` lands on (row 0 is the top), or None if
    the column is full."""
    empty = np.flatnonzero(board[:, column] == 0)
    return int(empty[-1]) if empty.size else None


def connect_four_wins(pieces: np.ndarray, row: int, column: int) -> bool:
    """Whether a piece at ``(row, column)`` would complete four in a line of
    ``pieces`` (a ``[6, 7]`` 0/1 board of one player)."""
    for dr, dc in _DIRECTIONS:
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, column + sign * dc
            while 0 <= r < _ROWS and 0 <= c < _COLUMNS and pieces[r, c]:
                count += 1
                r, c = r + sign * dr, c + sign * dc
        if count >= 4:
            return True
    return False


def connect_four(observation: Any, rng: np.random.Generator) -> int:
    """Connect four's heuristic: win now if a move wins, else block the opponent's
    winning move, else a uniformly random legal move.

    Args:
        observation: PettingZoo's ``{"observation": [6, 7, 2], "action_mask": [7]}``
            for the agent to move (plane 0 its pieces, plane 1 the opponent's).
        rng: the random generator of the game.
    """
    planes = np.asarray(observation["observation"])
    mine, theirs = planes[:, :, 0], planes[:, :, 1]
    board = mine + theirs
    legal = np.flatnonzero(np.asarray(observation["action_mask"]))
    for pieces in (mine, theirs):  # a winning move first, then a block
        for column in legal:
            row = _landing_row(board, int(column))
            if row is not None and connect_four_wins(pieces, row, int(column)):
                return int(column)
    return int(rng.choice(legal))


HEURISTICS: Mapping[str, Callable[[Any, np.random.Generator], Any]] = MappingProxyType(
    {"connect_four": connect_four}
)
"""Each game's heuristic, by the game's module name without its version suffix."""
