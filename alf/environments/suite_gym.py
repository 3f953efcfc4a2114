"""Loading one Gymnasium environment with the preset and wrappers a config chooses.

:func:`load` makes one ``gymnasium.Env``; :func:`~alf.environments.create_environment`
calls it for each environment of its ``"sync"`` and ``"subprocess"`` backends, passing
the id, ``training``, ``render_mode``, ``max_episode_steps`` and ``env_kwargs``. The rest
is configured on ``load`` itself::

    suite_gym.load.preset = "atari"                  # Atari preprocessing (AtariPreset)
    suite_gym.load.preset = "vizdoom"                # Doom scenarios (VizdoomPreset)
    suite_gym.load.wrappers = [@ObservationSubset]   # applied in order, after the preset
    suite_gym.load.legacy_api = True                 # an environment of the old gym API

Ids whose namespace needs a package are registered on first use: ``ALE/...`` and the
classic Atari ids (``PongNoFrameskip-v4``, ...) import ``ale_py`` (the ``[atari]``
extra), ``dm_control/...`` imports ``shimmy`` (the ``[dmc]`` extra), ``Vizdoom...`` ids
import ``vizdoom``'s Gymnasium wrapper (the ``[vizdoom]`` extra), ``Fetch...`` and
``Hand...`` ids import ``gymnasium_robotics`` (the ``[robotics]`` extra, see
:mod:`alf.environments.robotics`); ``module:Name-v0`` imports ``module``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import difflib
import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from alf.config import configurable
from alf.environments.atari import AtariPreset
from alf.environments.legacy_gym import make_legacy
from alf.environments.robotics import import_robotics, is_robotics_id
from alf.environments.vizdoom import VizdoomPreset
from alf.errors import UserError, install_hint

__all__ = [
    "LoadOptions",
    "MissingExtraError",
    "UnknownEnvironmentError",
    "configured_options",
    "import_env_module",
    "load",
    "resolve_env_id",
]


class UnknownEnvironmentError(UserError, ValueError):
    """An environment id that is not registered with Gymnasium."""


class MissingExtraError(UnknownEnvironmentError):
    """An environment id whose namespace needs a package that is not installed; the
    message names the ALF extra that installs it."""


_CLASSIC_ATARI_ID = re.compile(r"^[A-Z][A-Za-z0-9]*(?:NoFrameskip|Deterministic)?-v[04]$")


@dataclasses.dataclass(frozen=True)
class _Namespace:
    module: str
    extra: str
    what: str


_ATARI = _Namespace("ale_py", "atari", "an Atari game (ALE)")
_DMC = _Namespace("shimmy", "dmc", "a DeepMind Control task (through shimmy)")
_VIZDOOM = _Namespace("vizdoom.gymnasium_wrapper", "vizdoom", "a VizDoom scenario")
_MINIGRID = _Namespace("minigrid", "minigrid", "a MiniGrid or BabyAI environment")
_ROBOTICS = _Namespace(
    "gymnasium_robotics", "robotics", "a Gymnasium-Robotics goal task (Fetch, Shadow Hand)"
)


def _namespace_of(env_id: str) -> _Namespace | None:
    if is_robotics_id(env_id):  # (before Atari: FetchReach-v4 looks like a classic game)
        return _ROBOTICS
    if env_id.startswith("ALE/") or _CLASSIC_ATARI_ID.match(env_id):
        return _ATARI
    if env_id.startswith("dm_control/"):
        return _DMC
    if env_id.startswith("Vizdoom"):
        return _VIZDOOM
    if env_id.startswith(("MiniGrid-", "BabyAI-")):
        return _MINIGRID
    return None


def _register_namespace(env_id: str, namespace: _Namespace) -> bool:
    """Imports the package that registers ``env_id``'s namespace with Gymnasium.

    Returns:
        False if the package is missing for an id that need not be in the namespace.
    """
    try:
        if namespace is _ROBOTICS:
            module = import_robotics()
        else:
            module = importlib.import_module(namespace.module)
    except ImportError as err:
        if namespace is _ATARI and not env_id.startswith("ALE/"):
            return False  # maybe a typo of a non-Atari id: the close matches will tell
        raise MissingExtraError(
            f"Environment id '{env_id}' is {namespace.what} and needs "
            f"'{namespace.module}' ({err}): {install_hint(namespace.extra)}"
        ) from err
    gym.register_envs(module)
    if namespace is _DMC and env_id not in gym.registry:
        try:
            importlib.import_module("dm_control")
        except ImportError as err:
            raise MissingExtraError(
                f"Environment id '{env_id}' needs 'dm_control' ({err}): "
                + install_hint(namespace.extra)
            ) from err
    return True


def resolve_env_id(env_name: str) -> str:
    """Registers the namespace of ``env_name`` if needed and checks the id is registered.

    Args:
        env_name: a registered Gymnasium id; ``module:EnvName-v0`` where importing
            ``module`` registers ``EnvName-v0``; ``module:Class`` for a ``gymnasium.Env``
            subclass (or a function returning an environment) defined in ``module``,
            registered here as ``module/Class``; or an id of a namespace registered by
            an extra (``ALE/Pong-v5``, ``PongNoFrameskip-v4``, ``dm_control/cheetah-run-v0``,
            ``VizdoomBasic-v1``, ``MiniGrid-Empty-5x5-v0``, ``FetchReach-v4``).

    Returns:
        The registered id (without the module part).

    Raises:
        MissingExtraError: the id's namespace needs a package that is not installed.
        UnknownEnvironmentError: the module cannot be imported or the id is not
            registered; the message lists close matches.
    """
    env_id = env_name
    if ":" in env_name:
        module_name, env_id = env_name.split(":", 1)
        module = import_env_module(module_name, env_name)
        if env_id not in gym.registry:
            env_id = _register_class(module, module_name, env_id)
    namespace = _namespace_of(env_id)
    registered = True
    if namespace is not None and (env_id not in gym.registry or namespace is _ROBOTICS):
        # (Gymnasium-Robotics every time: its MuJoCo fix must be in place however its
        # ids were registered.)
        registered = _register_namespace(env_id, namespace)
    if env_id not in gym.registry:
        matches = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=5, cutoff=0.6)
        hint = f" Close matches: {', '.join(matches)}." if matches else ""
        if not registered:
            hint += f" If it is an Atari game: {install_hint('atari')}."
        raise UnknownEnvironmentError(
            f"Environment id '{env_id}' is not registered with Gymnasium.{hint}"
        )
    return env_id


def import_env_module(module_name: str, env_name: str) -> Any:
    """Imports the module part of ``module:Id``, with a hint when it is not found."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is not None and module_name.startswith(err.name):
            raise UnknownEnvironmentError(
                f"Cannot import module '{module_name}' of environment id '{env_name}': "
                f"{err}. If it is your own file, put its folder on PYTHONPATH (export "
                "PYTHONPATH=/path/to/folder) or run from that folder with python -m."
            ) from err
        raise


