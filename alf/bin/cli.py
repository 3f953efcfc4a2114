"""What the command-line tools of :mod:`alf.bin` share: how they report an error."""

from __future__ import annotations

import sys

from alf.errors import EXIT_USER_ERROR

__all__ = ["print_error"]


def print_error(tool: str, message: str, status: int = EXIT_USER_ERROR) -> int:
    """Prints ``message`` as the tool's one error line on stderr (``tool: error: ...``,
    as argparse does) and returns ``status``, the exit status to end with."""
    print(f"{tool}: error: {message}", file=sys.stderr, flush=True)
    return status
