"""Gin glue: loading a run's configuration and exporting what it used.

A run is configured by one ``.gin`` file plus ``--conf_param`` bindings that win over
it. ``include`` lines resolve relative to the including file first, then to
``alf/examples/``. After the first training iteration, bindings the run never used are
reported by :func:`inoperative_bindings`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import gin
from gin import config as _gin_config

__all__ = [
    "ConfigError",
    "configurable",
    "load_config",
    "operative_config_str",
    "inoperative_bindings",
    "EXAMPLES_DIR",
]

EXAMPLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")

configurable = gin.configurable
"""Registers a class or function with gin (``alf.config.configurable``)."""

_INCLUDE_RE = re.compile(r"""^\s*include\s+['"](.+?)['"]""")


class ConfigError(Exception):
    """A configuration that cannot be loaded: missing file, unknown name or parameter."""


def _resolve_include(name: str, including_dir: str) -> str | None:
    for base in (including_dir, EXAMPLES_DIR):
        candidate = name if os.path.isabs(name) else os.path.join(base, name)
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


def _include_dirs(conf_file: str) -> list[str]:
    """Directories of ``conf_file`` and everything it includes, in discovery order."""
    dirs: list[str] = []
    seen: set[str] = set()
    pending = [os.path.abspath(conf_file)]
    while pending:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        here = os.path.dirname(path)
        if here not in dirs:
            dirs.append(here)
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                match = _INCLUDE_RE.match(line)
                if not match:
                    continue
                resolved = _resolve_include(match.group(1), here)
                if resolved is None:
                    raise ConfigError(
                        f"{path}, line {lineno}: included file '{match.group(1)}' was "
                        f"found neither next to the including file nor in {EXAMPLES_DIR}."
                    )
                pending.append(resolved)
    return dirs


def import_all_configurables() -> None:
    """Imports every ALF module that registers configurables, so configs can name them."""
    import alf.algorithms  # noqa: F401
    import alf.environments  # noqa: F401
    import alf.networks  # noqa: F401
    import alf.trainers  # noqa: F401
    import alf.utils.schedules  # noqa: F401


def load_config(conf_file: str | None, conf_params: Sequence[str] = ()) -> None:
    """Clears gin and loads ``conf_file`` followed by ``conf_params`` bindings.

    Args:
        conf_file: path of a ``.gin`` file, or None for bindings only.
        conf_params: ``'Name.param=value'`` strings applied after the file.

    Raises:
        ConfigError: the file is missing, or a name, parameter or value is invalid.
            The message is gin's, which names the file (or binding) and the line.
    """
    import_all_configurables()
    gin.clear_config()
    _gin_config._LOCATION_PREFIXES[:] = [""]
    files = []
    if conf_file is not None:
        if not os.path.isfile(conf_file):
            raise ConfigError(f"Config file not found: '{conf_file}'")
        for directory in _include_dirs(conf_file) + [EXAMPLES_DIR]:
            if directory not in _gin_config._LOCATION_PREFIXES:
                _gin_config._LOCATION_PREFIXES.append(directory)
        files = [conf_file]
    try:
        gin.parse_config_files_and_bindings(files, list(conf_params))
    except (ValueError, SyntaxError, OSError, TypeError) as err:
        source = f"config file '{conf_file}'" if conf_file else "--conf_param"
        raise ConfigError(f"Invalid configuration ({source}): {err}") from err


def load_config_text(text: str) -> None:
    """Clears gin and loads a config given as text (e.g. a saved ``config.gin``)."""
    import_all_configurables()
    gin.clear_config()
    try:
        gin.parse_config(text)
    except (ValueError, SyntaxError) as err:
        raise ConfigError(f"Invalid saved configuration: {err}") from err


def config_str() -> str:
    """Every binding currently loaded (used or not), in gin syntax."""
    return gin.config_str()


def operative_config_str() -> str:
    """The bindings (including defaults) of every configurable that has been called."""
    return gin.operative_config_str()


def inoperative_bindings() -> list[str]:
    """Bindings that were configured but never used by any call so far.

    Returns:
        ``'scope/Name.param'`` strings, sorted.
    """
    unused = []
    for (scope, selector), params in _gin_config._CONFIG.items():
        used = _gin_config._OPERATIVE_CONFIG.get((scope, selector), {})
        name = selector.split(".")[-1]
        prefix = f"{scope}/" if scope else ""
        for param in params:
            if param not in used:
                unused.append(f"{prefix}{name}.{param}")
    return sorted(unused)
