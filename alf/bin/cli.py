"""What the command-line tools of :mod:`alf.bin` share: one argument parser style
(argparse, ``--flag=value`` or ``--flag value``, ``--help`` exits 0), one error line
``<tool>: error: <message>`` (exit status 2 for what the user can fix), plain log lines,
and the report of an exception raised in the user's own code."""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import re
import sys
import sysconfig
import traceback
from collections.abc import Sequence
from typing import NoReturn

from alf.errors import EXIT_USER_ERROR

__all__ = [
    "ToolParser",
    "add_saved_run_arguments",
    "exit_on_user_code_failure",
    "is_user_file",
    "print_error",
    "print_full_traceback",
    "stray_arguments_error",
    "tool_prog",
    "use_plain_log_lines",
    "user_code_failure",
]


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


_ALF_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple(
    os.path.realpath(path)
    for path in {
        sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")
    }
)


def is_user_file(filename: str) -> bool:
    """Whether a traceback frame's file is the user's own code: not ALF's, not the
    standard library's or an installed package's, not a frozen module."""
    if not filename or filename.startswith("<"):
        return False
    path = os.path.realpath(filename)
    return not any(
        path == root or path.startswith(root + os.sep) for root in (_ALF_DIR, *_LIBRARY_DIRS)
    )


def _unwrap_gin_proxy(err: BaseException) -> BaseException:
    """The exception gin re-raised as a proxy with its configurable's name appended to
    the message (``raise proxy from None``, which drops the proxied exception's chain):
    the proxied exception itself, which keeps its ``__cause__``."""
    for _ in range(100):  # (gin wraps once per configurable the call went through)
        own_getattr = type(err).__dict__.get("__getattr__")
        cells = getattr(own_getattr, "__closure__", None) or ()
        originals = [c.cell_contents for c in cells if isinstance(c.cell_contents, BaseException)]
        if not originals or not isinstance(err, type(originals[0])):
            break
        err = originals[0]
    return err


def _exception_chain(err: BaseException) -> list[BaseException]:
    """``err`` and the exceptions it was raised from or while handling, outermost first
    (through gin's proxies, see :func:`_unwrap_gin_proxy`)."""
    chain: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and current not in chain:
        current = _unwrap_gin_proxy(current)
        chain.append(current)
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None
    return chain


def user_code_failure(err: BaseException, tool: str, while_: str) -> str | None:
    """The report of an exception raised in the user's own code (an algorithm, network
    or environment they wrote), or None if no frame of its chain is theirs.

    The report is a traceback of the user's frames only (ALF's and installed packages'
    hidden), the exception's line, and the tool's error line naming the file and line,
    so a bug in the user's code is found where it is, while ALF's own errors stay one
    line.

    Args:
        err: the exception caught by the tool.
        tool: the tool's name, e.g. ``"alf.bin.train"``.
        while_: what the tool was doing, e.g. ``"while the run was being built"``.
    """
    for cause in reversed(_exception_chain(err)):  # the innermost cause first
        frames = [f for f in traceback.extract_tb(cause.__traceback__) if is_user_file(f.filename)]
        if not frames:
            continue
        lines = [
            "Traceback (most recent call last; frames of ALF and installed packages "
            "hidden, --traceback shows them all):"
        ]
        lines += [line.rstrip("\n") for line in traceback.format_list(frames)]
        message = "\n".join(
            line for line in str(cause).splitlines() if not _GIN_CALL_LINE.match(line)
        )
        lines.append(f"{type(cause).__name__}: {message}" if message else type(cause).__name__)
        last = frames[-1]
        lines.append(
            f"{tool}: error: your code raised {type(cause).__name__} {while_} "
            f"({os.path.basename(last.filename)}, line {last.lineno}); its traceback is above"
        )
        return "\n".join(lines)
    return None


def print_full_traceback(err: BaseException) -> None:
    """Prints ``err``'s whole traceback (chained exceptions included) on stderr, as the
    ``--traceback`` flag of the tools asks."""
    traceback.print_exception(err, file=sys.stderr)
    sys.stderr.flush()


class _PlainFormatter(logging.Formatter):
    """Log lines as plain text: an info line is its message, a warning or error line
    starts with ``warning:`` / ``error:`` (no time, thread id or source location)."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        if record.levelno >= logging.WARNING:
            return f"{record.levelname.lower()}: {text}"
        return text


def use_plain_log_lines() -> None:
    """Routes ALF's log lines (absl logging: the progress lines of training, warnings) to
    stderr as plain text, without absl's ``I1127 16:21:43.131283 140549111925632
    train_report.py:110]`` prefix, at level INFO."""
    from absl import flags as absl_flags
    from absl import logging as absl_logging

    if not absl_flags.FLAGS.is_parsed():
        absl_flags.FLAGS.mark_as_parsed()  # (absl warns about logging before parsing)
    absl_logging.use_absl_handler()
    absl_logging.set_verbosity(absl_logging.INFO)
    absl_logging.get_absl_handler().setFormatter(_PlainFormatter())


def exit_on_user_code_failure(err: BaseException, tool: str, while_: str) -> None:
    """Ends the command with :func:`user_code_failure`'s report (exit status 2) when
    ``err`` was raised in the user's own code; returns otherwise."""
    report = user_code_failure(err, tool, while_)
    if report is not None:
        print(report, file=sys.stderr, flush=True)
        sys.exit(EXIT_USER_ERROR)


def tool_prog(module: str) -> str:
    """How the user started the tool, for its usage line: ``alf-train`` for a console
    script, else ``python -m alf.bin.train``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if name.startswith("alf-"):
        return name
    return f"python -m {module}"


def add_saved_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of a tool that rebuilds a trained run from its ``config.gin`` (``play``,
    ``export``): ``--conf_param`` bindings applied after it and ``--trust_module``."""
    parser.add_argument(
        "--conf_param",
        action="append",
        default=[],
        metavar="BINDING",
        help="a gin binding applied after config.gin (repeatable)",
    )
    parser.add_argument(
        "--trust_module",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module the run's config.gin may import, your own configurables "
        "(repeatable); see docs/security.md",
    )


class ToolParser(argparse.ArgumentParser):
    """The argument parser of an ``alf.bin`` tool: its module docstring as the help
    text, ``prog`` as the user typed it, and one ``<tool>: error: ...`` line (exit
    status 2) for a bad flag or a stray word, with the hint to use ``--conf_param`` for a
    word that looks like a gin binding.

    Args:
        module: the tool's module, e.g. ``"alf.bin.train"`` (named in error lines).
        doc: the module docstring, shown by ``--help``.
        takes_bindings: whether the tool takes gin bindings through ``--conf_param``.
    """

    def __init__(self, *, module: str, doc: str | None, takes_bindings: bool) -> None:
        super().__init__(
            prog=tool_prog(module),
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,
        )
        self.tool = module
        self.takes_bindings = takes_bindings

    def error(self, message: str) -> NoReturn:
        """Prints one error line and exits with status 2 (argparse's hook)."""
        sys.exit(print_error(self.tool, message))

    def parse(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        """Parses ``argv`` (default: the command line); stray words are an error."""
        args, extra = self.parse_known_args(argv)
        flags = [word for word in extra if word.startswith("-")]
        if flags:
            name = flags[0].split("=", 1)[0]
            known = [o for action in self._actions for o in action.option_strings]
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else " (see --help)"
            self.error(f"unknown flag '{name}'{hint}")
        stray = stray_arguments_error(["", *extra], takes_bindings=self.takes_bindings)
        if stray:
            self.error(stray)
        return args
