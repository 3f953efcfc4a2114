"""Guarding the calls into an environment: what one raises, returns wrongly, or hangs in.

:class:`GuardedEnv` wraps each environment of the ``"sync"`` backend (and so of a
``"subprocess"`` worker): an exception its ``reset`` or ``step`` raises becomes one
:class:`EnvironmentCallError` line naming the environment (id and run-wide index), the
call, the exception's type and message and the innermost frame of the user's own code
(``environment 0 of 'my_envs:Foo-v0' raised in step() at step 3 of its episode:
ZeroDivisionError: division by zero (my_envs.py:42)``); the original exception is its
``__cause__`` (a ``--traceback`` style option shows it whole). The old gym API's
4-tuple ``step`` names the fix (``suite_gym.load.legacy_api=True``), and a reward that
is not one number (a vector, None, a string) is refused as such.

:class:`CallWatchdog` times the calls of the environments it is given
(``TrainerConfig.env_timeout_s``): one thread checks them; a call that exceeds the
timeout is interrupted in the calling thread with :class:`EnvironmentTimeoutError`
(where the environment runs Python code), and if it has not returned ``grace_s`` later
(a call hung in C code cannot be interrupted), the watchdog gives the failure to its
``on_stuck`` hook (the trainer: checkpoint, ``status.json``, the one line) and ends
the process with exit status 3.
"""

from __future__ import annotations

import ctypes
import os
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from alf.errors import EXIT_TRAINING_ERROR, AlfError, TrainingError

__all__ = [
    "CallTimer",
    "CallWatchdog",
    "EnvironmentCallError",
    "EnvironmentTimeoutError",
    "GuardedEnv",
    "describe_exception",
]


class EnvironmentCallError(TrainingError, RuntimeError):
    """An environment's ``reset`` or ``step`` raised, or returned what ALF cannot take.
    The message is one line naming the environment and the call; the original exception
    (if any) is the ``__cause__``."""


class EnvironmentTimeoutError(EnvironmentCallError):
    """An environment's ``reset`` or ``step`` did not return within the timeout
    (``TrainerConfig.env_timeout_s``)."""


_LEGACY_HINT = "an environment of the old gym API: bind suite_gym.load.legacy_api=True to adapt it"
_SCALAR_TYPES = frozenset({float, int, bool, np.float32, np.float64, np.int32, np.int64})


def _library_dirs() -> tuple[str, ...]:
    """Folders whose frames are not the user's: the standard library, Gymnasium, numpy,
    torch and ALF."""
    dirs = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # alf/
    for module in ("gymnasium", "numpy", "torch"):
        loaded = sys.modules.get(module)
        if loaded is not None and getattr(loaded, "__file__", None):
            dirs.add(os.path.dirname(os.path.abspath(loaded.__file__)))
    return tuple(os.path.join(d, "") for d in dirs if d)


def _user_frame(err: BaseException) -> str | None:
    """``file:line`` of the innermost frame of ``err``'s traceback outside the libraries
    (the innermost frame if all are in them), the file relative to the working directory
    when under it."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return None
    libraries = _library_dirs()
    chosen = frames[-1]
    for frame in reversed(frames):
        if not os.path.abspath(frame.filename).startswith(libraries):
            chosen = frame
            break
    path = os.path.abspath(chosen.filename)
    relative = os.path.relpath(path)
    return f"{path if relative.startswith('..') else relative}:{chosen.lineno}"


def describe_exception(err: BaseException) -> str:
    """``Type: message (file:line)`` of ``err`` on one line, the frame being the user's
    innermost (see :func:`_user_frame`)."""
    message = " ".join(str(err).split())
    text = f"{type(err).__name__}: {message}" if message else type(err).__name__
    where = _user_frame(err)
    return f"{text} ({where})" if where else text


class GuardedEnv(gym.Wrapper):
    """Turns what one environment's ``reset`` and ``step`` raise or wrongly return into
    :class:`EnvironmentCallError` (see the module docstring).

    Args:
        env: the environment.
        env_name: its id as configured, named in errors.
        index: its run-wide index, named in errors.
    """

    def __init__(self, env: gym.Env, *, env_name: str, index: int) -> None:
        super().__init__(env)
        self._env_name = env_name
        self._index = index
        self._t = 0
        self.timer: CallTimer | None = None
        """The timer of the batch, told which environment is being called."""

    def _raised(self, call: str, err: Exception) -> EnvironmentCallError:
        at = f" at step {self._t} of its episode" if call == "step" else ""
        where = f"environment {self._index} of '{self._env_name}' raised in {call}(){at}"
        if isinstance(err, ValueError) and "(expected 5, got 4)" in str(err):
            return EnvironmentCallError(
                f"{where}: {type(err).__name__}: {err}: its step() returns the 4 values "
                f"(obs, reward, done, info) of {_LEGACY_HINT}"
            )
        return EnvironmentCallError(f"{where}: {describe_exception(err)}")

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self._t = 0
        if self.timer is not None:
            self.timer.current = self._index
        try:
            result = self.env.reset(**kwargs)
        except AlfError:
            raise
        except Exception as err:
            raise self._raised("reset", err) from err
        if not (isinstance(result, tuple) and len(result) == 2):
            raise EnvironmentCallError(
                f"environment {self._index} of '{self._env_name}' returned "
                f"{_what(result)} from reset(), not (observation, info): {_LEGACY_HINT}"
            )
        return result

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict]:
        self._t += 1
        if self.timer is not None:
            self.timer.current = self._index
        try:
            result = self.env.step(action)
        except AlfError:
            raise
        except Exception as err:
            raise self._raised("step", err) from err
        if not (isinstance(result, tuple) and len(result) == 5):
            raise EnvironmentCallError(
                f"environment {self._index} of '{self._env_name}' returned {_what(result)} "
                "from step(), not (observation, reward, terminated, truncated, info): "
                f"{_LEGACY_HINT}"
            )
        if result[1].__class__ not in _SCALAR_TYPES:
            self._check_reward(result[1])
        return result

    def _check_reward(self, reward: Any) -> None:
        """Raises unless ``reward`` is one real number."""
        array = None if reward is None or isinstance(reward, str | bytes) else np.asarray(reward)
        if array is not None and array.dtype.kind in "biuf" and array.size == 1:
            return
        if array is not None and array.dtype.kind in "biuf":
            got = f"a reward of shape {array.shape}"
            fix = "; sum or select the components of a vector reward in a wrapper"
        else:
            got, fix = f"the reward {reward!r:.40} (not a number)", ""
        raise EnvironmentCallError(
            f"environment {self._index} of '{self._env_name}' returned {got} from step() at "
            f"step {self._t} of its episode: the reward must be a scalar, one real number "
            f"per step{fix}"
        )


def _what(result: Any) -> str:
    if isinstance(result, tuple):
        return f"a tuple of {len(result)} values"
    return f"a {type(result).__name__}"


class _WatchdogInterrupt(BaseException):
    """Raised in the thread of a call that exceeded its timeout (by the watchdog);
    :meth:`CallTimer.timed` turns it into :class:`EnvironmentTimeoutError`."""


def _interrupt(thread_id: int) -> None:
    """Raises :class:`_WatchdogInterrupt` in thread ``thread_id`` at its next Python
    instruction (never inside C code: a hung C call is not interrupted)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(_WatchdogInterrupt)
    )


