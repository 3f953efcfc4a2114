"""Gin glue: loading a run's configuration and exporting what it used.

A run is configured by one ``.gin`` file plus ``--conf_param`` bindings that win over
it. ``include`` lines resolve relative to the including file first, then to
``alf/examples/``. After the first training iteration, bindings the run never used are
reported by :func:`inoperative_bindings`.

Loading checks what gin does not, before anything is built: every parameter name
against the whole chain of constructors, and every bound value against the type hint of
its parameter (:mod:`alf.config_checks`); errors name the binding, its value, what is
allowed, and where it is written. Constructors check ranges with :func:`invalid_value`.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import io
import os
import re
import tokenize
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

import gin
from gin import config as _gin_config

from alf.config_checks import (
    ValueMismatchError,
    explain_syntax_error,
    fit_value,
    parameter_hints,
    show_value,
)
from alf.errors import UserError

__all__ = [
    "ConfigError",
    "ConfigValueError",
    "configurable",
    "fit_config_value",
    "invalid_value",
    "load_config",
    "operative_config_str",
    "inoperative_bindings",
    "EXAMPLES_DIR",
    "MUTABLE_BINDINGS_FILE",
]

EXAMPLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")

configurable = gin.configurable
"""Registers a class or function with gin (``alf.config.configurable``)."""

_INCLUDE_RE = re.compile(r"""^\s*include\s+['"](.+?)['"]""")


_GIN_ERRORS = (ValueError, SyntaxError, OSError, TypeError, tokenize.TokenError)


class ConfigError(UserError):
    """A configuration that cannot be loaded: missing file, syntax error, unknown name or
    parameter, bad value."""


class ConfigValueError(ConfigError, ValueError):
    """A configured value of the wrong type or out of range. The message's first line
    names the setting (``Name.param``), its value and what is allowed."""


_SOURCES: tuple[tuple[_Line, ...], tuple[str, ...]] = ((), ())
"""The file lines and ``--conf_param`` bindings last loaded, to locate a bad value."""


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
        except Exception as err:
            # The innermost file of nested includes (tokenize's errors do not name it).
            if getattr(err, "alf_config_file", None) is None:
                err.alf_config_file = resolved
            raise
        finally:
            self._including_dirs.pop()


_INCLUDE_READER = _IncludeReader()


def _install_include_reader() -> None:
    readers = _gin_config._FILE_READERS
    if not readers or readers[0][0] != _INCLUDE_READER.open:
        readers.insert(0, (_INCLUDE_READER.open, _INCLUDE_READER.exists))


_Line = tuple[str, int, str]
"""A line of a config file: ``(absolute path, line number, text)``."""


def _config_lines(conf_file: str, including: tuple[str, ...] = ()) -> list[_Line]:
    """The lines of ``conf_file`` with its includes expanded in place: every line gin
    parses, in the order it parses them (so the last binding of a name is the one that
    holds).

    Raises:
        ConfigError: an include cannot be resolved (named with its file and line), or a
            file is not UTF-8 text.
    """
    path = os.path.abspath(conf_file)
    if path in including:  # an include cycle: gin reports it
        return []
    lines: list[_Line] = []
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config '{path}' is not a text config file (not UTF-8 at byte {err.start})"
        ) from err
    for lineno, line in enumerate(io.StringIO(text), 1):
        lines.append((path, lineno, line))
        match = _INCLUDE_RE.match(line)
        if not match:
            continue
        resolved = _resolve_include(match.group(1), os.path.dirname(path))
        if resolved is None:
            raise ConfigError(
                f"{path}, line {lineno}: included file '{match.group(1)}' was "
                f"found neither next to the including file nor in {EXAMPLES_DIR}."
            )
        lines.extend(_config_lines(resolved, (*including, path)))
    return lines


def load_config(conf_file: str | None, conf_params: Sequence[str] = ()) -> None:
    """Clears gin and loads ``conf_file`` followed by ``conf_params`` bindings.

    Args:
        conf_file: path of a ``.gin`` file, or None for bindings only.
        conf_params: ``'Name.param=value'`` strings applied after the file.

    Raises:
        ConfigError: the file is missing, has a syntax error (named with its line), or
            a name or parameter is unknown (with close matches).
        ConfigValueError: a bound value does not fit its parameter's type hint.
    """
    global _SOURCES
    gin.clear_config()
    _install_include_reader()
    lines: list[_Line] = []
    _SOURCES = ((), tuple(conf_params))
    if conf_file is not None:
        if not os.path.isfile(conf_file):
            raise ConfigError(f"Config file not found: '{conf_file}'")
        lines = _config_lines(conf_file)
        _SOURCES = (tuple(lines), tuple(conf_params))
        path = os.path.abspath(conf_file)
        _parse(lambda: gin.parse_config_file(path), _Source(f"config file '{conf_file}'"))
    _parse_conf_params(conf_params)
    _check_parameter_names(lines, conf_params)
    _check_values(lines, conf_params)


