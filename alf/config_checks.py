"""Checks of a gin configuration that gin itself does not make, for :mod:`alf.config`.

* :func:`fit_value`: whether a bound value fits the type hint of the parameter it is
  bound to, before anything is built. Understood hints: ``int``, ``float``, ``bool``,
  ``str``, ``None``, ``X | Y`` and ``Optional``, ``Literal``, ``dict``/``Mapping``,
  ``list``/``tuple``/``Sequence`` (and their items), ``Callable``. Any other hint (a
  class, ``Any``, a protocol...), or a union with such a member, accepts anything, so
  that a valid config is never refused; so does a value gin computes only when the
  configurable is called (``@Name()``, ``%MACRO``).
* :func:`parameter_hints`: the hints of a configurable's parameters.
* :func:`explain_syntax_error`: one plain sentence for a gin (or ``tokenize``) syntax
  error, with the line it is on.

The rules: ``int`` takes an int, or a float with an integral value (``1e6``), which
becomes an int; ``float`` takes an int or a float; neither takes ``True``/``False``;
``bool`` takes only ``True``/``False``; a list and a tuple are interchangeable.

This module imports nothing from ALF.
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import io
import keyword
import numbers
import re
import tokenize
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gin import config as _gin_config

__all__ = [
    "ValueMismatchError",
    "explain_syntax_error",
    "fit_value",
    "parameter_hints",
    "show_value",
]

_MAX_SHOWN = 80


class ValueMismatchError(Exception):
    """A value that does not fit its parameter's hint.

    Attributes:
        allowed: what the parameter takes, e.g. ``"an int or None"``.
        got: what it was given instead, e.g. ``"float"``.
    """

    def __init__(self, allowed: str, got: str) -> None:
        super().__init__(f"must be {allowed} (got {got})")
        self.allowed = allowed
        self.got = got


def show_value(value: Any) -> str:
    """``repr(value)`` shortened for a one-line message (gin references as ``@Name``)."""
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _is_reference(value: Any) -> bool:
    return isinstance(
        value, (_gin_config.ConfigurableReference, _gin_config._UnknownConfigurableReference)
    )


def _is_opaque(value: Any) -> bool:
    """Values whose type is known only once the configurable is called: ``@Name()``,
    ``%MACRO``, a reference to an unregistered name, ``gin.REQUIRED``."""
    if value is _gin_config.REQUIRED:
        return True
    if isinstance(value, _gin_config._UnknownConfigurableReference):
        return True
    return isinstance(value, _gin_config.ConfigurableReference) and value.evaluate


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if _is_reference(value):
        return f"the configurable {show_value(value)}"
    return type(value).__name__


# ------------------------------------------------------------------- rules
@dataclass(frozen=True)
class _Rule:
    """What one hint accepts: :meth:`fit` returns the value (an integral float converted
    to int where an int is expected) or raises :class:`ValueMismatchError`."""

    description: str
    plural: str

    def fit(self, value: Any) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class _Scalar(_Rule):
    kind: str  # "int", "float", "bool", "str", "none", "dict"

    def matches(self, value: Any) -> bool:
        if self.kind == "none":
            return value is None
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "str":
            return isinstance(value, str)
        if self.kind == "dict":
            return isinstance(value, collections.abc.Mapping)
        if isinstance(value, bool):
            return False
        if self.kind == "int":
            return isinstance(value, numbers.Integral)
        return isinstance(value, numbers.Real)  # float

    def fit(self, value: Any) -> Any:
        if self.matches(value):
            return value
        if self.kind == "int" and isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueMismatchError(self.description, _kind(value) + _hint_for(self.kind, value))


def _hint_for(kind: str, value: Any) -> str:
    """A suggestion for a common slip: a number in quotes."""
    if kind in ("int", "float") and isinstance(value, str):
        try:
            int(value) if kind == "int" else float(value)
        except ValueError:
            return ""
        return f"; without the quotes it would be the number {value.strip()}"
    return ""


@dataclass(frozen=True)
class _Callable(_Rule):
    def fit(self, value: Any) -> Any:
        if callable(value) or _is_reference(value):
            return value
        raise ValueMismatchError(self.description, _kind(value))


@dataclass(frozen=True)
class _Literal(_Rule):
    values: tuple[Any, ...]

    def fit(self, value: Any) -> Any:
        if any(value == v and type(value) is type(v) for v in self.values):
            return value
        raise ValueMismatchError(self.description, show_value(value))


@dataclass(frozen=True)
class _Sequence(_Rule):
    item: _Rule | None  # None: items not checked
    length: int | None = None  # fixed-length tuple hints
    items: tuple[_Rule, ...] = ()
    takes_str: bool = False

    def fit(self, value: Any) -> Any:
        kinds = (list, tuple, str) if self.takes_str else (list, tuple)
        if not isinstance(value, kinds):
            raise ValueMismatchError(self.description, _kind(value))
        if self.length is not None:
            if len(value) != self.length:
                count = len(value)
                raise ValueMismatchError(self.description, f"{count} item{'s' * (count != 1)}")
            rules: Any = self.items
        elif self.item is None:
            return value
        else:
            rules = [self.item] * len(value)
        fitted = [
            item if _is_opaque(item) else self._fit_item(rule, item)
            for rule, item in zip(rules, value, strict=True)
        ]
        if type(value) in (list, tuple) and any(
            a is not b for a, b in zip(fitted, value, strict=True)
        ):
            return type(value)(fitted)
        return value

    def _fit_item(self, rule: _Rule, item: Any) -> Any:
        try:
            return rule.fit(item)
        except ValueMismatchError:
            raise ValueMismatchError(self.description, f"the item {show_value(item)}") from None


@dataclass(frozen=True)
class _Union(_Rule):
    options: tuple[_Rule, ...]

    def fit(self, value: Any) -> Any:
        for option in self.options:
            try:
                return option.fit(value)
            except ValueMismatchError:
                continue
        raise ValueMismatchError(self.description, _kind(value))


_SCALARS = {
    int: ("an int", "ints", "int"),
    float: ("a number", "numbers", "float"),
    bool: ("True or False", "bools", "bool"),
    str: ("a string", "strings", "str"),
    type(None): ("None", "Nones", "none"),
}
_SEQUENCES = (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_CALLABLES = (collections.abc.Callable,)


def _join(descriptions: list[str]) -> str:
    if len(descriptions) == 1:
        return descriptions[0]
    return ", ".join(descriptions[:-1]) + " or " + descriptions[-1]


def _sequence_rule(hint: Any, origin: Any) -> _Rule | None:
    args = typing.get_args(hint)
    takes_str = origin is collections.abc.Sequence or hint is collections.abc.Sequence
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        items = tuple(_rule(a) for a in args)
        if any(r is None for r in items):
            return _Sequence("a list or tuple", "lists or tuples", None, takes_str=takes_str)
        described = ", ".join(r.description for r in items)
        return _Sequence(
            f"a list or tuple of {len(items)} items ({described})",
            "lists or tuples",
            None,
            length=len(items),
            items=items,
        )
    item = _rule(args[0]) if args else None
    if item is None:
        return _Sequence("a list or tuple", "lists or tuples", None, takes_str=takes_str)
    return _Sequence(
        f"a list or tuple of {item.plural}",
        f"lists or tuples of {item.plural}",
        item,
        takes_str=takes_str,
    )


def _rule(hint: Any) -> _Rule | None:
    """The rule of ``hint``, or None when the hint is not understood (anything goes)."""
    try:
        return _known_rule(hint)
    except TypeError:  # e.g. an unhashable hint object
        return None


def _known_rule(hint: Any) -> _Rule | None:
    if hint in _SCALARS:
        description, plural, kind = _SCALARS[hint]
        return _Scalar(description, plural, kind)
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        options = tuple(_rule(a) for a in typing.get_args(hint))
        if any(o is None for o in options):
            return None
        description = _join([o.description for o in options])
        return _Union(description, description, options)
    if origin is typing.Literal:
        values = typing.get_args(hint)
        description = "one of " + ", ".join(show_value(v) for v in values)
        return _Literal(description, description, values)
    if hint in _SEQUENCES or origin in _SEQUENCES:
        return _sequence_rule(hint, origin)
    if hint in _MAPPINGS or origin in _MAPPINGS:
        return _Scalar("a dict", "dicts", "dict")
    if hint in _CALLABLES or origin in _CALLABLES or hint is typing.Callable:
        return _Callable("a callable (@Name)", "callables")
    return None


def fit_value(hint: Any, value: Any) -> Any:
    """Checks ``value`` against the type ``hint`` of the parameter it is bound to.

    Args:
        hint: a resolved type hint (from :func:`typing.get_type_hints`).
        value: a value parsed by gin (references included) or given in Python.

    Returns:
        ``value``, or its int form where an int is expected and the value is a float
        with an integral value (``1e6``).

    Raises:
        ValueMismatchError: the value does not fit the hint.
    """
    if _is_opaque(value):
        return value
    rule = _rule(hint)
    return value if rule is None else rule.fit(value)


# ------------------------------------------------------ parameters' hints
def _type_hints(function: Callable[..., Any]) -> dict[str, Any]:
    """``function``'s resolved parameter hints; one that cannot be resolved (a name
    imported only for type checkers) is left out."""
    try:
        return typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - any failure: resolve the hints one by one
        pass
    hints = {}
    namespace = getattr(function, "__globals__", {})
    for name, hint in getattr(function, "__annotations__", {}).items():
        if isinstance(hint, str):
            try:
                hint = eval(hint, namespace)  # noqa: S307 - the module's own annotation
            except Exception:  # noqa: BLE001
                continue
        hints[name] = hint
    return hints


@functools.cache
def parameter_hints(wrapped: Callable[..., Any]) -> dict[str, Any]:
    """The type hint of each named parameter of a configurable: a function's own, or for
    a class those of the ``__init__`` chain its ``**kwargs`` reach (as
    ``alf.config`` walks it for parameter names), the first declaration of a name
    winning. Hints that are not understood are left to :func:`fit_value`."""
    if inspect.isclass(wrapped):
        functions = [k.__dict__["__init__"] for k in wrapped.__mro__ if "__init__" in k.__dict__]
    else:
        functions = [wrapped]
    hints: dict[str, Any] = {}
    seen: set[str] = set()
    for function in functions:
        function = inspect.unwrap(function)
        try:
            params = inspect.signature(function).parameters.values()
        except (TypeError, ValueError):
            break
        resolved = _type_hints(function)
        for p in params:
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.name in seen:
                continue
            seen.add(p.name)
            if p.name in resolved:
                hints[p.name] = resolved[p.name]
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return hints


# ----------------------------------------------------------- syntax errors
def _unclosed_bracket(text: str, line: int | None = None) -> tuple[str, int] | None:
    """The innermost bracket of ``text`` still open at the start of line ``line`` (or at
    the end of the text), as ``(bracket, line number)``; None if all are closed."""
    stack: list[tuple[str, int]] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if line is not None and token.start[0] >= line:
                break
            if token.type == tokenize.OP and token.string in "([{":
                stack.append((token.string, token.start[0]))
            elif token.type == tokenize.OP and token.string in ")]}" and stack:
                stack.pop()
    except (tokenize.TokenError, SyntaxError):
        pass
    return stack[-1] if stack else None


_FAILED_TOKEN_RE = re.compile(r"Failed to parse token '(.*)'", re.S)
_EXPECTED_CLOSE_RE = re.compile(r"Expected ',' or '([\]\)\}])'")


def _unterminated_quote(line: str) -> bool:
    """Whether ``line`` has a quote that is never closed."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, SyntaxError):
        return True
    return any(t.type == tokenize.ERRORTOKEN and t.string.strip() in ("'", '"') for t in tokens)


