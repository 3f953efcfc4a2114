"""Reading a run's saved ``config.gin`` as data, never as code.

A run directory may come from anywhere (a colleague, a download), so ``play``,
``export`` and the Python API's ``alf.load`` do not hand its ``config.gin`` to gin
unchecked: gin can import modules (``import os``), register arbitrary callables
(``from __gin__ import dynamic_registration``) and include other files. Before anything
is parsed, every statement is checked:

* a binding (``Name.param = value``, ``scope/Name.param = value``) or a macro
  (``NAME = value``) is allowed when every configurable it names, as its target or in a
  ``@reference``, is registered by ALF (``import_configurables``) or by a module the user
  trusts; values are Python literals, which gin reads without evaluating code;
* ``import module`` is allowed only for a module the user trusts by name
  (``--trust_module=module``): that is how a run trained with the user's own
  configurables (``import my_envs`` in its config) is replayed;
* ``from __gin__ import dynamic_registration``, any other ``from`` import and
  ``include`` are refused;
* an environment id with a module part (``create_environment.env_name = 'pkg:Env-v0'``,
  which imports ``pkg``) must name a package installed in the Python environment, or a
  trusted module: a module found in the current directory or on ``PYTHONPATH`` could have
  come with the run.

Anything else stops with one :class:`UntrustedConfigError` line naming the file, the
line and what to do. See ``docs/security.md``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass

from gin import config as _gin_config
from gin import config_parser

from alf.config import ConfigError, load_config_text

__all__ = ["UntrustedConfigError", "check_saved_config", "load_saved_config", "read_config_text"]

_ENV_NAME_SELECTORS = ("create_environment.env_name",)
"""Bindings whose string value may name a module to import (``module:Id``)."""

_ALF_MODULES = ("alf", "torch.optim", "gin")
"""Modules whose registered configurables a saved config may name: ALF's own, the
optimizers ALF registers, and gin's macros and constants."""


class UntrustedConfigError(ConfigError):
    """A saved ``config.gin`` asks for something a run directory may not do (import a
    module, register a callable, include a file, name an unregistered configurable)."""