def _register_class(module: Any, module_name: str, name: str) -> str:
    """Registers ``module.<name>`` (an environment class or factory) as ``module/name``
    if it is one; returns the id to look up (``name`` itself otherwise)."""
    entry = getattr(module, name, None)
    is_env_class = isinstance(entry, type) and issubclass(entry, gym.Env)
    is_factory = callable(entry) and not isinstance(entry, type)
    if not (is_env_class or is_factory):
        return name
    env_id = f"{module_name}/{name}"
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry)
    return env_id


_PRESETS = ("atari", "vizdoom")


def _preset_object(preset: Any) -> Any:
    """The preset object of ``preset``: None, ``"atari"`` (an :class:`AtariPreset` built
    with its bound options), ``"vizdoom"`` (a :class:`VizdoomPreset`, likewise) or a
    preset object (e.g. ``@AtariPreset()``) as is."""
    if preset is None or not isinstance(preset, str):
        return preset
    if preset == "atari":
        return AtariPreset()
    if preset == "vizdoom":
        return VizdoomPreset()
    raise ValueError(f"suite_gym.load.preset must be None or one of {_PRESETS}, got '{preset}'")


@dataclasses.dataclass(frozen=True)
class LoadOptions:
    """The options of :func:`load` a config binds (see :func:`configured_options`).

    Attributes:
        wrappers: the wrappers applied after the preset, in order.
        preset: the preset object (e.g. an :class:`~alf.environments.atari.AtariPreset`),
            or None.
        legacy_api: whether the environment uses the old ``gym`` API.
    """

    wrappers: tuple[Callable[[gym.Env], gym.Env], ...]
    preset: Any
    legacy_api: bool

    @property
    def customized(self) -> bool:
        """Whether anything beyond a plain ``gymnasium.make`` is configured."""
        return bool(self.wrappers) or self.preset is not None or self.legacy_api


