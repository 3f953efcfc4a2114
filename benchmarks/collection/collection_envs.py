"""Section 1 of ``collection.py``: raw environment steps/s.

``CartPole-v1`` with :data:`~collection_common.RAW_NUM_ENVS` environments and a constant
action, per backend (:data:`ENV_BACKENDS`): EnvPool stepped directly with numpy actions
(default thread count and ``num_threads=1``), Gymnasium's sync vector env, and ALF's
``create_environment`` backends. :func:`worker_env` measures one backend; it runs in a
fresh subprocess started as ``collection.py --worker env --backend KEY ...``.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.collection.collection_common import CARTPOLE, quiet_warnings, rate_loop
from benchmarks.common import package_version

# Rows of section 1: (backend key, label).
ENV_BACKENDS: tuple[tuple[str, str], ...] = (
    ("raw_envpool", "EnvPool raw (numpy), default num_threads"),
    ("raw_envpool_1thread", "EnvPool raw (numpy), num_threads=1"),
    ("raw_gym_sync", "Gymnasium make_vec sync raw (numpy)"),
    ("alf_envpool", "ALF create_environment envpool"),
    ("alf_envpool_1thread", "ALF create_environment envpool, num_threads=1"),
    ("alf_sync", "ALF create_environment sync"),
    ("alf_subprocess", "ALF create_environment subprocess"),
)


def worker_env(args: argparse.Namespace) -> dict[str, Any]:
    """Section 1: raw steps/s of one backend with a constant action."""
    quiet_warnings()
    n = args.num_envs
    backend = args.backend
    result: dict[str, Any] = {"backend": backend, "num_envs": n}
    if backend.startswith("raw_envpool"):
        import envpool
        import numpy as np

        kwargs = {"num_threads": 1} if backend.endswith("1thread") else {}
        env = envpool.make(CARTPOLE, env_type="gymnasium", num_envs=n, **kwargs)
        env.reset()
        action = np.zeros(n, dtype=np.int32)
        result.update(rate_loop(lambda: env.step(action), n, args.seconds, args.warmup_s))
        env.close()
        result["versions"] = {"envpool": package_version("envpool")}
        return result
    if backend == "raw_gym_sync":
        import gymnasium as gym
        import numpy as np

        env = gym.make_vec(CARTPOLE, n, vectorization_mode="sync")
        env.reset(seed=0)
        action = np.zeros(n, dtype=np.int64)
        result.update(rate_loop(lambda: env.step(action), n, args.seconds, args.warmup_s))
        env.close()
        return result

    import torch

    torch.set_num_threads(1)
    from alf.environments import create_environment

    kwargs: dict[str, Any] = {}
    mode = backend.removeprefix("alf_")
    if mode == "envpool_1thread":
        mode, kwargs = "envpool", {"env_kwargs": {"num_threads": 1}}
    if mode == "subprocess":
        try:
            import alf.environments.subprocess_environment  # noqa: F401
        except Exception as err:  # noqa: BLE001 - reported as a skipped row
            return {**result, "skipped": f"alf.environments.subprocess_environment does "
                                         f"not import: {type(err).__name__}: {err}"}
    env = create_environment(CARTPOLE, n, seed=0, vectorization_mode=mode, **kwargs)
    try:
        env.reset()
        action = torch.zeros(n, dtype=env.action_spec().dtype)
        result.update(rate_loop(lambda: env.step(action), n, args.seconds, args.warmup_s))
        if mode == "subprocess":
            result["num_workers"] = getattr(env, "num_workers", None)
    finally:
        env.close()
    result["torch_num_threads"] = torch.get_num_threads()
    return result
