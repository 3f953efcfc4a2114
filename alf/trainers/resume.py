"""Reading a run's checkpoint to resume it, and the random-number states each rank saves
and restores."""

from __future__ import annotations

import os
from typing import Any

import torch
from absl import logging

from alf import config as alf_config
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.run_dir import layout
from alf.run_dir.checkpoints import (
    REQUIRED_KEYS,
    Checkpointer,
    CheckpointError,
    RunCheckpoint,
    restore_algorithm,
)
from alf.trainers.data_parallel import RANK_SEED_STRIDE
from alf.trainers.trainer_config import RESUMABLE_SETTINGS
from alf.utils.device import to_device
from alf.utils.distributed import DistributedContext

__all__ = [
    "check_resumed_config",
    "gather_rng_states",
    "make_checkpoint",
    "mutable_bindings",
    "read_resume_checkpoint",
    "restore_rng_states",
    "restore_run",
]


def read_resume_checkpoint(
    checkpointer: Checkpointer, distributed: DistributedContext | None
) -> RunCheckpoint | None:
    """The newest checkpoint (None for a fresh run). In a data-parallel run rank 0 reads
    it and sends it to the others (a collective); a bad checkpoint is the same
    :class:`CheckpointError` on every rank."""
    reply: tuple[str, Any] = ("none", None)
    if distributed is None or distributed.is_main:
        step = checkpointer.latest_step()
        try:
            if step is not None:
                state = checkpointer.load(step, REQUIRED_KEYS)
                reply = ("ok", RunCheckpoint.from_state(state, checkpointer.path(step)))
        except CheckpointError as err:
            reply = ("error", str(err))
    if distributed is not None:
        reply = distributed.broadcast_object(reply, what="reading the checkpoint")
    if reply[0] == "error":
        raise CheckpointError(reply[1])
    return reply[1]


def mutable_bindings(root_dir: str) -> tuple[str, ...]:
    """The bindings the owner of the run in ``root_dir`` may change between resumptions,
    as its :data:`~alf.config.MUTABLE_BINDINGS_FILE` names them (a member of an
    ``alf.bin.pbt`` population); none without the file, or with one not in its format."""
    data = layout.read_json(os.path.join(root_dir, alf_config.MUTABLE_BINDINGS_FILE)) or {}
    names = data.get("bindings")
    if not isinstance(names, list):
        return ()
    return tuple(name for name in names if isinstance(name, str))


def check_resumed_config(checkpoint: RunCheckpoint, root_dir: str) -> None:
    """Raises :class:`CheckpointError` listing the bindings in which the current config
    differs from the checkpoint's, beyond :data:`RESUMABLE_SETTINGS` and the run's
    :func:`mutable_bindings`."""
    if checkpoint.bindings is None:
        return
    differences = alf_config.diff_bindings(
        checkpoint.bindings,
        alf_config.current_bindings(),
        RESUMABLE_SETTINGS,
        allowed=mutable_bindings(root_dir),
    )
    if differences:
        raise CheckpointError(
            f"root_dir '{root_dir}' holds a run whose config differs from this one "
            f"(newest checkpoint '{checkpoint.path}'):\n  " + "\n  ".join(differences) + "\nUse "
            "another --root_dir, or resume with the original config (add "
            "--conf_param=TrainerConfig.allow_config_change=True to accept the change)."
        )


def gather_rng_states(
    device: torch.device, distributed: DistributedContext | None, *, what: str
) -> dict[str, Any]:
    """The checkpoint entries of the torch random states: this process's CPU (and CUDA)
    state, and in a data-parallel run every rank's (a collective)."""
    cuda_rng = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    entries: dict[str, Any] = {"torch_rng": torch.get_rng_state()}
    if cuda_rng is not None:
        entries["cuda_rng"] = cuda_rng
    if distributed is not None:
        per_rank = distributed.all_gather_object((entries["torch_rng"], cuda_rng), what=what)
        entries["world_size"] = distributed.world_size
        entries["torch_rng_per_rank"] = [cpu for cpu, _ in per_rank]
        if cuda_rng is not None:
            entries["cuda_rng_per_rank"] = [cuda for _, cuda in per_rank]
    return entries