def _after(line: str, offset: int | None) -> str:
    if offset is None:
        return ""
    return line[offset:].strip()[:30]


def explain_syntax_error(err: BaseException, text: str, what: str = "file") -> tuple[int, str]:
    """A plain sentence for gin's syntax error ``err`` in the config ``text``.

    Args:
        err: a :class:`SyntaxError` raised by gin's parser (its message and
            ``lineno``/``offset``/``text``), or a :class:`tokenize.TokenError`
            (``args[1]`` is the ``(line, column)`` of the end of the text).
        text: the whole config text gin was parsing (for brackets left open).
        what: what ``text`` is, for the sentence: ``"file"`` or ``"binding"``.

    Returns:
        ``(line number, sentence)``: the line to blame and what is wrong there.
    """
    if isinstance(err, tokenize.TokenError):
        message = str(err.args[0]) if err.args else ""
        position = err.args[1] if len(err.args) > 1 else (1, 0)
        if "multi-line string" in message or "triple-quoted" in message:
            return position[0], "a triple-quoted string starting on this line is never closed"
        if "string" in message:  # Python >= 3.12 tokenizes a whole line at once
            return position[0], "a quoted string is not closed on this line (missing closing quote)"
        bracket = _unclosed_bracket(text)
        if bracket is not None:
            return bracket[1], f"'{bracket[0]}' opened on this line is never closed"
        return position[0], f"unclosed bracket or parenthesis at the end of the {what}"
    message = str(getattr(err, "msg", "") or err)
    lineno = getattr(err, "lineno", None) or 1
    line = getattr(err, "text", None) or ""
    offset = getattr(err, "offset", None)
    first = message.splitlines()[0] if message else ""
    if first.startswith("Couldn't parse statement"):
        sentence = (
            "expected '=' after the parameter name (a binding reads 'Name.param = value'; "
            "a name has no spaces)"
        )
    elif first.startswith("Unable to parse value"):
        if _unterminated_quote(line):
            sentence = "a quoted string is not closed on this line (missing closing quote)"
        else:
            sentence = f"cannot parse the value {_after(line, offset)!r}"
    elif first.startswith("Expected newline"):
        sentence = (
            f"unexpected {_after(line, offset)!r} after the value (one binding per line; "
            "is there an extra bracket or a typo in a number?)"
        )
    elif match := _EXPECTED_CLOSE_RE.match(first):
        opening = {"]": "[", ")": "(", "}": "{"}[match.group(1)]
        bracket = _unclosed_bracket(text, lineno) if lineno else None
        if bracket is not None and bracket[1] < lineno:
            lineno = bracket[1]
            sentence = f"'{opening}' opened on this line is never closed"
        else:
            sentence = f"expected ',' or '{match.group(1)}' inside the '{opening}...'"
    elif token := _FAILED_TOKEN_RE.search(message):
        word = token.group(1)
        if word.isidentifier() and not keyword.iskeyword(word):
            sentence = (
                f"{word!r} is not a value: write a string in quotes ('{word}'), a "
                f"configurable as @{word} or @{word}(), or a macro as %{word}"
            )
        else:
            sentence = (
                f"cannot parse the value at {word!r} (a value is a Python literal, a "
                "@reference or a %macro)"
            )
    elif first.startswith("Expected file path as string"):
        sentence = "include needs a file path in quotes, e.g. include 'other.gin'"
    elif first.startswith("Malformatted scope or selector"):
        sentence = (
            "malformed name: expected 'Name.param', 'scope/Name.param' or 'module.Name.param'"
        )
    elif first.startswith("Unexpected token"):
        sentence = f"unexpected {_after(line, offset)!r}"
    else:
        sentence = first.rstrip(".") or type(err).__name__
    return lineno, sentence
