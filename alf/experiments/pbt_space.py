"""The mutable hyperparameters of a population (``alf.bin.pbt --mutate``): their search
spaces, the members' first values, and the explore step that perturbs them.

A ``--mutate`` flag is a search space of :mod:`alf.experiments.tune` over a numeric
binding: ``'Name.param=loguniform(1e-4, 1e-2)'``, ``uniform(a, b)``, ``int(a, b)``,
``logint(a, b)`` or ``choice(v1, v2, ...)`` with numbers. The space gives the members'
first values and bounds every later one:

- first values: a ``choice`` gives its values in turn (member ``i`` gets value
  ``i mod n``, so a population as large as the choices starts on exactly that grid); the
  other kinds are drawn from their distribution;
- explore: with probability ``resample_probability`` a value is drawn afresh from the
  space; otherwise it is multiplied by one of the ``perturb`` factors (a ``choice`` moves
  to its neighbouring value, down for a factor below 1, up for one above), kept inside
  the bounds, and rounded for ``int``/``logint``.
"""

from __future__ import annotations

import ast
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from alf.errors import UserError
from alf.experiments.tune import SearchSpaceError, TuneSpace, check_space, parse_space

__all__ = [
    "DEFAULT_PERTURB",
    "Mutation",
    "MutationError",
    "PopulationConfigError",
    "binding_key",
    "check_bound_value",
    "check_config",
    "ConfigFacts",
    "parse_mutation",
    "parse_perturb",
]

DEFAULT_PERTURB = (0.8, 1.25)
"""The default ``--perturb`` factors (Jaderberg et al. 2017 use 0.8 and 1.2)."""


class PopulationConfigError(UserError, ValueError):
    """A config a population cannot be trained with (it does not load, or its members
    would not evaluate, so they could not be ranked)."""


class MutationError(PopulationConfigError):
    """A ``--mutate`` flag that does not parse, names no numeric parameter of the config,
    or gives a value its parameter refuses."""


Number = int | float


def binding_key(name: str) -> str:
    """The key of a binding name as :func:`alf.config.current_bindings` and the resume
    check spell it: ``scope/Name.param`` without the configurable's module
    (``lr/alf.utils.schedules.LinearSchedule.start`` -> ``lr/LinearSchedule.start``)."""
    scope, _, rest = name.rpartition("/")
    selector, _, param = rest.rpartition(".")
    short = f"{selector.rsplit('.', 1)[-1]}.{param}"
    return f"{scope}/{short}" if scope else short


def _number(text: str) -> Number | None:
    """The number a gin value text stands for, None if it is not a plain number."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class Mutation:
    """One mutable hyperparameter of the population.

    Attributes:
        space: its search space (``space.name`` is the binding as the user wrote it).
        choices: the numbers of a ``choice`` space, ascending (empty for the others).
    """

    space: TuneSpace
    choices: tuple[Number, ...] = ()

    @property
    def name(self) -> str:
        """The binding as written on the command line, e.g. ``PPOAlgorithm.clip``."""
        return self.space.name

    @property
    def key(self) -> str:
        """The binding's key in a run's config and checkpoint (:func:`binding_key`)."""
        return binding_key(self.space.name)

    def text(self) -> str:
        """The flag's canonical text."""
        return self.space.text()

    def gin_value(self, value: Number) -> str:
        """The gin text of ``value``."""
        return repr(float(value)) if isinstance(value, float) else str(int(value))

    def binding(self, value: Number) -> str:
        """``Name.param=value``, for ``--conf_param``."""
        return f"{self.name}={self.gin_value(value)}"

    def _bounds(self) -> tuple[Number, Number]:
        if self.choices:
            return self.choices[0], self.choices[-1]
        return self.space.args[0], self.space.args[1]

    def sample(self, rng: random.Random) -> Number:
        """A value drawn from the space."""
        kind = self.space.kind
        if kind == "choice":
            return rng.choice(self.choices)
        low, high = self._bounds()
        if kind in ("loguniform", "logint"):
            value = math.exp(rng.uniform(math.log(low), math.log(high)))
        else:
            value = rng.uniform(low, high)
        return self._fit(value)

    def initial_values(self, population: int, rng: random.Random) -> list[Number]:
        """The first value of each of ``population`` members: a ``choice``'s values in
        turn, else draws from the space."""
        if self.space.kind == "choice":
            return [self.choices[i % len(self.choices)] for i in range(population)]
        return [self.sample(rng) for _ in range(population)]

    def perturb(
        self,
        value: Number,
        rng: random.Random,
        *,
        factors: Sequence[float] = DEFAULT_PERTURB,
        resample_probability: float = 0.0,
    ) -> Number:
        """The explore step of a member that copied another: ``value`` drawn afresh
        (with probability ``resample_probability``) or multiplied by one of ``factors``
        (a ``choice`` moves to its neighbour in that direction), within the bounds."""
        if rng.random() < resample_probability:
            return self.sample(rng)
        factor = rng.choice(list(factors))
        if self.choices:
            index = min(range(len(self.choices)), key=lambda i: abs(self.choices[i] - value))
            index += 1 if factor > 1 else -1 if factor < 1 else 0
            return self.choices[min(max(index, 0), len(self.choices) - 1)]
        return self._fit(value * factor)

    def _fit(self, value: float) -> Number:
        """``value`` kept inside the bounds (and rounded for the integer kinds)."""
        low, high = self._bounds()
        value = min(max(value, low), high)
        if self.space.kind in ("int", "logint"):
            return int(round(value))
        return float(f"{value:.6g}")  # readable in configs and logs; exact at the bounds


