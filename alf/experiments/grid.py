"""Grid specifications: ``'Name.param=[a, b]'`` flags into named grid points."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from alf.errors import UserError

__all__ = ["GridError", "GridPoint", "expand_grid", "parse_grid_flag", "split_top_level"]


class GridError(UserError, ValueError):
    """A ``--grid`` flag that does not parse."""


@dataclass(frozen=True)
class GridPoint:
    """One combination of grid values.

    Attributes:
        name: directory name of the point (``param=value,...``; the config's stem when
            there is no grid).
        bindings: ``('Name.param=value', ...)`` to pass as ``--conf_param``.
    """

    name: str
    bindings: tuple[str, ...]


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Splits ``text`` at ``sep`` outside brackets and quotes; parts are stripped."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if quote or depth:
        raise GridError(f"unbalanced brackets or quotes in '{text}'")
    parts.append(text[start:].strip())
    return parts


_NAME_RE = re.compile(r"^[A-Za-z_][\w./]*\.[A-Za-z_]\w*$")


def parse_grid_flag(flag: str) -> tuple[str, list[str]]:
    """``'Name.param=[a, b]'`` -> ``('Name.param', ['a', 'b'])`` (values are gin text).

    Raises:
        GridError: naming the flag, if it is not ``Name.param=[v1, v2, ...]``.
    """
    if "=" not in flag:
        raise GridError(f"--grid '{flag}': expected 'Name.param=[value1, value2, ...]'")
    name, values = (part.strip() for part in flag.split("=", 1))
    if not _NAME_RE.match(name):
        raise GridError(f"--grid '{flag}': '{name}' is not a 'Name.param' binding name")
    if not (values.startswith("[") and values.endswith("]")):
        raise GridError(f"--grid '{flag}': the values must be a list in brackets, e.g. [1, 2]")
    try:
        items = split_top_level(values[1:-1])
    except GridError as err:
        raise GridError(f"--grid '{flag}': {err}") from None
    if items == [""] or any(not item for item in items):
        raise GridError(f"--grid '{flag}': empty value in the list")
    return name, items


def _short_name(name: str, names: Sequence[str]) -> str:
    """The parameter's own name, or the full name when two grid names share it."""
    param = name.rsplit(".", 1)[1]
    if sum(n.rsplit(".", 1)[1] == param for n in names) > 1:
        return name
    return param


def _safe(text: str) -> str:
    text = re.sub(r"[\s'\"]", "", text)
    return re.sub(r"[^\w.+\-=,@%()]", "_", text)


def expand_grid(flags: Sequence[str], default_name: str) -> list[GridPoint]:
    """Every combination of the ``--grid`` flags' values, in order (the last flag varies
    fastest); one point named ``default_name`` with no bindings when there is no flag.

    Raises:
        GridError: a flag does not parse, or a parameter appears twice.
    """
    if not flags:
        return [GridPoint(name=default_name, bindings=())]
    parsed = [parse_grid_flag(flag) for flag in flags]
    names = [name for name, _ in parsed]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise GridError(f"--grid: {', '.join(duplicates)} given more than once")
    points = []
    for values in itertools.product(*(vals for _, vals in parsed)):
        label = ",".join(
            f"{_short_name(n, names)}={_safe(v)}" for n, v in zip(names, values, strict=True)
        )
        bindings = tuple(f"{n}={v}" for n, v in zip(names, values, strict=True))
        points.append(GridPoint(name=label, bindings=bindings))
    labels = [p.name for p in points]
    if len(set(labels)) != len(labels):
        raise GridError("--grid: two grid points get the same directory name; use distinct values")
    return points
