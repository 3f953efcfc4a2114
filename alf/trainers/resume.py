"""Reading a run's checkpoint to resume it, and the random-number states each rank saves
and restores."""

from __future__ import annotations

from typing import Any

import torch

from alf import config as alf_config
from alf.trainers.checkpointer import Checkpointer, CheckpointError
from alf.trainers.data_parallel import RANK_SEED_STRIDE
from alf.trainers.trainer_config import RESUMABLE_SETTINGS
from alf.utils.distributed import DistributedContext

__all__ = [
    "check_resumed_config",
    "gather_rng_states",
    "read_resume_state",
    "restore_rng_states",
]


def read_resume_state(
    checkpointer: Checkpointer,
    keys: tuple[str, ...],
    distributed: DistributedContext | None,
) -> tuple[str | None, dict[str, Any] | None]:
    """The newest checkpoint's path and contents (None, None for a fresh run). In a
    data-parallel run rank 0 reads it and sends it to the others (a collective); a bad
    checkpoint is the same :class:`CheckpointError` on every rank."""
    reply: tuple[Any, ...] = (None, None)
    if distributed is None or distributed.is_main:
        step = checkpointer.latest_step()
        try:
            if step is not None:
                reply = (checkpointer.path(step), checkpointer.load(step, keys))
        except CheckpointError as err:
            reply = ("error", str(err))
    if distributed is not None:
        reply = distributed.broadcast_object(reply, what="reading the checkpoint")
    if reply[0] == "error":
        raise CheckpointError(reply[1])
    return reply


def check_resumed_config(state: dict[str, Any], path: str, root_dir: str) -> None:
    """Raises :class:`CheckpointError` listing the bindings in which the current config
    differs from the checkpoint's, beyond :data:`RESUMABLE_SETTINGS`."""
    if "bindings" not in state:
        return
    differences = alf_config.diff_bindings(
        dict(state["bindings"]), alf_config.current_bindings(), RESUMABLE_SETTINGS
    )
    if differences:
        raise CheckpointError(
            f"root_dir '{root_dir}' holds a run whose config differs from this one "
            f"(newest checkpoint '{path}'):\n  " + "\n  ".join(differences) + "\nUse "
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
    state: dict[str, Any],
    *,
    device: torch.device,
    distributed: DistributedContext | None,
    random_seed: int,
) -> None:
    """Restores this rank's random states of :func:`gather_rng_states`; a rank the
    checkpoint's run did not have is seeded afresh."""
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
        torch.manual_seed(random_seed + rank * RANK_SEED_STRIDE + int(state["env_steps"]))
