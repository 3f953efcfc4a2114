"""The league of a self-play run and its evaluation against fixed opponents (see
:mod:`alf.trainers.self_play` for what they do)."""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from alf import nest
from alf.algorithms.policy import Policy
from alf.data_structures import StepType, TimeStep
from alf.environments.pettingzoo_games import GameInfo
from alf.environments.pettingzoo_turns import (
    FixedOpponent,
    Opponent,
    TurnBasedEnvironment,
    resolve_opponent,
)
from alf.errors import UserError
from alf.trainers.evaluator import EvalResult, Evaluator
from alf.trainers.self_play import SelfPlay

__all__ = [
    "FIXED_PREFIX",
    "LEAGUE_PREFIX",
    "RESULT_WINDOW",
    "FixedOpponentEvaluation",
    "League",
    "PolicyOpponent",
    "SelfPlayError",
    "SelfPlayRun",
    "frozen_policy_maker",
    "outcome_rates",
    "performance_rating",
    "seat_evaluators",
]

RESULT_WINDOW = 200
"""Games per snapshot that its win rate (for ``"pfsp"``) is computed over."""

LEAGUE_PREFIX = "league/"
"""Checkpoint entries of the league's snapshots: ``league/<name>``."""

FIXED_PREFIX = "fixed/"
"""The names of the games drawn against ``SelfPlay.fixed_opponents``: ``fixed/<name>``."""


class SelfPlayError(UserError, ValueError):
    """Self-play asked of a run whose environment is not a turn-based game."""


class PolicyOpponent:
    """An :data:`~alf.environments.pettingzoo_turns.Opponent` that moves with a frozen
    :class:`Policy`; :meth:`batch` moves in several games with one forward pass. The
    policy must have no recurrent state.

    Args:
        policy: the frozen policy.
        sample: sample the move from the policy (else its greedy move).
    """

    def __init__(self, *, policy: Policy, sample: bool) -> None:
        self._policy = policy
        self._sample = sample

    @torch.no_grad()
    def batch(self, observations: list[Any]) -> list[Any]:
        """The moves for ``observations`` (one per game, numpy nests)."""
        size = len(observations)
        batched = nest.map_structure(
            lambda *xs: torch.as_tensor(np.stack([np.asarray(x) for x in xs])), *observations
        )
        time_step = TimeStep(
            step_type=torch.full((size,), StepType.MID, dtype=torch.int32),
            reward=torch.zeros(size),
            discount=torch.ones(size),
            observation=batched,
            prev_action=nest.map_structure(lambda s: s.zeros((size,)), self._policy.action_spec),
            env_id=torch.arange(size, dtype=torch.int64),
        )
        state = self._policy.initial_state(size, greedy=not self._sample)
        if self._sample:
            action = self._policy.explore_step(time_step, state).action
        else:
            action = self._policy.greedy_step(time_step, state)[0]
        return [nest.map_structure(lambda a, i=i: a[i].numpy(), action) for i in range(size)]

    def __call__(self, observation: Any, rng: np.random.Generator) -> Any:
        return self.batch([observation])[0]


@dataclasses.dataclass
class _Member:
    name: str
    policy: Policy
    opponent: PolicyOpponent
    results: deque = dataclasses.field(default_factory=lambda: deque(maxlen=RESULT_WINDOW))

    @property
    def win_rate(self) -> float:
        """The learner's score against this snapshot (wins 1, draws 0.5); 0.5 unplayed."""
        if not self.results:
            return 0.5
        return float(np.mean(self.results))