class CallTimer:
    """The call in flight of one batch of environments, for a :class:`CallWatchdog`.

    Args:
        describe: what the batch is, e.g. ``"'CartPole-v1' (environments 0..7)"``.
    """

    def __init__(self, describe: str) -> None:
        self.describe = describe
        self.lock = threading.Lock()
        self.call: str | None = None
        self.current: int | None = None
        """The environment being called (as far as known: the ``sync`` backend's)."""
        self.started = 0.0
        self.thread_id = 0
        self.failure: str | None = None

    def timed(self, call: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)``, timed as the batch's ``call`` (``"step"``).

        Raises:
            EnvironmentTimeoutError: the watchdog interrupted it.
        """
        self.thread_id = threading.get_ident()
        self.call, self.current, self.started = call, None, time.monotonic()
        try:
            try:
                return function(*args, **kwargs)
            finally:
                with self.lock:
                    self.call = None
        except _WatchdogInterrupt:
            self.call = None  # (if it arrived before the finally clause cleared it)
            raise EnvironmentTimeoutError(self.failure) from None


class CallWatchdog:
    """One thread that times the calls of the :class:`CallTimer` s given to it.

    Args:
        timeout_s: seconds a call may take.
        setting: the setting that chose ``timeout_s``, named in the error.
        on_stuck: called with the error line (from the watchdog's thread) when a call
            that exceeded the timeout could not be interrupted; the process then exits
            with status 3. None: the line is printed.
        grace_s: seconds an interrupted call has to return.
    """

    def __init__(
        self,
        *,
        timeout_s: float,
        setting: str = "TrainerConfig.env_timeout_s",
        on_stuck: Callable[[str], None] | None = None,
        grace_s: float = 5.0,
    ) -> None:
        self.timeout_s = timeout_s
        self.setting = setting
        self.on_stuck = on_stuck
        self.grace_s = grace_s
        self._timers: list[CallTimer] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, describe: str) -> CallTimer:
        """A timer for a batch of environments described by ``describe``; the watchdog
        starts with the first."""
        timer = CallTimer(describe)
        self._timers.append(timer)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="alf-env-watchdog", daemon=True)
            self._thread.start()
        return timer

    def close(self) -> None:
        """Stops the watchdog's thread."""
        self._stop.set()

    def _run(self) -> None:
        period = min(1.0, self.timeout_s / 4)
        while not self._stop.wait(period):
            now = time.monotonic()
            for timer in list(self._timers):
                with timer.lock:
                    late = timer.call is not None and now - timer.started > self.timeout_s
                    if late:
                        which = "" if timer.current is None else f"environment {timer.current} of "
                        timer.failure = (
                            f"{timer.call}() of {which}{timer.describe} has not returned after "
                            f"{now - timer.started:.0f} s ({self.setting}={self.timeout_s:g}): "
                            "the environment hangs"
                        )
                        _interrupt(timer.thread_id)
                if late:
                    self._wait_or_exit(timer)
                    return

    def _wait_or_exit(self, timer: CallTimer) -> None:
        """Gives the interrupted call ``grace_s`` to return; then ends the process."""
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            if timer.call is None:
                return
            time.sleep(0.05)
        message = timer.failure or "an environment call hangs"
        try:
            if self.on_stuck is not None:
                self.on_stuck(message)
            else:
                print(f"error: {message}", file=sys.stderr, flush=True)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_TRAINING_ERROR)
