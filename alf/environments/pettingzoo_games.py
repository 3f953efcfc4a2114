"""What a PettingZoo module's games look like: the ``pettingzoo:<module>`` names,
:class:`GameInfo` (agents and their spaces, padded into one batch's where they differ:
:mod:`alf.environments.agent_spaces`), the policy of each agent, and writing agents'
observations into batch rows. :mod:`alf.environments.pettingzoo_environment`
(simultaneous games) and :mod:`alf.environments.pettingzoo_turns` (turn-based games) build
on it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import gin
import gymnasium as gym
import numpy as np

from alf import nest
from alf.config import configurable, invalid_value
from alf.environments.agent_spaces import AgentSpaces
from alf.environments.suite_gym import MissingExtraError, UnknownEnvironmentError
from alf.errors import install_hint

__all__ = [
    "PETTINGZOO_PREFIX",
    "POLICY_MAPPINGS",
    "AgentPolicies",
    "GameInfo",
    "configured_agent_policies",
    "configured_game",
    "policy_mapping",
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
        spaces: the agents' spaces and the batch's (their padded union).
    """

    env_name: str
    module: ModuleType
    turn_based: bool
    agents: tuple[str, ...]
    spaces: AgentSpaces

    @property
    def observation_space(self) -> gym.Space:
        """The batch's observation space (every agent's, or their padded union)."""
        return self.spaces.observation_space

    @property
    def action_space(self) -> gym.Space:
        """The batch's action space (every agent's, or their padded union)."""
        return self.spaces.action_space

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


def game_info(env_name: str, env_kwargs: dict[str, Any] | None = None) -> GameInfo:
    """Imports the module of ``env_name`` and builds one game to read its agents and
    spaces.

    Args:
        env_name: ``pettingzoo:<module>``.
        env_kwargs: the game's keyword arguments.

    Raises:
        MissingExtraError: PettingZoo (or MPE) is not installed.
        UnknownEnvironmentError: the module cannot be imported, has neither
            ``parallel_env`` nor ``env``, or its agents' spaces differ where they cannot
            be padded (see :mod:`alf.environments.agent_spaces`) or in a turn-based game.
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
        spaces = AgentSpaces(
            env_name=env_name,
            agents=agents,
            observation_spaces=[game.observation_space(a) for a in agents],
            action_spaces=[game.action_space(a) for a in agents],
        )
    finally:
        game.close()
    if not has_parallel and spaces.padded:
        raise UnknownEnvironmentError(
            f"the agents of the turn-based game '{env_name}' have "
            f"{spaces.mismatch(range(len(agents)))}: its learner row plays every seat, "
            "which needs one space for all of them"
        )
    return GameInfo(
        env_name=env_name, module=module, turn_based=not has_parallel, agents=agents, spaces=spaces
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


POLICY_MAPPINGS = ("shared", "per_agent", "per_team")
"""The named ``policy_mapping.mapping`` strategies (besides a dict or a function)."""


@dataclass(frozen=True)
class AgentPolicies:
    """Which policy acts for each agent of a game.

    Attributes:
        agents: the game's agents (row order within a game).
        policy_names: the policies, in order of first use.
        agent_policies: for each agent, the index of its policy in ``policy_names``.
        frozen: policies that act but never learn.
    """

    agents: tuple[str, ...]
    policy_names: tuple[str, ...]
    agent_policies: tuple[int, ...]
    frozen: tuple[str, ...] = ()

    @property
    def is_shared(self) -> bool:
        """One learning policy for every agent (the plain single-policy run)."""
        return len(self.policy_names) == 1 and not self.frozen

    @property
    def groups(self) -> tuple[str, ...] | None:
        """Each agent's group for summaries: its policy when there are several, else its
        team (its name without a trailing ``_<n>``) when there are several teams; None
        when all agents are one group."""
        if len(self.policy_names) > 1:
            return tuple(self.policy_names[i] for i in self.agent_policies)
        teams = tuple(_team(agent) for agent in self.agents)
        return teams if len(set(teams)) > 1 else None


def _team(agent: str) -> str:
    """``adversary_0`` -> ``adversary``: an agent's name without its trailing number."""
    head, _, tail = agent.rpartition("_")
    return head if head and tail.isdigit() else agent


