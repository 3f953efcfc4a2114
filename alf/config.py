"""Gin glue: loading a run's configuration and exporting what it used.

A run is configured by one ``.gin`` file plus ``--conf_param`` bindings that win over
it. ``include`` lines resolve relative to the including file first, then to
``alf/examples/``. After the first training iteration, bindings the run never used are
reported by :func:`inoperative_bindings`.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import os
import re
import tokenize
from collections.abc import Callable, Iterator, Sequence
from typing import IO

import gin
from gin import config as _gin_config

from alf.errors import UserError

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


_GIN_ERRORS = (ValueError, SyntaxError, OSError, TypeError, tokenize.TokenError)


class ConfigError(UserError):
    """A configuration that cannot be loaded: missing file, unknown name or parameter."""


def _resolve_include(name: str, including_dir: str) -> str | None:
    for base in (including_dir, EXAMPLES_DIR):
        candidate = name if os.path.isabs(name) else os.path.join(base, name)
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


class _IncludeReader:
    """A gin file reader that resolves a relative path against the directory of the file
    that includes it, then against ``alf/examples/`` (gin alone only knows global search
    paths, so a same-named file elsewhere could shadow the intended one)."""

    def __init__(self) -> None:
        self._including_dirs: list[str] = []

    def resolve(self, path: str) -> str | None:
        if os.path.isabs(path):
            return path if os.path.isfile(path) else None
        base = self._including_dirs[-1] if self._including_dirs else os.getcwd()
        return _resolve_include(path, base)

    def exists(self, path: str) -> bool:
        return self.resolve(path) is not None

    @contextlib.contextmanager
    def open(self, path: str) -> Iterator[IO[str]]:
        resolved = self.resolve(path)
        if resolved is None:
            raise OSError(f"Config file not found: '{path}'")
        self._including_dirs.append(os.path.dirname(resolved))
        try:
            with open(resolved) as f:
                yield f
        finally:
            self._including_dirs.pop()


_INCLUDE_READER = _IncludeReader()


def _install_include_reader() -> None:
    readers = _gin_config._FILE_READERS
    if not readers or readers[0][0] != _INCLUDE_READER.open:
        readers.insert(0, (_INCLUDE_READER.open, _INCLUDE_READER.exists))


def _check_includes(conf_file: str) -> None:
    """Raises a clear :class:`ConfigError` for an include that cannot be resolved.

    Returns:
        ``conf_file`` and every file it includes, as absolute paths.
    """
    seen: set[str] = set()
    pending = [os.path.abspath(conf_file)]
    while pending:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        here = os.path.dirname(path)
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
    return sorted(seen)


def load_config(conf_file: str | None, conf_params: Sequence[str] = ()) -> None:
    """Clears gin and loads ``conf_file`` followed by ``conf_params`` bindings.

    Args:
        conf_file: path of a ``.gin`` file, or None for bindings only.
        conf_params: ``'Name.param=value'`` strings applied after the file.

    Raises:
        ConfigError: the file is missing, or a name, parameter or value is invalid.
            The message is gin's, which names the file (or binding) and the line.
    """
    gin.clear_config()
    _install_include_reader()
    conf_files: list[str] = []
    if conf_file is not None:
        if not os.path.isfile(conf_file):
            raise ConfigError(f"Config file not found: '{conf_file}'")
        conf_files = _check_includes(conf_file)
        path = os.path.abspath(conf_file)
        _parse(lambda: gin.parse_config_file(path), f"config file '{conf_file}'")
    _parse(lambda: gin.parse_config(list(conf_params)), "--conf_param")
    _check_parameter_names(conf_files, conf_params)


def _parse(parse: Callable[[], object], source: str) -> None:
    """Runs a gin parse, turning its errors into one clear :class:`ConfigError`."""
    try:
        parse()
    except ImportError as err:
        raise ConfigError(
            f"{source} imports a module that cannot be imported ({err}). Make sure the "
            "module is on PYTHONPATH (e.g. run from its directory with python -m, or "
            "export PYTHONPATH=/path/to/dir)."
        ) from err
    except _GIN_ERRORS as err:
        raise ConfigError(f"Invalid configuration ({source}): {err}") from err


def _accepted_parameters(cls: type) -> set[str] | None:
    """Named ``__init__`` parameters of ``cls`` and of the bases its ``**kwargs`` reach;
    None when some ``__init__`` on the way accepts arbitrary names we cannot list."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        init = inspect.unwrap(init)
        params = inspect.signature(init).parameters.values()
        names |= {
            p.name
            for p in params
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"
        }
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            return names
        if klass is object:
            return None
    return None