class League:
    """The snapshots the learner plays against: an
    :class:`~alf.environments.pettingzoo_turns.OpponentSource`.

    Args:
        settings: the run's :class:`SelfPlay`.
        make_policy: builds a new frozen policy of the run's algorithm (its parameters
            are then loaded).
        fixed_opponents: ``SelfPlay.fixed_opponents`` resolved, by name.
    """

    def __init__(
        self,
        *,
        settings: SelfPlay,
        make_policy: Callable[[str], Policy],
        fixed_opponents: dict[str, Opponent],
    ) -> None:
        self.settings = settings
        self._make_policy = make_policy
        self.members: list[_Member] = []
        self._fixed = fixed_opponents
        self._fixed_results = {name: deque(maxlen=RESULT_WINDOW) for name in fixed_opponents}

    def add(self, name: str, source: Any) -> None:
        """Adds a snapshot named ``name`` of ``source`` (an algorithm to copy the
        parameters of, or a state dict), dropping the oldest beyond ``max_members``."""
        policy = self._make_policy(f"league-{name}")
        if isinstance(source, dict):
            policy.algorithm.load_state_dict(source)
        else:
            policy.load_parameters(source)
        self.members = [m for m in self.members if m.name != name]
        opponent = PolicyOpponent(policy=policy, sample=self.settings.sample_moves)
        self.members.append(_Member(name=name, policy=policy, opponent=opponent))
        del self.members[: -self.settings.max_members]

    def draw(self, rng: np.random.Generator) -> tuple[str, Opponent]:
        """The snapshot a new game is played against (see the module docstring), or
        with probability ``fixed_opponent_share`` one of the fixed opponents."""
        share = self.settings.fixed_opponent_share
        if share > 0 and rng.random() < share:
            names = sorted(self._fixed)
            name = names[int(rng.integers(len(names)))]
            return FIXED_PREFIX + name, self._fixed[name]
        if self.settings.sampling == "latest":
            member = self.members[-1]
        elif self.settings.sampling == "uniform":
            member = self.members[int(rng.integers(len(self.members)))]
        else:
            weights = np.array([(1.0 - m.win_rate) ** 2 + 0.05 for m in self.members])
            member = self.members[int(rng.choice(len(self.members), p=weights / weights.sum()))]
        return LEAGUE_PREFIX + member.name, member.opponent

    def record(self, name: str, learner_return: float) -> None:
        """Counts a finished game (a positive return is a win, zero a draw)."""
        score = 1.0 if learner_return > 0 else 0.5 if learner_return == 0 else 0.0
        if name.startswith(FIXED_PREFIX):
            self._fixed_results[name[len(FIXED_PREFIX) :]].append(score)
        for member in self.members:
            if LEAGUE_PREFIX + member.name == name:
                member.results.append(score)

    def states(self) -> dict[str, dict[str, Any]]:
        """The snapshots' parameters for a checkpoint, as ``league/<name>`` entries."""
        return {LEAGUE_PREFIX + m.name: m.policy.algorithm.state_dict() for m in self.members}

    def restore(self, entries: dict[str, dict[str, Any]]) -> None:
        """Rebuilds the league from a checkpoint's ``league/<name>`` entries."""
        for key, state in entries.items():
            if key.startswith(LEAGUE_PREFIX):
                self.add(key[len(LEAGUE_PREFIX) :], state)

    def scalars(self) -> dict[str, float]:
        """The league's size, the learner's mean win rate against it and against each
        fixed training opponent (wins 1, draws 0.5, over its last games)."""
        played = [m.win_rate for m in self.members if m.results]
        stats = {"league/members": float(len(self.members))}
        if played:
            stats["league/win_rate"] = float(np.mean(played))
        for name, results in self._fixed_results.items():
            if results:
                stats[f"league/vs_{name}/win_rate"] = float(np.mean(results))
        return stats


def performance_rating(score: float, opponent_rating: float, games: int) -> float:
    """The Elo-style rating whose expected score against ``opponent_rating`` is
    ``score`` (kept within half a game of 0 and 1)."""
    low = 0.5 / max(games, 1)
    score = min(max(score, low), 1.0 - low)
    return opponent_rating + 400.0 * math.log10(score / (1.0 - score))