@configurable
def policy_mapping(
    agents: Sequence[str] = (),
    mapping: str | Mapping[str, str] | Callable[[str], str] = "shared",
    frozen: Sequence[str] = (),
) -> AgentPolicies:
    """The policy of each agent of a multi-agent game (configure ``mapping`` and
    ``frozen``; the trainer passes the game's ``agents``).

    Args:
        agents: the game's agents.
        mapping: ``"shared"`` (one policy, ``shared``, for all), ``"per_agent"`` (a policy
            per agent, named as the agent), ``"per_team"`` (agents named alike but for a
            trailing ``_<n>`` share one: ``adversary_0`` and ``adversary_1`` ->
            ``adversary``), a dict ``{agent: policy}`` naming every agent, or a function
            ``agent -> policy name``.
        frozen: policies that act but never learn (their initial parameters, or those a
            resumed run restores).

    Raises:
        ConfigValueError: an unknown strategy, an agent left unmapped, a policy name that
            is not a non-empty string, or a frozen policy no agent maps to.
    """
    if isinstance(mapping, str):
        if mapping not in POLICY_MAPPINGS:
            raise invalid_value(
                "policy_mapping.mapping", mapping, f"one of {POLICY_MAPPINGS}, a dict or a function"
            )
        choose = {"shared": lambda a: "shared", "per_agent": lambda a: a, "per_team": _team}[
            mapping
        ]
    elif isinstance(mapping, Mapping):
        unmapped = [a for a in agents if a not in mapping]
        if unmapped:
            raise invalid_value(
                "policy_mapping.mapping",
                dict(mapping),
                f"a policy for every agent of {tuple(agents)}; {unmapped[0]!r} is unmapped",
            )
        choose = mapping.__getitem__
    elif callable(mapping):
        choose = mapping
    else:
        raise invalid_value(
            "policy_mapping.mapping", mapping, f"one of {POLICY_MAPPINGS}, a dict or a function"
        )
    names: list[str] = []
    for agent in agents:
        name = choose(agent)
        if not isinstance(name, str) or not name or "/" in name:
            raise invalid_value(
                "policy_mapping.mapping",
                mapping,
                f"policy names without '/' for every agent; agent {agent!r} got {name!r}",
            )
        if name not in names:
            names.append(name)
    unknown = [name for name in frozen if name not in names]
    if unknown:
        raise invalid_value(
            "policy_mapping.frozen",
            tuple(frozen),
            f"policies of the mapping {tuple(names)}; {unknown[0]!r} is none",
        )
    return AgentPolicies(
        agents=tuple(agents),
        policy_names=tuple(names),
        agent_policies=tuple(names.index(choose(agent)) for agent in agents),
        frozen=tuple(frozen),
    )


def configured_game() -> GameInfo | None:
    """The PettingZoo game the config's ``create_environment`` names (None for any other
    environment)."""
    env_name = _bound("create_environment.env_name")
    if not is_pettingzoo(env_name):
        return None
    return game_info(env_name, _bound("create_environment.env_kwargs"))


def _bound(name: str) -> Any:
    try:
        return gin.query_parameter(name)
    except ValueError:
        return None


def configured_agent_policies() -> AgentPolicies | None:
    """The configured :func:`policy_mapping` of the configured PettingZoo game (None
    for any other environment).

    Raises:
        ConfigValueError: a mapping other than ``"shared"`` for a turn-based game (its
            one learner row per game changes seat from game to game), or one mapping
            agents whose spaces differ to one policy.
    """
    info = configured_game()
    if info is None:
        return None
    policies = policy_mapping(agents=info.agents)
    if info.turn_based:
        if not policies.is_shared:
            raise invalid_value(
                "policy_mapping.mapping",
                _bound("policy_mapping.mapping"),
                f"'shared' for the turn-based game '{info.env_name}' (its one learner row per "
                "game plays a different seat each game; the other seats are opponents)",
            )
    _check_groups(info, policies)
    return policies


def _check_groups(info: GameInfo, policies: AgentPolicies) -> None:
    """Refuses a policy acting for agents whose spaces differ: their padded
    observations would mean different things in the same inputs."""
    for index, name in enumerate(policies.policy_names):
        members = [a for a, p in enumerate(policies.agent_policies) if p == index]
        problem = info.spaces.mismatch(members)
        if problem:
            raise invalid_value(
                "policy_mapping.mapping",
                _bound("policy_mapping.mapping") or "shared",
                f"a policy for agents of one space each: the agents of '{info.env_name}' "
                f"mapped to the policy '{name}' have {problem} (e.g. "
                "policy_mapping.mapping='per_team')",
            )