@dataclass(frozen=True)
class _Source:
    """What :func:`_parse` parses, for its error messages.

    Attributes:
        label: e.g. ``"config file 'x.gin'"`` or ``"--conf_param"``.
        conf_param: the one ``--conf_param`` binding parsed, if that is what it is.
        text: the text parsed when it is not a file (a saved ``config.gin``).
    """

    label: str
    conf_param: str | None = None
    text: str | None = None


def _parse_conf_params(conf_params: Sequence[str]) -> None:
    """Parses the ``--conf_param`` bindings one by one, so an error names its binding."""
    for param in conf_params:
        _parse(lambda param=param: gin.parse_config(param), _Source("--conf_param", param))


_UNKNOWN_NAME_RE = re.compile(r"No configurable matching (reference )?'@?([\w./]+?)(\(\))?'")


def _parse(parse: Callable[[], object], source: _Source) -> None:
    """Runs a gin parse, turning its errors into one clear :class:`ConfigError`."""
    try:
        parse()
    except ImportError as err:
        raise ConfigError(
            f"{source.label} imports a module that cannot be imported ({err}). Make sure "
            "the module is on PYTHONPATH (e.g. run from its directory with python -m, or "
            "export PYTHONPATH=/path/to/dir)."
        ) from err
    except (SyntaxError, tokenize.TokenError) as err:
        raise ConfigError(_syntax_error_message(err, source)) from err
    except _GIN_ERRORS as err:
        first, _, rest = str(err).partition("\n")
        match = _UNKNOWN_NAME_RE.search(first)
        if match:
            first += _did_you_mean(match.group(2), reference=bool(match.group(1)))
        if source.conf_param is not None:
            # gin's location is "line 1 of the bindings string": name the binding instead.
            rest = f"  In --conf_param: {source.conf_param}"
        message = f"invalid configuration ({source.label}): {first}"
        raise ConfigError(message + (f"\n{rest}" if rest.strip() else "")) from err


def _syntax_error_message(err: BaseException, source: _Source) -> str:
    """``invalid configuration: <file>, line N: <plain sentence>`` and the line."""
    # gin's SyntaxError names the file (so does one in a module a config imports); a
    # tokenize error does not, but the include reader noted the file it came from.
    path = getattr(err, "filename", None) or getattr(err, "alf_config_file", None)
    if source.conf_param is not None:
        _, sentence = explain_syntax_error(err, source.conf_param, "binding")
        return f"invalid configuration: --conf_param '{source.conf_param}': {sentence}"
    text = source.text or ""
    if path and os.path.isfile(path):
        with open(path) as f:
            text = f.read()
    lineno, sentence = explain_syntax_error(err, text)
    where = f"{path}, line {lineno}" if path else f"{source.label}, line {lineno}"
    lines = text.splitlines()
    shown = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
    return f"invalid configuration: {where}: {sentence}" + (f"\n  {shown}" if shown else "")


def _configurable_names() -> list[str]:
    return sorted({configurable.name for _, configurable in _gin_config._REGISTRY.items()})


def _did_you_mean(selector: str, *, reference: bool) -> str:
    """`` Did you mean: PPOAlgorithm?`` for a misspelt configurable name ("" if none is
    close): the registered names closest to the last component of ``selector``, ignoring
    case (the best ones only: within 0.1 of the closest's similarity)."""
    scope, _, name = selector.rpartition("/")
    name = name.rpartition(".")[2].lower()
    by_lower: dict[str, str] = {}
    for known in _configurable_names():
        by_lower.setdefault(known.lower(), known)
    if name in by_lower:  # only the case differs
        close = [name]
    else:
        close = difflib.get_close_matches(name, list(by_lower), n=3, cutoff=0.6)
    if not close:
        return ""
    scores = [difflib.SequenceMatcher(None, name, c).ratio() for c in close]
    best = [c for c, score in zip(close, scores, strict=True) if score >= scores[0] - 0.1]
    prefix = ("@" if reference else "") + (f"{scope}/" if scope else "")
    return f" Did you mean: {', '.join(prefix + by_lower[c] for c in best)}?"


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


def _locate(needle: str, lines: Sequence[_Line], conf_params: Sequence[str]) -> str:
    """Where the binding ``needle`` (``Name.param``) that holds is written, for error
    messages: its last ``--conf_param``, else its last line in the config files."""
    pattern = re.compile(rf"(^|[\s/]){re.escape(needle)}\s*=")
    for param in reversed(conf_params):
        if pattern.search(param):
            return f"In --conf_param: {param}"
    for path, lineno, line in reversed(lines):
        if pattern.search(line):
            return f'In file "{path}", line {lineno}: {line.strip()}'
    return ""


