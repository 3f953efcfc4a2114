"""Gymnasium-Robotics (the ``[robotics]`` extra): Fetch and Shadow Hand goal tasks.

:func:`import_robotics` imports ``gymnasium_robotics`` (which registers ``FetchReach-v4``,
``FetchPush-v4``, ...) for :func:`alf.environments.suite_gym.resolve_env_id`, and makes it
work with the MuJoCo ALF installs: from MuJoCo 3.17 on, ``mujoco.mjtJoint`` members no
longer compare equal to the numpy integers of ``model.jnt_type``, and
``gymnasium_robotics.utils.mujoco_utils`` (up to 1.4.2 at least) compares them that way to
find a joint's width, so every Fetch environment failed in its constructor. Its module
then sees the joint types as plain integers (nothing else of MuJoCo changes).

Videos render headless like MuJoCo's own tasks: ``alf.bin.play --record_file`` picks
``MUJOCO_GL=egl`` or ``osmesa``.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

import numpy as np

__all__ = ["ROBOTICS_PREFIXES", "import_robotics", "is_robotics_id"]

ROBOTICS_PREFIXES = ("Fetch", "HandReach", "HandManipulate")
"""Ids of these prefixes are Gymnasium-Robotics' (registered on first use)."""


def is_robotics_id(env_id: str) -> bool:
    """Whether ``env_id`` names a Gymnasium-Robotics goal task (Fetch, Shadow Hand)."""
    return env_id.startswith(ROBOTICS_PREFIXES)


class _IntJointTypes:
    """``mujoco`` as ``mujoco_utils`` sees it: everything as is, but ``mjtJoint`` holds
    plain integers that compare equal to ``model.jnt_type`` entries."""

    def __init__(self, mujoco: Any) -> None:
        self._mujoco = mujoco
        self.mjtJoint = types.SimpleNamespace(
            **{name: int(value) for name, value in mujoco.mjtJoint.__members__.items()}
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mujoco, name)


def _fix_joint_types() -> None:
    """Gives ``gymnasium_robotics.utils.mujoco_utils`` integer joint types where MuJoCo's
    enum no longer equals numpy integers (MuJoCo >= 3.17); idempotent."""
    utils = importlib.import_module("gymnasium_robotics.utils.mujoco_utils")
    mujoco = utils.mujoco
    if isinstance(mujoco, _IntJointTypes):
        return
    hinge = mujoco.mjtJoint.mjJNT_HINGE
    if hinge == np.int32(int(hinge)):
        return  # an older MuJoCo: nothing to fix
    utils.mujoco = _IntJointTypes(mujoco)


def import_robotics() -> Any:
    """Imports ``gymnasium_robotics`` (registering its ids) and fixes its joint types.

    Returns:
        The ``gymnasium_robotics`` module.

    Raises:
        ImportError: the ``[robotics]`` extra is not installed.
    """
    module = importlib.import_module("gymnasium_robotics")
    _fix_joint_types()
    return module
