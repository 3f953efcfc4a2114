"""ALF: a config-driven reinforcement-learning framework on PyTorch.

The Python API (:mod:`alf.api`): ``alf.train(conf, root_dir=..., bindings=...)``,
``alf.load(root_dir)`` and the :class:`~alf.api.Run` they return. ``import alf`` is light:
the API imports torch and the rest of ALF on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Run", "__version__", "load", "train"]

_API = ("Run", "load", "train")


def __getattr__(name: str) -> Any:
    if name in _API:
        from alf import api

        return getattr(api, name)
    raise AttributeError(f"module 'alf' has no attribute {name!r}")