def _check_parameter_names(lines: Sequence[_Line] = (), conf_params: Sequence[str] = ()) -> None:
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
                where = _locate(f"{match.name}.{param}", lines, conf_params)
                raise ConfigError(
                    f"invalid configuration: configurable '{match.name}' doesn't have a "
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
    global _SOURCES
    gin.clear_config()
    _SOURCES = ((), tuple(conf_params))
    _parse(
        lambda: gin.parse_config(text, skip_unknown=skip_unknown),
        _Source("the saved config.gin", text=text),
    )
    _parse_conf_params(conf_params)
    _check_parameter_names((), conf_params)
    _check_values((), conf_params)


def _check_values(lines: Sequence[_Line], conf_params: Sequence[str]) -> None:
    """Checks every bound value against its parameter's type hint (see
    :func:`alf.config_checks.fit_value`); an integral float bound to an int parameter
    (``1e6``) is rebound as an int.

    Raises:
        ConfigValueError: naming the first binding whose value does not fit, and where
            it is written.
    """
    for (scope, selector), params in _gin_config._CONFIG.items():
        match = _gin_config._REGISTRY.get_match(selector)
        if match is None:
            continue
        hints = parameter_hints(match.wrapped)
        for param, value in params.items():
            if param not in hints:
                continue
            name = f"{scope}/{match.name}.{param}" if scope else f"{match.name}.{param}"
            try:
                fitted = fit_value(hints[param], value)
            except ValueMismatchError as err:
                where = _locate(name, lines, conf_params)
                raise ConfigValueError(
                    _value_message(name, value, err.allowed, err.got)
                    + (f"\n  {where}" if where else "")
                ) from None
            if fitted is not value:
                params[param] = fitted


def _value_message(name: str, value: object, allowed: str, got: str | None = None) -> str:
    got_text = f" (got {got})" if got else ""
    return f"invalid configuration: {name} = {show_value(value)} must be {allowed}{got_text}"


def _is_bound(name: str) -> bool:
    """Whether gin holds a binding of ``name`` (``Name.param``, any scope)."""
    configurable_name, _, param = name.rpartition(".")
    for (_, selector), params in _gin_config._CONFIG.items():
        match = _gin_config._REGISTRY.get_match(selector)
        if match is not None and match.name == configurable_name and param in params:
            return True
    return False


def invalid_value(name: str, value: object, allowed: str) -> ConfigValueError:
    """The error for a setting out of range, for constructors' argument checks.

    Args:
        name: the setting, as bound in gin: ``"PPOAlgorithm.mini_batch_size"``.
        value: its value.
        allowed: what it may be, completing "must be ...": ``"an int >= 1"``.

    Returns:
        A :class:`ConfigValueError` whose message is ``invalid configuration: <name> =
        <value> must be <allowed>``, followed by where the binding is written when the
        last loaded config binds it.
    """
    message = _value_message(name, value, allowed)
    if _is_bound(name):
        where = _locate(name, *_SOURCES)
        if where:
            message += f"\n  {where}"
    return ConfigValueError(message)


def fit_config_value(name: str, hint: Any, value: Any) -> Any:
    """Checks a value given in Python against a type hint, as :func:`load_config` checks
    bound values (e.g. the fields of a dataclass configurable).

    Returns:
        ``value`` (an integral float converted to int for an int hint).

    Raises:
        ConfigValueError: the value does not fit the hint.
    """
    try:
        return fit_value(hint, value)
    except ValueMismatchError as err:
        raise invalid_value(name, value, f"{err.allowed} (got {err.got})") from None


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


MUTABLE_BINDINGS_FILE = "mutable_bindings.json"
"""A file of a run directory, ``{"bindings": ["PPOAlgorithm.learning_rate", ...]}``: the
bindings (keys of :func:`current_bindings`, compared exactly) that the run's owner may
change between resumptions. ``alf.bin.pbt`` writes it in each member of a population;
the resume check (``alf.trainers.resume.check_resumed_config``) lets those bindings, and
no other, differ from the checkpoint's."""


def diff_bindings(
    old: dict[str, str],
    new: dict[str, str],
    ignore_prefixes: Sequence[str] = (),
    *,
    allowed: Collection[str] = (),
) -> list[str]:
    """Human-readable differences between two :func:`current_bindings` results.

    Args:
        old: the bindings to compare ...
        new: ... with these.
        ignore_prefixes: bindings starting with one of these are not compared.
        allowed: bindings (whole keys, e.g. ``lr/LinearSchedule.start``) not compared.

    Returns:
        One ``'Name.param: old -> new'`` line per differing binding, sorted.
    """
    lines = []
    for key in sorted(set(old) | set(new)):
        if key.startswith(tuple(ignore_prefixes)) or key in allowed:
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