def outcome_rates(returns: list[float]) -> tuple[float, float, float]:
    """Win, draw and loss rates of a zero-sum game's returns (positive, zero, negative)."""
    array = np.asarray(returns)
    return float((array > 0).mean()), float((array == 0).mean()), float((array < 0).mean())


def seat_evaluators(
    *,
    info: GameInfo,
    policy: Policy,
    opponent: str | Opponent,
    games: int,
    num_envs: int,
    seed: int,
) -> dict[str, Evaluator]:
    """An evaluator per seat of ``info``'s game: ``policy`` (greedy) playing that seat
    for ``games`` games against ``opponent`` (a name of
    :func:`~alf.environments.pettingzoo_turns.turn_based_opponent`, or an opponent such
    as a :class:`PolicyOpponent`)."""
    evaluators = {}
    for seat in info.agents:
        env = TurnBasedEnvironment(
            info=info,
            num_envs=num_envs,
            seed=seed,
            opponent=opponent if isinstance(opponent, str) else "random",
            seat=seat,
        )
        if not isinstance(opponent, str):
            env.set_opponents(FixedOpponent(name="opponent", opponent=opponent))
        evaluators[seat] = Evaluator(env=env, policy=policy, num_episodes=games)
    return evaluators


class FixedOpponentEvaluation:
    """Plays the greedy learner against each of ``SelfPlay.eval_opponents`` as each
    seat and rates it (see the module docstring).

    Args:
        settings: the run's :class:`SelfPlay`.
        info: the game.
        policy: the learner's acting policy.
        num_envs: games played at once.
        seed: seed of the evaluation games.
    """

    def __init__(
        self, *, settings: SelfPlay, info: GameInfo, policy: Policy, num_envs: int, seed: int
    ) -> None:
        for name in settings.eval_opponents:
            resolve_opponent(name, info)  # an unknown one fails at start
        self._settings = settings
        self._evaluators = {
            (name, seat): evaluator
            for name in settings.eval_opponents
            for seat, evaluator in seat_evaluators(
                info=info,
                policy=policy,
                opponent=name,
                games=settings.eval_games,
                num_envs=num_envs,
                seed=seed,
            ).items()
        }
        self._ratings = {"random": 0.0}
        if "heuristic" in settings.eval_opponents and "random" in settings.eval_opponents:
            self._ratings["heuristic"] = self._rate_heuristic(info, seed)

    def _rate_heuristic(self, info: GameInfo, seed: int) -> float:
        """The heuristic's rating: its score against random play."""
        heuristic = resolve_opponent("heuristic", info)
        env = TurnBasedEnvironment(info=info, num_envs=8, seed=seed + 1, opponent="random")
        rng = np.random.default_rng(seed)
        time_step, returns = env.reset(), []
        current = np.zeros(env.batch_size)
        while len(returns) < 200:
            observation = nest.map_structure(lambda x: x.numpy(), time_step.observation)
            moves = [
                heuristic(nest.map_structure(lambda x, i=i: x[i], observation), rng)
                if time_step.step_type[i] != StepType.LAST
                else 0
                for i in range(env.batch_size)
            ]
            time_step = env.step(torch.tensor(moves))
            current += time_step.reward.numpy()
            last = time_step.step_type.numpy() == StepType.LAST
            returns += current[last].tolist()
            current[time_step.step_type.numpy() == StepType.FIRST] = 0.0
        env.close()
        win, draw, _ = outcome_rates(returns)
        return performance_rating(win + 0.5 * draw, 0.0, len(returns))

    def evaluate(self) -> dict[str, float]:
        """Plays the games; returns ``vs_<opponent>/<seat>/{win,draw,loss}_rate`` and
        ``rating``."""
        scalars: dict[str, float] = {}
        ratings = []
        for (name, seat), evaluator in self._evaluators.items():
            result: EvalResult = evaluator.evaluate()
            win, draw, loss = outcome_rates(result.returns)
            prefix = f"vs_{name}/{seat}/"
            scalars.update(
                {prefix + "win_rate": win, prefix + "draw_rate": draw, prefix + "loss_rate": loss}
            )
            if name in self._ratings:
                score = win + 0.5 * draw
                ratings.append(performance_rating(score, self._ratings[name], len(result.returns)))
        if ratings:
            scalars["rating"] = float(np.mean(ratings))
        return scalars

    def close(self) -> None:
        """Closes the evaluation games."""
        for evaluator in self._evaluators.values():
            evaluator.env.close()