def _locate(needle: str, conf_files: Sequence[str], conf_params: Sequence[str]) -> str:
    """Where the binding ``needle`` (``Name.param``) is written, for error messages."""
    pattern = re.compile(rf"(^|[\s/]){re.escape(needle)}\s*=")
    for path in conf_files:
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                if pattern.search(line):
                    return f'In file "{path}", line {lineno}: {line.strip()}'
    for param in conf_params:
        if pattern.search(param):
            return f"In --conf_param: {param}"
    return ""


def _check_parameter_names(conf_files: Sequence[str] = (), conf_params: Sequence[str] = ()) -> None:
    """Gin accepts any parameter name for a constructor taking ``**kwargs``; ALF's
    algorithms pass those on to their base classes, so a typo would only fail later with
    no hint of the config. Check every binding against the whole chain of constructors."""
    for (_, selector), params in _gin_config._CONFIG.items():
        match = _gin_config._REGISTRY.get_match(selector)
        if match is None or not inspect.isclass(match.wrapped):
            continue
        accepted = _accepted_parameters(match.wrapped)
        if accepted is None:
            continue
        for param in params:
            if param not in accepted:
                close = difflib.get_close_matches(param, sorted(accepted), n=3)
                hint = f" Did you mean: {', '.join(close)}?" if close else ""
                where = _locate(f"{match.name}.{param}", conf_files, conf_params)
                raise ConfigError(
                    f"Invalid configuration: configurable '{match.name}' doesn't have a "
                    f"parameter named '{param}'.{hint} (It accepts: "
                    f"{', '.join(sorted(accepted))}.)" + (f"\n  {where}" if where else "")
                )


def load_config_text(
    text: str, conf_params: Sequence[str] = (), *, skip_unknown: bool | Sequence[str] = False
) -> None:
    """Clears gin and loads a config given as text (e.g. a saved ``config.gin``), then
    ``conf_params`` bindings, with the same checks as :func:`load_config`.

    Args:
        text: the bindings, in gin syntax.
        conf_params: ``'Name.param=value'`` strings applied after ``text``.
        skip_unknown: ignore bindings of configurables that are not registered (True),
            or of these names only: for worker processes that import only the packages
            they use (:func:`alf.configurables.import_configurables`) and load a config
            already checked by their parent.
    """
    gin.clear_config()
    _parse(
        lambda: gin.parse_config(text, skip_unknown=skip_unknown), "the saved config.gin"
    )
    _parse(lambda: gin.parse_config(list(conf_params)), "--conf_param")
    _check_parameter_names((), conf_params)


def default_value(name: str, param: str) -> object | None:
    """The default of parameter ``param`` of the registered configurable ``name`` (None if
    it is not registered or has no such default): what it gets when not bound."""
    match = _gin_config._REGISTRY.get_match(name)
    if match is None:
        return None
    parameter = inspect.signature(match.wrapped).parameters.get(param)
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return None
    return parameter.default


def config_str() -> str:
    """Every binding currently loaded (used or not), in gin syntax."""
    return gin.config_str()


def operative_config_str() -> str:
    """The bindings (including defaults) of every configurable that has been called."""
    return gin.operative_config_str()


def current_bindings() -> dict[str, str]:
    """Every loaded binding as ``{'scope/Name.param': repr(value)}`` (plain strings, so it
    can be stored in a checkpoint and compared on resume)."""
    result = {}
    for (scope, selector), params in _gin_config._CONFIG.items():
        name = selector.split(".")[-1]
        prefix = f"{scope}/" if scope else ""
        for param, value in params.items():
            result[f"{prefix}{name}.{param}"] = repr(value)
    return result


def diff_bindings(
    old: dict[str, str], new: dict[str, str], ignore_prefixes: Sequence[str] = ()
) -> list[str]:
    """Human-readable differences between two :func:`current_bindings` results.

    Args:
        old, new: the bindings to compare.
        ignore_prefixes: bindings starting with one of these are not compared.

    Returns:
        One ``'Name.param: old -> new'`` line per differing binding, sorted.
    """
    lines = []
    for key in sorted(set(old) | set(new)):
        if key.startswith(tuple(ignore_prefixes)):
            continue
        before, after = old.get(key, "(unset)"), new.get(key, "(unset)")
        if before != after:
            lines.append(f"{key}: {before} -> {after}")
    return lines


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