def restore_rng_states(
    checkpoint: RunCheckpoint,
    *,
    device: torch.device,
    distributed: DistributedContext | None,
    random_seed: int,
) -> None:
    """Restores this rank's random states of :func:`gather_rng_states`; a rank the
    checkpoint's run did not have is seeded afresh."""
    state = checkpoint.rng
    rank = 0 if distributed is None else distributed.rank
    world_size = 1 if distributed is None else distributed.world_size
    per_rank = state.get("torch_rng_per_rank")
    cuda_per_rank = state.get("cuda_rng_per_rank")
    on_cuda = device.type == "cuda"
    if per_rank is not None and len(per_rank) == world_size:
        torch.set_rng_state(per_rank[rank])
        if cuda_per_rank is not None and on_cuda:
            torch.cuda.set_rng_state(cuda_per_rank[rank], device)
    elif rank == 0 and "torch_rng" in state:
        torch.set_rng_state(state["torch_rng"])
        if "cuda_rng" in state and on_cuda:
            torch.cuda.set_rng_state(state["cuda_rng"], device)
    else:
        torch.manual_seed(random_seed + rank * RANK_SEED_STRIDE + checkpoint.env_steps)


def make_checkpoint(
    *,
    algorithm: RLAlgorithm,
    device: torch.device,
    distributed: DistributedContext | None,
    iteration: int,
    env_steps: int,
    train_time_s: float,
    wall_time_s: float,
    policies: dict[str, dict[str, Any]],
) -> RunCheckpoint | None:
    """The checkpoint of a run at ``iteration``: the algorithm's state (on the CPU), its
    data (a replay buffer with ``enable_checkpoint``), the frozen policies' ``policies``
    (name -> parameters), the random states, the config and the counters. None on ranks
    other than 0, which only contribute their random state.

    In a data-parallel run, this is a collective that also checks that every rank holds
    the same parameters (:class:`~alf.utils.distributed.DistributedError` if not).
    """
    what = f"the checkpoint of iteration {iteration}"
    rng_states = gather_rng_states(device, distributed, what=what)
    if distributed is not None:
        distributed.check_identical(algorithm, what=what)
        if not distributed.is_main:
            return None
    return RunCheckpoint(
        iteration=iteration,
        env_steps=env_steps,
        train_time_s=train_time_s,
        wall_time_s=wall_time_s,
        rng=rng_states,
        bindings=alf_config.current_bindings(),
        algorithm=to_device(algorithm.checkpoint_state(), "cpu"),
        # (data-parallel runs refuse a replay-buffer checkpoint: prepare_learning)
        data=algorithm.data_checkpoint_state(),
        policies=policies,
    )


def restore_run(
    checkpoint: RunCheckpoint,
    *,
    algorithm: RLAlgorithm,
    device: torch.device,
    distributed: DistributedContext | None,
    random_seed: int,
) -> None:
    """Restores the algorithm (with its optimizer), this rank's random states and, in
    a single-process run, the saved data (replay buffer) of ``checkpoint`` (the
    algorithm is told when there is none: an off-policy one warns)."""
    restore_algorithm(algorithm, checkpoint)
    restore_rng_states(checkpoint, device=device, distributed=distributed, random_seed=random_seed)
    # (None: nothing saved, or a data-parallel run, whose ranks keep their own data)
    algorithm.load_data_checkpoint_state(checkpoint.data if distributed is None else None)
    logging.info(
        "Resumed from %s (iteration %d, %d env steps)",
        checkpoint.path,
        checkpoint.iteration,
        checkpoint.env_steps,
    )
