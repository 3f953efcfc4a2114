"""Self-play in two-player turn-based games (``TrainerConfig.self_play``).

The learner plays one seat of each game (:mod:`alf.environments.pettingzoo_turns`); its
opponents come from a *league* of frozen snapshots of the learning policy, one taken
every ``snapshot_interval`` iterations (the first at the start), at most ``max_members``
kept (the oldest dropped). Each game draws its opponent from the league:

- ``"latest"``: the newest snapshot;
- ``"uniform"``: any snapshot;
- ``"pfsp"``: prioritized fictitious self-play: snapshots the learner beats less often
  are drawn more (weight ``(1 - p) ** 2 + 0.05`` for a win rate ``p``, from the last
  ``RESULT_WINDOW`` games against it).

A share of the training games (``fixed_opponent_share``) can instead be played against
fixed opponents (``fixed_opponents``, drawn uniformly; e.g. the game's heuristic), so
that the learner also meets the positions such players lead to; the league's summaries
then give the learner's training win rate against each (``league/vs_<name>/win_rate``).

Snapshots act by sampling their policy (``sample_moves``) or greedily. Their parameters
are saved in the run's checkpoints (entries ``league/<name>``), so a resumed run plays the
same league; the win counts restart.

At every evaluation the greedy learner also plays ``eval_games`` games against each
fixed opponent (``"random"``, ``"heuristic"``: :func:`~alf.environments.pettingzoo_turns.
turn_based_opponent`) as each seat, and the run records win, draw and loss rates
(``eval/vs_<opponent>/<seat>/win_rate``...) and an Elo-style rating
(``eval/rating``): the random player is rated 0, the heuristic by its own score against
random, and the learner by its score against each fixed opponent
(``R_o + 400 log10(s / (1 - s))``, averaged).
"""

from __future__ import annotations

import dataclasses

from alf.config import configurable, invalid_value

__all__ = ["SAMPLINGS", "SelfPlay"]

SAMPLINGS = ("latest", "uniform", "pfsp")
"""Values of ``SelfPlay.sampling``."""


@configurable
@dataclasses.dataclass(frozen=True, kw_only=True)
class SelfPlay:
    """How a run plays against snapshots of itself (see the module docstring).

    Attributes:
        snapshot_interval: iterations between two snapshots joining the league.
        max_members: snapshots kept (the oldest is dropped).
        sampling: ``"latest"``, ``"uniform"`` or ``"pfsp"``.
        sample_moves: snapshots sample their moves from their policy (else greedy).
        eval_opponents: fixed opponents the learner is evaluated against.
        eval_games: games against each fixed opponent as each seat per evaluation.
        fixed_opponents: fixed opponents (names as ``eval_opponents``) some training
            games are played against instead of the league.
        fixed_opponent_share: the probability that a training game is played against
            one of ``fixed_opponents`` (uniformly drawn), in ``[0, 1]``.
    """

    snapshot_interval: int = 10
    max_members: int = 20
    sampling: str = "pfsp"
    sample_moves: bool = True
    eval_opponents: tuple[str, ...] = ("random", "heuristic")
    eval_games: int = 100
    fixed_opponents: tuple[str, ...] = ()
    fixed_opponent_share: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.snapshot_interval, int) and self.snapshot_interval >= 1):
            raise invalid_value("SelfPlay.snapshot_interval", self.snapshot_interval, "an int >= 1")
        if not (isinstance(self.max_members, int) and self.max_members >= 1):
            raise invalid_value("SelfPlay.max_members", self.max_members, "an int >= 1")
        if self.sampling not in SAMPLINGS:
            raise invalid_value("SelfPlay.sampling", self.sampling, f"one of {SAMPLINGS}")
        if not (isinstance(self.eval_games, int) and self.eval_games >= 1):
            raise invalid_value("SelfPlay.eval_games", self.eval_games, "an int >= 1")
        share = self.fixed_opponent_share
        if not (isinstance(share, int | float) and 0.0 <= share <= 1.0):
            raise invalid_value("SelfPlay.fixed_opponent_share", share, "a number in [0, 1]")
        if share > 0 and not self.fixed_opponents:
            raise invalid_value(
                "SelfPlay.fixed_opponents",
                self.fixed_opponents,
                "one name at least when fixed_opponent_share > 0",
            )
