"""Turn-based PettingZoo games (AEC ``env()``: one agent acts at a time) as batch rows.

Each game is one row: the *learner's seat*. The learner plays one agent of the game (its
seat rotates over the agents from episode to episode, so it learns every side: first and
second player in a two-player game), and the other agents are played inside the
environment by an *opponent* (:func:`turn_based_opponent`): uniformly random legal moves,
the game's heuristic (:mod:`alf.environments.game_heuristics`), or a function of yours.
A step of the row is the learner's move followed by the opponents' moves until the
learner is to move again or the game ends; its reward is what the learner received over
them (e.g. -1 when the opponent's reply wins a zero-sum game).

``num_parallel_environments`` counts games here (one learning row each).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from alf import nest
from alf.config import configurable
from alf.data_structures import StepType, TimeStep
from alf.environments import game_heuristics
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.env_guard import EnvironmentCallError, describe_exception
from alf.environments.game_rows import GameRows
from alf.environments.pettingzoo_games import GameInfo, row_of
from alf.environments.suite_gym import import_env_module
from alf.errors import AlfError, UserError
from alf.tensor_specs import action_mask_key

__all__ = [
    "FixedOpponent",
    "Opponent",
    "OpponentSource",
    "TurnBasedEnvironment",
    "resolve_opponent",
    "turn_based_opponent",
]

Opponent = Callable[[Any, np.random.Generator], Any]
"""An opponent: ``opponent(observation, rng) -> action`` for the agent to move, given its
observation (with its action mask where the game has one)."""


class OpponentSource(Protocol):
    """Chooses the opponent of each game and hears how the learner did (a self-play
    league, or one fixed opponent)."""

    def draw(self, rng: np.random.Generator) -> tuple[str, Opponent]:
        """The name and the :data:`Opponent` of a game about to start."""
        ...

    def record(self, name: str, learner_return: float) -> None:
        """The learner's return in a finished game against the opponent ``name``."""
        ...


class FixedOpponent:
    """An :class:`OpponentSource` with one opponent for every game.

    Args:
        name: the opponent's name (see :func:`turn_based_opponent`).
        opponent: the opponent.
    """

    def __init__(self, *, name: str, opponent: Opponent) -> None:
        self.name = name
        self._opponent = opponent

    def draw(self, rng: np.random.Generator) -> tuple[str, Opponent]:
        return self.name, self._opponent

    def record(self, name: str, learner_return: float) -> None:
        pass


class OpponentError(UserError, ValueError):
    """An opponent name that names no opponent."""


@configurable
def turn_based_opponent(name: str = "random") -> str:
    """Who plays the seats of a turn-based game that the learner does not.

    Args:
        name: ``"random"`` (a uniformly random legal move), ``"heuristic"`` (the game's
            heuristic in :mod:`alf.environments.game_heuristics`, e.g. connect four's:
            win now, else block now, else random), or ``"module:function"`` naming an
            :data:`Opponent` of yours.
    """
    return name


def _random_move(observation: Any, rng: np.random.Generator, num_actions: int) -> int:
    mask = _mask_of(observation)
    legal = np.arange(num_actions) if mask is None else np.flatnonzero(mask)
    return int(rng.choice(legal))


def _mask_of(observation: Any) -> np.ndarray | None:
    key = action_mask_key()
    if isinstance(observation, dict) and key is not None and key in observation:
        return np.asarray(observation[key])
    return None


def resolve_opponent(name: str, info: GameInfo) -> Opponent:
    """The :data:`Opponent` that ``name`` (see :func:`turn_based_opponent`) names for
    the game ``info``.

    Raises:
        OpponentError: an unknown name, a game without a heuristic, or a
            ``module:function`` that is not a function.
    """
    num_actions = int(getattr(info.action_space, "n", 0))
    if name == "random":
        if not num_actions:
            raise OpponentError(
                f"turn_based_opponent.name='random' needs a Discrete action space; "
                f"'{info.env_name}' has {info.action_space}"
            )
        return lambda obs, rng: _random_move(obs, rng, num_actions)
    if name == "heuristic":
        game = info.module.__name__.rsplit(".", 1)[-1]
        heuristic = game_heuristics.HEURISTICS.get(game.rsplit("_v", 1)[0])
        if heuristic is None:
            raise OpponentError(
                f"turn_based_opponent.name='heuristic': ALF has no heuristic for "
                f"'{info.env_name}' (it has: {', '.join(sorted(game_heuristics.HEURISTICS))}); "
                "name a module:function of yours instead"
            )
        return heuristic
    if ":" in name:
        module_name, function_name = name.split(":", 1)
        function = getattr(import_env_module(module_name, name), function_name, None)
        if callable(function):
            return function
    raise OpponentError(
        f"turn_based_opponent.name={name!r} names no opponent: use 'random', 'heuristic' or "
        "'module:function'"
    )