def check_self_play_env(env: Any) -> TurnBasedEnvironment:
    """The training environment, checked to be a turn-based game stepped in this
    process (what a league's opponents need)."""
    if not isinstance(env, TurnBasedEnvironment):
        raise SelfPlayError(
            "TrainerConfig.self_play needs a turn-based PettingZoo game (pettingzoo:<module> "
            "with env()) stepped by create_environment.vectorization_mode='sync' and "
            f"TrainerConfig.async_unroll=False; the run's environment is {type(env).__name__}"
        )
    return env


def frozen_policy_maker(
    make_algorithm: Callable[..., Any], *, observation_spec: Any, action_spec: Any
) -> Callable[[str], Policy]:
    """``name -> Policy``: a new frozen (eval mode, no gradients) policy of the run's
    algorithm, built without touching the run's random-number stream."""

    def make(name: str) -> Policy:
        with torch.random.fork_rng(devices=[]):
            algorithm = make_algorithm(observation_spec=observation_spec, action_spec=action_spec)
        for parameter in algorithm.parameters():
            parameter.requires_grad_(False)
        return Policy(algorithm=algorithm.eval(), name=name)

    return make


class SelfPlayRun:
    """A run's self-play: its league (the training games' opponents, a snapshot added
    every ``snapshot_interval`` iterations) and its evaluation against fixed opponents.

    Args:
        settings: the run's :class:`SelfPlay`.
        env: the training environment (a :class:`TurnBasedEnvironment`).
        policy: the learner's acting policy (evaluated).
        make_policy: builds a frozen policy (see :func:`frozen_policy_maker`).
        learner: the algorithm being trained (the first snapshot's source, unless the
            league is restored).
        saved: the resumed checkpoint's policy entries (its ``league/<name>`` ones).
        iteration: the run's iteration now.
        num_eval_envs: games played at once in an evaluation (0: no evaluation).
        seed: seed of the evaluation games.
    """

    def __init__(
        self,
        *,
        settings: SelfPlay,
        env: Any,
        policy: Policy,
        make_policy: Callable[[str], Policy],
        learner: Any,
        saved: dict[str, dict[str, Any]],
        iteration: int,
        num_eval_envs: int,
        seed: int,
    ) -> None:
        game = check_self_play_env(env)
        self.settings = settings
        self.league = League(
            settings=settings,
            make_policy=make_policy,
            fixed_opponents={
                name: resolve_opponent(name, game.info) for name in settings.fixed_opponents
            },
        )
        self.league.restore(saved)
        if not self.league.members:
            self.league.add(f"iteration-{iteration}", learner)
        game.set_opponents(self.league)
        self.evaluation = (
            FixedOpponentEvaluation(
                settings=settings, info=game.info, policy=policy, num_envs=num_eval_envs, seed=seed
            )
            if num_eval_envs
            else None
        )

    def after_iteration(self, iteration: int, learner: Any) -> None:
        """Adds a snapshot of ``learner`` every ``snapshot_interval`` iterations."""
        if iteration % self.settings.snapshot_interval == 0:
            self.league.add(f"iteration-{iteration}", learner)

    def eval_scalars(self) -> dict[str, float]:
        """The fixed-opponent evaluation's rates and rating, and the league's figures."""
        scalars = self.evaluation.evaluate() if self.evaluation is not None else {}
        return {**scalars, **self.league.scalars()}

    def close(self) -> None:
        """Closes the evaluation games."""
        if self.evaluation is not None:
            self.evaluation.close()
