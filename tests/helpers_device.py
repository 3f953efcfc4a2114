"""The host-tensor recorder of ``test_device_generic.py``: a ``TorchFunctionMode`` that
records every tensor factory called without ``device=`` (and without a tensor argument
whose device it would inherit), and every ``Tensor.numpy()``, made from one of the
:data:`AUDITED` files while it is watching."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from alf import nest

REPO = Path(__file__).resolve().parents[1]
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
TESTS_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

AUDITED = frozenset(
    {
        "alf/algorithms/actor_critic.py",
        "alf/algorithms/ppo.py",
        "alf/algorithms/appo.py",
        "alf/algorithms/sac.py",
        "alf/algorithms/dqn.py",
        "alf/algorithms/ddpg.py",
        "alf/algorithms/td3.py",
        "alf/utils/value_ops.py",
        "alf/utils/distributions.py",
        "alf/utils/numpy_draws.py",
        "alf/utils/target_update.py",
        "alf/tensor_specs.py",
        "alf/data_transformers/base.py",
        "alf/data_transformers/frames.py",
        "alf/data_transformers/normalizers.py",
        "alf/data_transformers/running_stats.py",
    }
)
"""Files whose code must create its tensors on the device of its inputs (with every file
under ``alf/networks/``). Calls from other files (the trainers, unrollers, replay
buffers...) are not recorded here."""

FACTORIES = frozenset(
    {
        "zeros",
        "ones",
        "full",
        "empty",
        "empty_strided",
        "arange",
        "range",
        "linspace",
        "logspace",
        "eye",
        "scalar_tensor",
        "tensor",
        "as_tensor",
        "asarray",
        "rand",
        "randn",
        "randint",
        "randperm",
        "normal",
        "tril_indices",
        "triu_indices",
    }
)
"""``torch`` functions that create a tensor on the default device unless told one."""

ALLOWED: dict[tuple[str, str, str], str] = {
    # (file, function's qualified name, torch function): why it is safe.
    ("alf/utils/distributions.py", "_gumbel_argmax", "numpy"): (
        "numpy path of the Gumbel noise, taken only when the logits are on the CPU "
        "(checked in the same condition)"
    ),
    ("alf/utils/numpy_draws.py", "host_array", "numpy"): (
        "returns None, not an array, for a tensor that is not on the CPU (checked in the "
        "same function): the one way the numpy collection path reads tensors"
    ),
    **{
        ("alf/utils/numpy_draws.py", draw, name): (
            "the numpy draws run only on host arrays (host_array), so their noise is "
            "drawn on the host, from torch's generator as the torch distributions draw it"
        )
        for draw, names in (
            ("draw_categorical", ("rand", "numpy")),
            ("draw_diag_normal", ("randn", "numpy")),
        )
        for name in names
    },
}
"""Recorded calls that are fine on any device. A CPU ``int64`` index tensor would also be
acceptable (PyTorch indexes device tensors with it), but none is needed now: keep new
index tensors on the device too unless a measured reason says otherwise, and list them
here with that reason."""


def _audited(path: str) -> str | None:
    """``path`` relative to the repository if it is audited, else None."""
    try:
        rel = Path(path).resolve().relative_to(REPO).as_posix()
    except ValueError:
        return None
    if rel in AUDITED or rel.startswith("alf/networks/"):
        return rel
    return None


def _call_site() -> tuple[str, int, str] | None:
    """The file, line and function that called torch (skipping torch's own Python
    frames and the tests' own), when that file is audited."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith((TORCH_DIR, TESTS_DIR)):
            rel = _audited(filename)
            if rel is None:
                return None
            return rel, frame.f_lineno, frame.f_code.co_qualname
        frame = frame.f_back
    return None


def _has_tensor(values: Any) -> bool:
    return any(isinstance(x, torch.Tensor) for x in nest.flatten(list(values)))


def _makes_host_tensor(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether the torch call ``name(*args, **kwargs)`` puts its result on the host
    regardless of the device of the code's module and inputs."""
    if name == "numpy":
        return True
    if name not in FACTORIES or kwargs.get("device") is not None:
        return False
    if name in ("tensor", "as_tensor", "asarray"):
        return not (args and isinstance(args[0], torch.Tensor))  # a tensor keeps its device
    if name == "normal":
        return not _has_tensor((*args, *kwargs.values()))
    return True


class HostTensorRecorder(TorchFunctionMode):
    """Records host-tensor creations (see :func:`_makes_host_tensor`) made from an
    audited file while :meth:`watching` is active."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.calls: dict[tuple[str, int, str, str], int] = {}

    def __torch_function__(
        self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if self.depth:
            name = getattr(func, "__name__", "")
            if _makes_host_tensor(name, args, kwargs):
                site = _call_site()
                if site is not None and (site[0], site[2], name) not in ALLOWED:
                    key = (*site, name)
                    self.calls[key] = self.calls.get(key, 0) + 1
        return func(*args, **kwargs)

    def watching(self, fn: Callable) -> Callable:
        """``fn`` with recording on while it runs."""

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1

        return wrapped

    def report(self) -> str:
        return "\n".join(
            f"  {file}:{line} in {function}: torch.{name} without device= ({count}x)"
            for (file, line, function, name), count in sorted(self.calls.items())
        )
