"""``alf.bin.play --opponent``: a trained run against another run or a fixed opponent in
a two-player turn-based game, as each seat (see :mod:`alf.bin.play`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any, NoReturn

from alf.algorithms.policy import Policy
from alf.environments.pettingzoo_turns import TurnBasedEnvironment, resolve_opponent
from alf.errors import AlfError
from alf.trainers.league import PolicyOpponent, outcome_rates, seat_evaluators
from alf.trainers.trained_run import load_trained_run

__all__ = ["play_match"]

MATCH_ENVS = 10
"""Games played at once per seat."""


def _opponent(args: argparse.Namespace, env: TurnBasedEnvironment) -> Any:
    """The opponent ``--opponent`` names: a fixed one's name, or a run's policy."""
    value = args.opponent
    path = os.path.abspath(os.path.expanduser(value))
    if not os.path.isdir(path):
        resolve_opponent(value, env.info)  # an unknown name is one line
        return value
    other_env, other = load_trained_run(path, trusted_modules=args.trust_module)
    other_info = getattr(other_env, "info", None)
    other_env.close()
    if other_info is None or other_info.env_name != env.info.env_name:
        raise AlfError(
            f"--opponent '{value}' is a run of another environment "
            f"({getattr(other_info, 'env_name', type(other_env).__name__)}), not of "
            f"'{env.info.env_name}'"
        )
    return PolicyOpponent(policy=Policy(algorithm=other), sample=True)


def play_match(
    args: argparse.Namespace,
    *,
    env: Any,
    algorithm: Any,
    fail: Callable[[str], NoReturn],
) -> None:
    """Plays ``args.num_episodes`` games as each seat against ``args.opponent`` and
    prints the wins, draws and losses."""
    env.close()
    if not isinstance(env, TurnBasedEnvironment):
        fail(
            f"--opponent needs a run of a turn-based game (pettingzoo:<module> with env()); "
            f"this run's environment is {type(env).__name__}"
        )
    try:
        opponent = _opponent(args, env)
    except AlfError as err:
        fail(str(err))
    evaluators = seat_evaluators(
        info=env.info,
        policy=Policy(algorithm=algorithm),
        opponent=opponent,
        games=args.num_episodes,
        num_envs=min(MATCH_ENVS, args.num_episodes),
        seed=args.seed,
    )
    scores = []
    for seat, evaluator in evaluators.items():
        result = evaluator.evaluate()
        evaluator.env.close()
        win, draw, loss = outcome_rates(result.returns)
        games = len(result.returns)
        scores += [1.0 if r > 0 else 0.5 if r == 0 else 0.0 for r in result.returns]
        print(
            f"as {seat}: {round(win * games)} wins, {round(draw * games)} draws, "
            f"{round(loss * games)} losses in {games} games",
            flush=True,
        )
    print(f"win_rate: {round(sum(s == 1.0 for s in scores) / len(scores), 4)}", flush=True)