_OPTIONS_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "alf_suite_gym_options_only", default=False
)


@configurable
def load(
    env_name: str,
    *,
    training: bool = True,
    render_mode: str | None = None,
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    preset: Any = None,
    legacy_api: bool = False,
) -> gym.Env:
    """Makes one Gymnasium environment with the configured preset and wrappers.

    Args:
        env_name: a registered Gymnasium id, ``module:EnvName-v0``, or an id of a
            namespace registered by an extra (see :func:`resolve_env_id`).
        training: False for an environment that evaluates or plays (presets then report
            whole-game scores: no episodic life, no reward clipping).
        render_mode: e.g. ``"rgb_array"``.
        max_episode_steps: overrides the registered time limit (for the Atari preset:
            agent steps).
        env_kwargs: keyword arguments of the environment's constructor.
        wrappers: callables ``wrapper(env) -> env`` applied in order after the preset,
            e.g. ``[@ObservationSubset]`` (gin-configured classes of
            :mod:`alf.environments.wrappers`) or Gymnasium wrappers.
        preset: None, ``"atari"`` (:class:`~alf.environments.atari.AtariPreset`, its
            options bound on ``AtariPreset``), ``"vizdoom"``
            (:class:`~alf.environments.vizdoom.VizdoomPreset`, likewise) or a preset
            object such as ``@AtariPreset()``.
        legacy_api: the environment is written for the old ``gym`` API; it is built
            from its registered entry point and adapted
            (:func:`~alf.environments.legacy_gym.make_legacy`).

    Returns:
        The environment.

    Raises:
        MissingExtraError: the id needs an extra that is not installed.
        UnknownEnvironmentError: the id is not registered.
        ValueError: an unknown preset, or a preset together with ``legacy_api``.
    """
    preset = _preset_object(preset)
    if preset is not None and legacy_api:
        raise ValueError("suite_gym.load: a preset cannot be combined with legacy_api=True")
    if _OPTIONS_ONLY.get():
        # Private: configured_options() asks for the bound options (see there).
        return LoadOptions(wrappers=tuple(wrappers), preset=preset, legacy_api=legacy_api)
    env_id = resolve_env_id(env_name)
    if preset is not None:
        env = preset.make(
            env_id,
            training=training,
            render_mode=render_mode,
            max_episode_steps=max_episode_steps,
            env_kwargs=env_kwargs,
        )
    elif legacy_api:
        env = make_legacy(
            env_id,
            render_mode=render_mode,
            max_episode_steps=max_episode_steps,
            env_kwargs=env_kwargs,
        )
    else:
        kwargs = dict(env_kwargs or {})
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = max_episode_steps
        env = gym.make(env_id, **kwargs)
    for wrapper in wrappers:
        env = wrapper(env)
    return env


def configured_options(
    env_name: str,
    *,
    training: bool = True,
    render_mode: str | None = None,
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> LoadOptions:
    """The options the current config binds on :func:`load`, without building anything.

    It calls ``load`` (in a mode that returns its options) with the arguments
    ``create_environment`` passes, so gin records the bindings of the others as used:
    the operative config a run saves keeps them even when no environment is loaded in
    this process (EnvPool, subprocess workers).

    Args:
        env_name: the environment id (passed to ``load``, not resolved).
        training: as for ``load``.
        render_mode: as for ``load``.
        max_episode_steps: as for ``load``.
        env_kwargs: as for ``load``.

    Returns:
        The configured wrappers, preset object and ``legacy_api`` flag.
    """
    token = _OPTIONS_ONLY.set(True)
    try:
        options = load(
            env_name,
            training=training,
            render_mode=render_mode,
            max_episode_steps=max_episode_steps,
            env_kwargs=env_kwargs,
        )
    finally:
        _OPTIONS_ONLY.reset(token)
    assert isinstance(options, LoadOptions)
    return options
