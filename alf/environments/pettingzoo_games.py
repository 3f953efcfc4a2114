"""What a PettingZoo module's games look like: the ``pettingzoo:<module>`` names,
:class:`GameInfo` (agents and their common spaces), and writing agents' observations
into batch rows. :mod:`alf.environments.pettingzoo_environment` (simultaneous games) and
:mod:`alf.environments.pettingzoo_turns` (turn-based games) build on it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np

from alf import nest
from alf.environments.suite_gym import MissingExtraError, UnknownEnvironmentError
from alf.errors import install_hint

__all__ = [
    "PETTINGZOO_PREFIX",
    "GameInfo",
    "game_info",
    "is_pettingzoo",
    "row_of",
    "row_setter",
]

PETTINGZOO_PREFIX = "pettingzoo:"
"""The prefix of an environment name that is a PettingZoo module."""

_EXTRA_PACKAGES = ("pettingzoo", "mpe2")  # what the [multiagent] extra installs


def is_pettingzoo(env_name: str) -> bool:
    """Whether ``env_name`` names a PettingZoo module (``pettingzoo:<module>``)."""
    return isinstance(env_name, str) and env_name.startswith(PETTINGZOO_PREFIX)


@dataclass(frozen=True)
class GameInfo:
    """What one game of a PettingZoo module looks like.

    Attributes:
        env_name: the environment name as configured (``pettingzoo:<module>``).
        module: the imported module.
        turn_based: the module has only an AEC ``env()`` (one agent acts at a time).
        agents: the game's ``possible_agents``.
        observation_space: every agent's observation space.
        action_space: every agent's action space.
    """

    env_name: str
    module: ModuleType
    turn_based: bool
    agents: tuple[str, ...]
    observation_space: gym.Space
    action_space: gym.Space

    def make(self, **kwargs: Any) -> Any:
        """A new game (``parallel_env(**kwargs)``, or ``env(**kwargs)`` if turn-based)."""
        factory = self.module.env if self.turn_based else self.module.parallel_env
        return factory(**kwargs)


def _import_module(env_name: str) -> ModuleType:
    module_name = env_name[len(PETTINGZOO_PREFIX) :]
    if not module_name:
        raise UnknownEnvironmentError(
            f"Environment name '{env_name}' names no module: write pettingzoo:<module>, "
            "e.g. pettingzoo:mpe2.simple_spread_v3"
        )
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing.split(".")[0] in _EXTRA_PACKAGES:
            raise MissingExtraError(
                f"Environment '{env_name}' needs the package '{missing.split('.')[0]}': "
                f"{install_hint('multiagent')}"
            ) from err
        if module_name.startswith(missing):
            raise UnknownEnvironmentError(
                f"Cannot import module '{module_name}' of environment '{env_name}': {err}. "
                "If it is your own file, put its folder on PYTHONPATH (export "
                "PYTHONPATH=/path/to/folder) or run from that folder with python -m."
            ) from err
        raise


def _common_space(spaces: dict[str, gym.Space], what: str, env_name: str) -> gym.Space:
    """The one space every agent has, or a one-line error naming two that differ."""
    agents = list(spaces)
    first = spaces[agents[0]]
    for agent in agents[1:]:
        if spaces[agent] != first:
            raise UnknownEnvironmentError(
                f"the agents of '{env_name}' have different {what} spaces ({agents[0]}: "
                f"{first}; {agent}: {spaces[agent]}): ALF's agents share one policy, which "
                "needs one space for all of them"
            )
    return first


def game_info(env_name: str, env_kwargs: dict[str, Any] | None = None) -> GameInfo:
    """Imports the module of ``env_name`` and builds one game to read its agents and
    spaces.

    Args:
        env_name: ``pettingzoo:<module>``.
        env_kwargs: the game's keyword arguments.

    Raises:
        MissingExtraError: PettingZoo (or MPE) is not installed.
        UnknownEnvironmentError: the module cannot be imported, has neither
            ``parallel_env`` nor ``env``, or its agents' spaces differ.
    """
    module = _import_module(env_name)
    has_parallel = callable(getattr(module, "parallel_env", None))
    if not (has_parallel or callable(getattr(module, "env", None))):
        raise UnknownEnvironmentError(
            f"module '{module.__name__}' of environment '{env_name}' has neither "
            "parallel_env() nor env(): a PettingZoo module provides one of them"
        )
    factory = module.parallel_env if has_parallel else module.env
    game = factory(**(env_kwargs or {}))
    try:
        agents = tuple(game.possible_agents)
        observation = {a: game.observation_space(a) for a in agents}
        action = {a: game.action_space(a) for a in agents}
    finally:
        game.close()
    return GameInfo(
        env_name=env_name,
        module=module,
        turn_based=not has_parallel,
        agents=agents,
        observation_space=_common_space(observation, "observation", env_name),
        action_space=_common_space(action, "action", env_name),
    )


def row_setter(spec: Any) -> Callable[[list[np.ndarray], int, Any], None]:
    """A function writing one agent's observation into row ``i`` of the batch buffers."""
    if nest.is_single(spec):

        def set_single(buffers: list[np.ndarray], i: int, obs: Any) -> None:
            buffers[0][i] = obs

        return set_single

    def set_nest(buffers: list[np.ndarray], i: int, obs: Any) -> None:
        for buffer, leaf in zip(buffers, nest.flatten(obs), strict=True):
            buffer[i] = leaf

    return set_nest


def row_of(np_action: Any, row: int) -> Any:
    """Row ``row`` of a batch of actions (a nest of numpy arrays)."""
    if isinstance(np_action, np.ndarray):
        return np_action[row]
    return nest.map_structure(lambda a: a[row], np_action)
