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

__all__ = ["HEURISTICS", "connect_four", "connect_four_wins", "tictactoe"]

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


_TICTACTOE_LINES = (
    *((r * 3, r * 3 + 1, r * 3 + 2) for r in range(3)),
    *((c, c + 3, c + 6) for c in range(3)),
    (0, 4, 8),
    (2, 4, 6),
)


def tictactoe(observation: Any, rng: np.random.Generator) -> int:
    """Tic-tac-toe's heuristic: win now, else block the opponent's winning move, else
    the centre, else a uniformly random legal move.

    Args:
        observation: PettingZoo's ``{"observation": [3, 3, 2], "action_mask": [9]}`` for
            the agent to move (plane 0 its marks, plane 1 the opponent's; square ``a`` is
            ``[a // 3, a % 3]``).
        rng: the random generator of the game.
    """
    planes = np.asarray(observation["observation"]).reshape(9, 2)
    legal = [int(a) for a in np.flatnonzero(np.asarray(observation["action_mask"]))]
    for player in (0, 1):  # a winning move first, then a block
        marks = planes[:, player]
        for line in _TICTACTOE_LINES:
            empty = [square for square in line if square in legal]
            if len(empty) == 1 and sum(int(marks[square]) for square in line) == 2:
                return empty[0]
    if 4 in legal:
        return 4
    return int(rng.choice(legal))


HEURISTICS: Mapping[str, Callable[[Any, np.random.Generator], Any]] = MappingProxyType(
    {"connect_four": connect_four, "tictactoe": tictactoe}
)
"""Each game's heuristic, by the game's module name without its version suffix."""
