"""What the command-line tools of :mod:`alf.bin` share: how they report an error, and how
their ``--help`` finds their flags under a console script."""

from __future__ import annotations

import re
import sys
from typing import Any

from alf.errors import EXIT_USER_ERROR

__all__ = ["declare_main_flags", "print_error", "stray_arguments_error"]


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


def declare_main_flags(flags: Any, names: tuple[str, ...], module_doc: str | None) -> None:
    """Makes ``--help`` list the absl ``flags`` named ``names`` and show ``module_doc`` when
    the program is a console script (``alf-train``), whose main module is not the one
    defining them.

    absl's ``--help`` lists the key flags of the module named ``sys.argv[0]``, and shows
    ``__main__``'s docstring.
    """
    for name in names:
        flags.register_key_flag_for_module(sys.argv[0], flags[name])
    main_module = sys.modules.get("__main__")
    if main_module is not None and not getattr(main_module, "__doc__", None):
        main_module.__doc__ = module_doc


def stray_arguments_error(argv: list[str], *, takes_bindings: bool) -> str | None:
    """The error line for words absl left over after the flags (``argv[1:]``), or None if
    there are none.

    absl ignores them, so ``train --conf=c.gin TrainerConfig.num_iterations=3`` would
    train with the binding silently dropped. ``takes_bindings`` says whether the tool
    accepts gin bindings through ``--conf_param``, which the message then suggests for a
    word that looks like one.
    """
    stray = argv[1:]
    if not stray:
        return None
    message = f"unexpected argument '{stray[0]}'"
    if len(stray) > 1:
        message += f" (and {len(stray) - 1} more)"
    if takes_bindings and "=" in stray[0] and not stray[0].startswith("-"):
        return message + f": a gin binding goes through --conf_param='{stray[0]}'"
    return message + ": every option is a --flag (see --help)"