def parse_mutation(flag: str) -> Mutation:
    """Parses a ``--mutate`` flag (a numeric search space of :func:`parse_space`).

    Raises:
        MutationError: naming the flag and what is wrong with it.
    """
    try:
        space = parse_space(flag)
    except SearchSpaceError as err:  # (its message names the flag as --space)
        raise MutationError(str(err).replace("--space", "--mutate", 1)) from None
    if space.kind != "choice":
        return Mutation(space=space)
    numbers = [_number(text) for text in space.args]
    bad = [text for text, number in zip(space.args, numbers, strict=True) if number is None]
    if bad:
        raise MutationError(
            f"--mutate '{flag}': {bad[0]} is not a number; PBT mutates numeric hyperparameters only"
        )
    if len(set(numbers)) != len(numbers):
        raise MutationError(f"--mutate '{flag}': a value is given twice")
    return Mutation(space=space, choices=tuple(sorted(numbers)))  # type: ignore[arg-type]


def check_bound_value(mutation: Mutation, bindings: dict[str, str]) -> None:
    """Refuses a mutation of a binding the config binds to something other than a
    number (a schedule, a reference, a string): PBT would silently replace it.

    Args:
        mutation: the mutation.
        bindings: the config's bindings (:func:`alf.config.current_bindings`), loaded
            without the mutations.

    Raises:
        MutationError: naming the flag, the bound value and what to do.
    """
    bound = bindings.get(mutation.key)
    if bound is None or _number(bound) is not None:
        return
    raise MutationError(
        f"--mutate '{mutation.text()}': the config binds {mutation.key} = {bound}, not a "
        f"number; PBT mutates numbers only (bind one with --conf_param="
        f"'{mutation.name}=<number>', or mutate a numeric parameter of what it references)"
    )


def parse_perturb(text: str) -> tuple[float, ...]:
    """``"0.8,1.25"`` -> ``(0.8, 1.25)``: positive factors other than 1.

    Raises:
        MutationError: naming the flag.
    """
    try:
        factors = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        factors = ()
    if not factors or any(not math.isfinite(f) or f <= 0 or f == 1 for f in factors):
        raise MutationError(
            f"--perturb '{text}': expected positive factors other than 1, e.g. 0.8,1.25"
        )
    return factors


_SCHEDULE_REFERENCE = re.compile(r"^@([\w./]+/)?[\w.]*Schedule\(\)$")


@dataclass(frozen=True)
class ConfigFacts:
    """What a population needs to know of its checked config.

    Attributes:
        num_env_steps: the config's ``TrainerConfig.num_env_steps`` (0: none).
        steps_per_iteration: env steps of one training iteration of a synchronous run
            (``unroll_length`` x ``num_parallel_environments``; None for an async one).
        warnings: lines to print: the progress schedules the config uses (they follow
            each round's budget).
    """

    num_env_steps: int
    steps_per_iteration: int | None
    warnings: list[str]


def _setting(bindings: dict[str, str], name: str, param: str) -> Any:
    """The value of ``name.param``: bound, else its default (None if unknown)."""
    from alf import config as alf_config

    text = bindings.get(f"{name}.{param}")
    if text is None:
        return alf_config.default_value(name, param)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None


def _facts(bindings: dict[str, str]) -> ConfigFacts:
    """The :class:`ConfigFacts` of the loaded ``bindings``."""
    steps_per_iteration = None
    if not _setting(bindings, "TrainerConfig", "async_unroll"):
        unroll_length = _setting(bindings, "TrainerConfig", "unroll_length") or 1
        environments = _setting(bindings, "create_environment", "num_parallel_environments")
        steps_per_iteration = max(1, math.ceil(float(unroll_length) * int(environments or 1)))
    schedules = sorted(
        f"{key} = {value}"
        for key, value in bindings.items()
        if _SCHEDULE_REFERENCE.match(value) and "ConstantSchedule" not in value
    )
    warnings = []
    if schedules:
        warnings.append(
            f"the config uses progress schedules ({'; '.join(schedules)}): a member's "
            "budget grows every round, so a schedule reaches its end value at the end of "
            "every round; bind constants for PBT (e.g. --conf_param='PPOAlgorithm.clip=0.2')"
        )
    num_env_steps = _setting(bindings, "TrainerConfig", "num_env_steps")
    return ConfigFacts(
        num_env_steps=int(num_env_steps or 0),
        steps_per_iteration=steps_per_iteration,
        warnings=warnings,
    )


def check_config(
    conf: str, conf_params: Sequence[str], mutations: Sequence[Mutation]
) -> ConfigFacts:
    """Checks the config and the mutations before anything is written: the config loads
    and evaluates; each mutation names a parameter the config's configurables have, bound
    to a number if the config binds it, and every value of its space fits the parameter
    (see :func:`alf.experiments.tune.check_space`).

    Raises:
        PopulationConfigError: the config does not load or does not evaluate.
        MutationError: naming the flag and why it is refused.
    """
    from alf import config as alf_config
    from alf.experiments.launcher import check_bindings

    error = check_bindings(conf, conf_params)  # (registers the configurables)
    if error:
        raise PopulationConfigError(error)
    bindings = alf_config.current_bindings()
    if _setting(bindings, "TrainerConfig", "evaluate") is False:
        raise PopulationConfigError(
            "the config sets TrainerConfig.evaluate = False: PBT ranks the members by their "
            "evaluation return, so they must evaluate"
        )
    for mutation in mutations:
        check_bound_value(mutation, bindings)
    try:
        check_space(
            lambda params: check_bindings(conf, params),
            conf_params,
            [m.space for m in mutations],
        )
    except SearchSpaceError as err:
        raise MutationError(str(err).replace("--space", "--mutate", 1)) from None
    return _facts(bindings)
