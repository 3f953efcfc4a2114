"""PettingZoo games whose agents are batch rows.

``create_environment.env_name = "pettingzoo:<module>"`` names an importable module with
``parallel_env()`` (every agent acts at every step: MPE's ``mpe2.simple_spread_v3``, the
butterfly and SISL games, a user's own module). Each agent of each game is one row of
the batch: ``num_parallel_environments`` counts rows, so it must be a multiple of the
number of agents, and a game's agents are consecutive rows (row ``g * A + a`` is agent
``a`` of game ``g``, agents in ``possible_agents`` order). Every collector, replay
buffer, mask, recurrent state, checkpoint and export works on such a batch unchanged,
and one policy acts for all agents (a shared policy) unless ``policy_mapping`` says
otherwise. Agents whose spaces differ are rows of their padded union (see
:mod:`alf.environments.agent_spaces`).

An agent that leaves before its game ends (terminated or truncated while others play
on) ends its episode there with a LAST step; its row then stays LAST (reward 0, its last
observation) until the game ends, and all of the game's rows start again together with
FIRST. Losses mask LAST rows out and episode statistics count each episode once, so an
idle row neither trains nor reports (see :class:`~alf.unrollers.EpisodeTracker`).

Turn-based games (an AEC ``env()`` where one agent acts at a time, such as
``pettingzoo.classic.connect_four_v3``) are :mod:`alf.environments.pettingzoo_turns`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from alf import nest
from alf.data_structures import StepType, TimeStep
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.env_guard import EnvironmentCallError, describe_exception
from alf.environments.game_rows import GameRows
from alf.environments.pettingzoo_games import GameInfo, game_info, row_of
from alf.environments.pettingzoo_turns import TurnBasedEnvironment
from alf.errors import AlfError

__all__ = ["PettingZooEnvironment", "pettingzoo_environment"]


class PettingZooEnvironment(AlfEnvironment):
    """A batch of games of one PettingZoo ``parallel_env`` module, agents as rows (see the
    module docstring).

    Args:
        info: the module's :class:`GameInfo` (not turn-based).
        num_envs: rows of the batch (a multiple of the number of agents).
        seed: seed of the first row; game ``g`` is seeded with ``seed + g * A``.
        render_mode: the games' render mode (``render()`` shows the first game).
        max_episode_steps: a cap on a game's steps (its agents' episodes are truncated
            there); None: the game's own end.
        env_kwargs: keyword arguments of ``parallel_env``.
        first_index: the run-wide index of the batch's first row (named in errors).
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
    ) -> None:
        num_agents = len(info.agents)
        if num_envs % num_agents:
            raise ValueError(
                f"create_environment.num_parallel_environments counts agents (batch rows): "
                f"'{info.env_name}' has {num_agents} agents, so it must be a multiple of "
                f"{num_agents}, got {num_envs}"
            )
        kwargs = dict(env_kwargs or {})
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        self._info = info
        self._spaces = info.spaces
        self._env_name = info.env_name
        self._agents = info.agents
        self._num_agents = num_agents
        self._num_envs = num_envs
        self._first_index = first_index
        self._games = [info.make(**kwargs) for _ in range(num_envs // num_agents)]
        self._seed = seed
        self._cap = max_episode_steps
        self._rows = GameRows(info=info, num_rows=num_envs, first_index=first_index)
        self._idle = np.zeros(num_envs, dtype=bool)  # rows whose agent left its game
        self._reset_next = np.zeros(len(self._games), dtype=bool)  # games that ended
        self._game_steps = np.zeros(len(self._games), dtype=np.int64)

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def agent_names(self) -> tuple[str, ...]:
        """The agent of each row."""
        return self._agents * len(self._games)

    @property
    def max_episode_steps(self) -> int | None:
        """The cap on a game's steps (None: the game's own end)."""
        return self._cap

    def observation_spec(self) -> nest.Nest:
        return self._rows.observation_spec

    def action_spec(self) -> nest.Nest:
        return self._rows.action_spec

    def _call(
        self, game: int, name: str, call: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """``call`` of game ``game``; what it raises becomes one line naming the game."""
        try:
            return call(*args, **kwargs)
        except AlfError:
            raise
        except Exception as err:
            first = self._first_index + game * self._num_agents
            raise EnvironmentCallError(
                f"game {game} (rows {first}..{first + self._num_agents - 1}) of "
                f"'{self._env_name}' raised in {name}(): {describe_exception(err)}"
            ) from err

    def _reset_game(self, game: int, seed: int | None) -> None:
        observations, _ = self._call(game, "reset", self._games[game].reset, seed=seed)
        base = game * self._num_agents
        for a, agent in enumerate(self._agents):
            if agent not in observations:
                raise EnvironmentCallError(
                    f"agent '{agent}' of '{self._env_name}' has no observation after reset(): "
                    "ALF needs every agent of possible_agents in the game from its start"
                )
            self._rows.set(base + a, self._spaces.pad(a, observations[agent]))
        self._idle[base : base + self._num_agents] = False
        self._game_steps[game] = 0
        self._reset_next[game] = False

    def reset(self) -> TimeStep:
        for game in range(len(self._games)):
            seed = None if self._seed is None else self._seed + game * self._num_agents
            self._reset_game(game, seed)
        self._seed = None  # later resets continue the seeded random streams
        return self._rows.first()

    def step(self, action: Any) -> TimeStep:
        rows = self._num_envs
        first = np.repeat(self._reset_next, self._num_agents)
        np_action, applied = self._rows.actions(action, first | self._idle)
        step_type = np.full(rows, StepType.MID, dtype=np.int32)
        reward = np.zeros(rows, dtype=np.float32)
        discount = np.ones(rows, dtype=np.float32)
        for game in range(len(self._games)):
            if self._reset_next[game]:
                self._reset_game(game, None)
                continue
            self._step_game(game, np_action, step_type, reward, discount)
        step_type[first] = StepType.FIRST
        idle_before = self._idle & ~first
        step_type[idle_before] = StepType.LAST
        discount[idle_before] = 0.0
        self._idle |= step_type == StepType.LAST
        return self._rows.time_step(
            step_type=step_type, reward=reward, discount=discount, applied=applied, first=first
        )

    def _step_game(
        self,
        game: int,
        np_action: Any,
        step_type: np.ndarray,
        reward: np.ndarray,
        discount: np.ndarray,
    ) -> None:
        """Steps game ``game`` with its live agents' actions and writes its rows."""
        env, base = self._games[game], game * self._num_agents
        live = set(env.agents)
        actions = {
            agent: self._spaces.action(a, row_of(np_action, base + a))
            for a, agent in enumerate(self._agents)
            if agent in live and not self._idle[base + a]
        }
        obs, rewards, terminated, truncated, _ = self._call(game, "step", env.step, actions)
        self._game_steps[game] += 1
        capped = self._cap is not None and self._game_steps[game] >= self._cap
        for a, agent in enumerate(self._agents):
            row = base + a
            if self._idle[row]:
                continue
            if agent in obs:
                self._rows.set(row, self._spaces.pad(a, obs[agent]))
            reward[row] = float(rewards.get(agent, 0.0))
            vanished = agent not in obs and not truncated.get(agent, False)
            if terminated.get(agent, False) or vanished:
                step_type[row], discount[row] = StepType.LAST, 0.0
            elif truncated.get(agent, False) or capped:
                step_type[row] = StepType.LAST
        ended = (
            not env.agents
            or capped
            or all(
                step_type[base + a] == StepType.LAST or self._idle[base + a]
                for a in range(self._num_agents)
            )
        )
        self._reset_next[game] = ended

    def render(self) -> Any:
        return self._games[0].render()

    def close(self) -> None:
        for game in self._games:
            game.close()


def pettingzoo_environment(
    *,
    env_name: str,
    num_envs: int,
    seed: int | None,
    render_mode: str | None,
    max_episode_steps: int | None,
    env_kwargs: dict[str, Any] | None,
    for_evaluation: bool,
    first_env_index: int,
    drop_nonfinite: bool,
) -> AlfEnvironment:
    """The batch of ``num_envs`` rows of the PettingZoo module ``env_name`` in this
    process (the :class:`~alf.environments.sync_vector.EnvironmentBuilder` signature: the
    ``"sync"`` backend, and each ``"subprocess"`` worker's group).

    Raises:
        ValueError: ``drop_nonfinite`` (a game's rows cannot end alone), or ``num_envs``
            not a multiple of the number of agents.
    """
    del for_evaluation  # games play the same way in training and evaluation
    if drop_nonfinite:
        raise ValueError(
            "TrainerConfig.nonfinite_data='drop_episode' cannot end one agent's episode "
            f"alone in a PettingZoo game ('{env_name}'): use nonfinite_data='stop'"
        )
    info = game_info(env_name, env_kwargs)
    environment = TurnBasedEnvironment if info.turn_based else PettingZooEnvironment
    return environment(
        info=info,
        num_envs=num_envs,
        seed=seed,
        render_mode=render_mode,
        max_episode_steps=max_episode_steps,
        env_kwargs=env_kwargs,
        first_index=first_env_index,
    )
