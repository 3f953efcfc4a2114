"""What the command-line tools of :mod:`alf.bin` share: how they report an error."""

from __future__ import annotations

import re
import sys

from alf.errors import EXIT_USER_ERROR

__all__ = ["print_error"]


_GIN_CALL_LINE = re.compile(r"^\s*In call to configurable '")


def print_error(tool: str, message: str, status: int = EXIT_USER_ERROR) -> int:
    """Prints ``message`` as the tool's one error line on stderr (``tool: error: ...``,
    as argparse does) and returns ``status``, the exit status to end with.

    Lines gin appends to an exception raised inside a configurable (``In call to
    configurable 'X' (...)``) are dropped: the message already names the setting; a
    location line (``In --conf_param: ...``, ``In file ...``) is kept."""
    lines = [line for line in message.splitlines() if not _GIN_CALL_LINE.match(line)]
    message = "\n".join(lines) if lines else message
    print(f"{tool}: error: {message}", file=sys.stderr, flush=True)
    return status