class TurnBasedEnvironment(AlfEnvironment):
    """A batch of games of one PettingZoo AEC module, one learner row per game (see the
    module docstring).

    Args:
        info: the module's :class:`~alf.environments.pettingzoo_environment.GameInfo`.
        num_envs: games in the batch.
        seed: seed of the first game (game ``g`` gets ``seed + g``; its opponent's moves
            are drawn from a generator seeded alike).
        render_mode: the games' render mode (``render()`` shows the first game).
        max_episode_steps: a cap on the learner's moves in a game (truncated there).
        env_kwargs: keyword arguments of ``env``.
        first_index: the run-wide index of the batch's first game (named in errors).
        opponent: the opponent's name (default: the configured
            :func:`turn_based_opponent`).
        seat: the agent the learner plays, or ``"rotate"``: game ``g`` starts with agent
            ``g mod A`` and each new game of the row takes the next agent.
    """

    def __init__(
        self,
        *,
        info: GameInfo,
        num_envs: int,
        seed: int | None = None,
        render_mode: str | None = None,
        max_episode_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        first_index: int = 0,
        opponent: str | None = None,
        seat: str = "rotate",
    ) -> None:
        if seat != "rotate" and seat not in info.agents:
            raise ValueError(f"seat must be 'rotate' or one of {info.agents}, got {seat!r}")
        kwargs = dict(env_kwargs or {})
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        self._info = info
        self._env_name = info.env_name
        name = opponent or turn_based_opponent()
        self._source: OpponentSource = FixedOpponent(
            name=name, opponent=resolve_opponent(name, info)
        )
        self._opponents: list[tuple[str, Opponent] | None] = [None] * num_envs
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._games = [info.make(**kwargs) for _ in range(num_envs)]
        self._rngs = [
            np.random.default_rng(None if seed is None else seed + g) for g in range(num_envs)
        ]
        self._seed = seed
        self._first_index = first_index
        self._cap = max_episode_steps
        self._num_envs = num_envs
        self._rotate = seat == "rotate"
        self._seat = [
            (first_index + g) % len(info.agents) if self._rotate else info.agents.index(seat)
            for g in range(num_envs)
        ]
        self._moves = np.zeros(num_envs, dtype=np.int64)
        self._reset_next = np.zeros(num_envs, dtype=bool)
        self._rows = GameRows(info=info, num_rows=num_envs, first_index=first_index)

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def info(self) -> GameInfo:
        """The game."""
        return self._info

    @property
    def agent_names(self) -> tuple[str, ...]:
        """The agent each row plays in its current episode."""
        return tuple(self._info.agents[seat] for seat in self._seat)

    @property
    def max_episode_steps(self) -> int | None:
        """The cap on the learner's moves in a game (None: the game's own end)."""
        return self._cap

    def observation_spec(self) -> nest.Nest:
        return self._rows.observation_spec

    def action_spec(self) -> nest.Nest:
        return self._rows.action_spec

    def set_opponents(self, source: OpponentSource) -> None:
        """Draws the opponents of the games that start from now on from ``source`` (e.g.
        a self-play league) and tells it each game's result."""
        self._source = source

    @property
    def opponent_names(self) -> tuple[str, ...]:
        """The opponent each row plays in its current game."""
        return tuple("" if entry is None else entry[0] for entry in self._opponents)

    def _call(self, game: int, name: str, call: Callable[..., Any], *args: Any) -> Any:
        """``call`` of game ``game``; what it raises becomes one line naming the game."""
        try:
            return call(*args)
        except AlfError:
            raise
        except Exception as err:
            raise EnvironmentCallError(
                f"game {self._first_index + game} of '{self._env_name}' raised in {name}(): "
                f"{describe_exception(err)}"
            ) from err

    def _learner(self, game: int) -> str:
        return self._info.agents[self._seat[game]]

    def _learner_status(self, game: int) -> tuple[bool, bool, bool]:
        """Whether the learner's episode terminated, was truncated, or it is to move."""
        env, learner = self._games[game], self._learner(game)
        if env.terminations.get(learner, False) or learner not in env.agents:
            return True, False, False
        if env.truncations.get(learner, False):
            return False, True, False
        return False, False, env.agent_selection == learner

    def _play_opponents(self, games: list[int]) -> dict[int, tuple[float, bool, bool]]:
        """Plays the other seats of ``games`` until the learner is to move or its episode
        is over; returns, by game, the learner's reward over those moves and whether its
        episode terminated or was truncated. Games facing the same opponent move
        together: an opponent with a ``batch`` method (a policy) gets all their
        observations in one call."""
        rewards = dict.fromkeys(games, 0.0)
        results: dict[int, tuple[float, bool, bool]] = {}
        active = list(games)
        while active:
            waiting: dict[int, list[tuple[int, Any]]] = {}
            opponents: dict[int, Opponent] = {}
            for game in active:
                terminated, truncated, to_move = self._learner_status(game)
                if terminated or truncated or to_move:
                    results[game] = (rewards[game], terminated, truncated)
                    continue
                observation, _, done, cut, _ = self._games[game].last()
                if done or cut:  # a finished agent steps out with None
                    self._opponent_move(game, None, rewards)
                    continue
                entry = self._opponents[game]
                assert entry is not None
                opponents[id(entry[1])] = entry[1]
                waiting.setdefault(id(entry[1]), []).append((game, observation))
            for key, pending in waiting.items():
                for (game, _), move in zip(
                    pending, self._moves_of(opponents[key], pending), strict=True
                ):
                    self._opponent_move(game, move, rewards)
            active = [game for game in active if game not in results]
        return results

    def _moves_of(self, opponent: Opponent, pending: list[tuple[int, Any]]) -> list[Any]:
        """The opponent's moves in the ``(game, observation)`` of ``pending``."""
        batch = getattr(opponent, "batch", None)
        if batch is not None and len(pending) > 1:
            return batch([observation for _, observation in pending])
        return [opponent(observation, self._rngs[game]) for game, observation in pending]

    def _opponent_move(self, game: int, move: Any, rewards: dict[int, float]) -> None:
        env = self._games[game]
        self._call(game, f"step (opponent {env.agent_selection})", env.step, move)
        rewards[game] += float(env.rewards.get(self._learner(game), 0.0))

    def _start_games(self, games: list[int], seed: int | None) -> None:
        """Resets ``games`` (game ``g`` seeded with ``seed + g``) and plays their
        opponents' moves until each learner is to move."""
        for game in games:
            env = self._games[game]
            game_seed = None if seed is None else seed + game
            self._call(game, "reset", lambda env=env, s=game_seed: env.reset(seed=s))
            self._moves[game] = 0
            self._reset_next[game] = False
            self._opponents[game] = self._source.draw(self._rngs[game])
        for game, (reward, terminated, truncated) in self._play_opponents(games).items():
            if terminated or truncated:
                raise EnvironmentCallError(
                    f"game {self._first_index + game} of '{self._env_name}' ended before the "
                    f"learner ({self._learner(game)}) moved"
                )
            self._returns[game] = reward
            self._rows.set(game, self._games[game].observe(self._learner(game)))

    def reset(self) -> TimeStep:
        self._start_games(list(range(self._num_envs)), self._seed)
        self._seed = None
        return self._rows.first()

    def step(self, action: Any) -> TimeStep:
        first = self._reset_next.copy()
        np_action, applied = self._rows.actions(action, first)
        step_type = np.full(self._num_envs, StepType.MID, dtype=np.int32)
        reward = np.zeros(self._num_envs, dtype=np.float32)
        discount = np.ones(self._num_envs, dtype=np.float32)
        starting = [int(g) for g in np.flatnonzero(first)]
        for game in starting:
            if self._rotate:
                self._seat[game] = (self._seat[game] + 1) % len(self._info.agents)
        self._start_games(starting, None)
        step_type[first] = StepType.FIRST
        playing = [int(g) for g in np.flatnonzero(~first)]
        own = {}
        for game in playing:
            env, learner = self._games[game], self._learner(game)
            self._call(game, f"step (learner {learner})", env.step, row_of(np_action, game))
            self._moves[game] += 1
            own[game] = float(env.rewards.get(learner, 0.0))
        for game, (later, terminated, truncated) in self._play_opponents(playing).items():
            env, learner = self._games[game], self._learner(game)
            reward[game] = own[game] + later
            self._returns[game] += own[game] + later
            if learner in env.agents:
                self._rows.set(game, env.observe(learner))
            truncated = truncated or (self._cap is not None and self._moves[game] >= self._cap)
            if terminated or truncated:
                step_type[game] = StepType.LAST
                discount[game] = 0.0 if terminated else 1.0
                self._reset_next[game] = True
                entry = self._opponents[game]
                assert entry is not None
                self._source.record(entry[0], float(self._returns[game]))
        return self._rows.time_step(
            step_type=step_type, reward=reward, discount=discount, applied=applied, first=first
        )

    def render(self) -> Any:
        return self._games[0].render()

    def close(self) -> None:
        for game in self._games:
            game.close()