def read_config_text(path: str) -> str:
    """The text of a config file, with one clear error when it is not text.

    Raises:
        ConfigError: the file cannot be read or is not UTF-8 text.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise ConfigError(f"cannot read config '{path}': {err.strerror or err}") from err
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config '{path}' is not a text config file (not UTF-8 at byte {err.start})"
        ) from err


@dataclass
class _RecordingDelegate(config_parser.ParserDelegate):
    """A gin parser delegate that records the configurables a value references and
    builds nothing (so checking a config runs no code)."""

    references: list[str]

    def configurable_reference(self, scoped_selector: str, evaluate: bool) -> str:
        self.references.append(scoped_selector.rsplit("/", 1)[-1])
        return f"@{scoped_selector}"

    def macro(self, name: str) -> str:
        return f"%{name}"


def _where(path: str, location: object) -> str:
    line = getattr(location, "line_num", None)
    return f"{path}, line {line}" if line is not None else path


def _trust_hint(module: str) -> str:
    return (
        f"a run directory is read as data; if you trust this run and module '{module}', "
        f"pass --trust_module={module} (Python: trusted_modules=['{module}'])"
    )


def _is_installed(module: str) -> bool:
    """Whether the top-level package of ``module`` is installed in the Python environment
    (site-packages or the standard library), found without running any of its code."""
    top = module.split(".", 1)[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    origin = getattr(spec, "origin", None) or next(
        iter(getattr(spec, "submodule_search_locations", None) or ()), None
    )
    if spec is None or origin is None:
        return False
    if origin in ("built-in", "frozen"):
        return True
    roots = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib", "platstdlib")}
    origin = os.path.realpath(origin)
    return any(origin.startswith(os.path.realpath(root) + os.sep) for root in roots)


def _allowed_modules(trusted: Sequence[str]) -> tuple[str, ...]:
    return (*_ALF_MODULES, *trusted)


def _is_allowed_selector(selector: str, trusted: Sequence[str]) -> bool:
    match = _gin_config._REGISTRY.get_match(selector)
    if match is None:
        return False
    module = match.module or ""
    return any(module == m or module.startswith(m + ".") for m in _allowed_modules(trusted))


def _check_import(statement: config_parser.ImportStatement, path: str, trusted: Sequence[str]):
    where = _where(path, statement.location)
    if statement.is_from:
        raise UntrustedConfigError(
            f"{where}: '{statement.format()}' is refused: a saved config.gin may not "
            "import or register code (ALF never writes such a line)"
        )
    if statement.module not in trusted:
        raise UntrustedConfigError(
            f"{where}: 'import {statement.module}' is refused: {_trust_hint(statement.module)}"
        )


def _check_binding(
    statement: config_parser.BindingStatement,
    references: Sequence[str],
    path: str,
    trusted: Sequence[str],
) -> None:
    where = _where(path, statement.location)
    names = list(references)
    if statement.arg_name:  # a macro binding (NAME = value) has no configurable
        names.insert(0, statement.selector)
    for name in names:
        if not _is_allowed_selector(name, trusted):
            raise UntrustedConfigError(
                f"{where}: '{name}' is not a configurable registered by ALF or by a "
                "trusted module, so this config cannot be replayed (if the run used your "
                "own module, pass it with --trust_module=MODULE)"
            )
    selector = f"{statement.selector}.{statement.arg_name}".rsplit("/", 1)[-1]
    value = statement.value
    if (
        any(selector.endswith(s) for s in _ENV_NAME_SELECTORS)
        and isinstance(value, str)
        and ":" in value
    ):
        module = value.split(":", 1)[0]
        if module not in trusted and not _is_installed(module):
            raise UntrustedConfigError(
                f"{where}: environment id '{value}' imports module '{module}', which is "
                f"not an installed package: {_trust_hint(module)}"
            )


def check_saved_config(text: str, path: str, *, trusted_modules: Sequence[str] = ()) -> None:
    """Checks a saved config statement by statement, running none of it (see the module
    docstring for what is allowed). Trusted modules must already be imported, so that
    the configurables they register are known.

    Args:
        text: the config's text.
        path: its file, named in errors.
        trusted_modules: modules the user trusts (imports of them are allowed, and so
            are their configurables).

    Raises:
        UntrustedConfigError: naming the file, the line and the refused statement.
        ConfigError: the text is not valid gin syntax.
    """
    delegate = _RecordingDelegate(references=[])
    parser = config_parser.ConfigParser(text, delegate)
    try:
        for statement in parser:
            if isinstance(statement, config_parser.ImportStatement):
                _check_import(statement, path, trusted_modules)
            elif isinstance(statement, config_parser.IncludeStatement):
                raise UntrustedConfigError(
                    f"{_where(path, statement.location)}: 'include' is refused: a saved "
                    "config.gin is self-contained (ALF never writes an include)"
                )
            elif isinstance(statement, config_parser.BindingStatement):
                _check_binding(statement, delegate.references, path, trusted_modules)
            else:  # a `Name:` block: only with dynamic registration
                raise UntrustedConfigError(
                    f"{_where(path, getattr(statement, 'location', None))}: a block "
                    "declaration is refused in a saved config.gin"
                )
            delegate.references.clear()
    except SyntaxError as err:
        raise ConfigError(f"{path}, line {err.lineno}: not valid gin syntax: {err.msg}") from err


def load_saved_config(
    path: str, conf_params: Sequence[str] = (), *, trusted_modules: Sequence[str] = ()
) -> None:
    """Clears gin and loads a run's saved ``config.gin`` as data (checked by
    :func:`check_saved_config` before gin sees it), then ``conf_params``.

    Args:
        path: the ``config.gin`` file.
        conf_params: ``'Name.param=value'`` bindings applied after it (typed by the user
            on this command line, so trusted).
        trusted_modules: modules the user trusts; they are imported first.

    Raises:
        UntrustedConfigError: the config asks for something a run directory may not do.
        ConfigError: the file is unreadable, not text, or not a valid config.
    """
    text = read_config_text(path)
    for module in trusted_modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ConfigError(
                f"--trust_module={module}: cannot import it ({err}); make sure it is on PYTHONPATH"
            ) from err
    check_saved_config(text, path, trusted_modules=trusted_modules)
    load_config_text(text, conf_params)
