"""``alf.utils.distributed`` and the data-parallel pieces of the algorithm, run in two real
gloo processes; device resolution; per-rank environments; mixed precision."""

from __future__ import annotations

import functools
import os
import pickle
import traceback

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
import torch.nn as nn
from helpers_cli import free_port

from alf.algorithms import PPOAlgorithm
from alf.algorithms.algorithm import Algorithm
from alf.algorithms.policy import Policy
from alf.data_structures import LossInfo, StepType
from alf.data_transformers import RunningMeanStd
from alf.environments import create_environment
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.unrollers.sync_unroller import SyncUnroller
from alf.utils.distributed import (
    DataParallelLoss,
    DistributedContext,
    DistributedError,
    init_distributed,
    is_communication_error,
    parameter_digest,
    resolve_device,
    shutdown_distributed,
)

WORLD_SIZE = 2
LR = 0.1


class _Regression(Algorithm):
    """A linear model trained with SGD on a squared error."""

    def __init__(self) -> None:
        super().__init__(optimizer_ctor=functools.partial(torch.optim.SGD), learning_rate=LR)
        torch.manual_seed(0)
        self.net = nn.Linear(3, 1)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> LossInfo:
        return LossInfo(loss=((self.net(x).squeeze(-1) - y) ** 2).mean())


def _data(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(16, 3, generator=g), torch.randn(16, generator=g)


def _rank_main(rank: int, port: int, results: mp.Queue) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2"
    )
    try:
        context = init_distributed(device=torch.device("cpu"), timeout_s=30)
        out = _rank_checks(rank, context)
        shutdown_distributed(context, finished=True)
    except BaseException:  # reported to the test
        out = {"error": traceback.format_exc()}
    # Plain pickling: tensors by value, not as shared memory of a process about to end.
    results.put((rank, pickle.dumps(out)))


def _rank_checks(rank: int, context: DistributedContext) -> dict:
    out: dict = {"rank": context.rank, "world_size": context.world_size}
    algorithm = _Regression()
    if rank == 1:  # rank 0's initial parameters must win
        with torch.no_grad():
            algorithm.net.weight.add_(1.0)
    context.broadcast_module(algorithm)
    data_parallel = DataParallelLoss(parameters=algorithm.optimized_parameters, context=context)
    algorithm.configure_training(data_parallel=data_parallel)
    out["initial"] = parameter_digest(algorithm)

    # 1. One update averages the ranks' gradients.
    x, y = _data(rank)
    result = algorithm.update_with_gradient(algorithm.compute_loss(algorithm.loss, x, y))
    out["update"] = float(result["skipped"]) == 0.0
    out["after_update"] = {k: v.clone() for k, v in algorithm.state_dict().items()}

    # 2. A non-finite loss on rank 1 only: every rank skips that update.
    if rank == 1:
        x = x.clone()
        x[0, 0] = float("nan")
    result = algorithm.update_with_gradient(algorithm.compute_loss(algorithm.loss, x, y))
    out["nan_skipped"] = float(result["skipped"]) == 1.0
    out["after_nan"] = parameter_digest(algorithm)
    out["unchanged_by_nan"] = all(
        torch.equal(v, out["after_update"][k]) for k, v in algorithm.state_dict().items()
    )

    # 3. Running statistics combine both ranks' batches (rank 1's may be empty).
    stats = RunningMeanStd(shape=(2,))
    stats.sum_over_ranks = lambda t: context.sum_tensor(t, what="test statistics")
    g = torch.Generator().manual_seed(7 + rank)
    stats.update(torch.randn(5 + 3 * rank, 2, generator=g) * (rank + 1))
    stats.update(torch.randn(4, 2, generator=g) if rank == 0 else torch.zeros(0, 2))
    out["stats"] = (stats.mean.clone(), stats.var.clone(), float(stats.count))

    # 4. Control collectives.
    out["sum"] = context.all_reduce_sum([rank, 1.0], what="test")
    out["gathered"] = context.all_gather([rank * 10.0], what="test")
    out["broadcast"] = context.broadcast_object({"from": rank}, what="test")

    # 5. Diverged parameters are detected at the check.
    if rank == 1:
        with torch.no_grad():
            algorithm.net.bias.add_(1e-3)
    try:
        context.check_identical(algorithm, what="the test check")
        out["divergence"] = None
    except DistributedError as err:
        out["divergence"] = str(err)

    # 6. A backward that bypassed compute_loss is refused instead of silently diverging.
    try:
        algorithm.update_with_gradient(algorithm.loss(x, y))
        out["bypass"] = None
    except RuntimeError as err:
        out["bypass"] = str(err)

    # 7. PPO ranks whose trajectories hold different numbers of LAST steps (rank 1:
    # nothing but LAST steps) still make the same updates.
    out["ppo"] = {}
    for recurrent in (False, True):
        ppo, exp = _ppo_and_trajectory(recurrent=recurrent, only_last_steps=rank == 1)
        context.broadcast_module(ppo)
        ppo.configure_training(
            data_parallel=DataParallelLoss(parameters=ppo.optimized_parameters, context=context)
        )
        stats = ppo.train_from_unroll(exp)
        out["ppo"][recurrent] = (parameter_digest(ppo), float(stats["skipped"]))

    # 8. A released loss (its run closed) refuses to compute instead of training alone.
    data_parallel.release()
    try:
        algorithm.compute_loss(algorithm.loss, x, y)
        out["released"] = None
    except RuntimeError as err:
        out["released"] = str(err)
    return out


def _ppo_and_trajectory(*, recurrent: bool, only_last_steps: bool) -> tuple:
    """A small PPO (2 mini-batches of 8 steps per epoch, per rank) and a 4-env, 4-step
    trajectory of CartPole, optionally with every step made LAST."""
    env = create_environment("CartPole-v1", 4, seed=0)
    kwargs = {"lstm_hidden_size": 8} if recurrent else {}
    torch.manual_seed(0)
    ppo = PPOAlgorithm(
        observation_spec=env.observation_spec(),
        action_spec=env.action_spec(),
        actor_network_ctor=functools.partial(
            ActorDistributionNetwork, fc_layer_params=(8,), **kwargs
        ),
        value_network_ctor=functools.partial(ValueNetwork, fc_layer_params=(8,), **kwargs),
        num_epochs=2,
        mini_batch_size=8,
        mini_batch_length=2 if recurrent else None,
    )
    exp = SyncUnroller(env=env, policy=Policy(algorithm=ppo), unroll_length=4).unroll()
    env.close()
    if only_last_steps:
        exp = exp._replace(step_type=torch.full_like(exp.step_type, int(StepType.LAST)))
    return ppo, exp


@pytest.fixture(scope="module")
def rank_results() -> dict[int, dict]:
    port = free_port()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, port, results)) for r in range(WORLD_SIZE)]
    for p in procs:
        p.start()
    out = {}
    for _ in procs:
        rank, payload = results.get(timeout=120)
        out[rank] = pickle.loads(payload)
    for p in procs:
        p.join(timeout=30)
    for rank, result in out.items():
        assert "error" not in result, f"rank {rank}:\n{result['error']}"
    return out


def test_ranks_know_their_place(rank_results):
    assert [rank_results[r]["rank"] for r in (0, 1)] == [0, 1]
    assert rank_results[1]["world_size"] == 2


def test_rank_0_parameters_are_broadcast(rank_results):
    assert rank_results[0]["initial"] == rank_results[1]["initial"]


def test_update_applies_the_mean_of_the_ranks_gradients(rank_results):
    # The same SGD step taken by hand on the mean of both ranks' losses.
    reference = _Regression()
    loss = sum(reference.loss(*_data(r)).loss for r in range(WORLD_SIZE)) / WORLD_SIZE
    loss.backward()
    with torch.no_grad():
        for p in reference.parameters():
            p -= LR * p.grad
    for rank in (0, 1):
        assert rank_results[rank]["update"]
        for name, value in reference.state_dict().items():
            torch.testing.assert_close(rank_results[rank]["after_update"][name], value)
    a, b = rank_results[0]["after_update"], rank_results[1]["after_update"]
    assert all(torch.equal(a[k], b[k]) for k in a)  # bit for bit


def test_a_non_finite_loss_on_one_rank_skips_the_update_on_all(rank_results):
    for rank in (0, 1):
        assert rank_results[rank]["nan_skipped"], rank
        assert rank_results[rank]["unchanged_by_nan"], rank
    assert rank_results[0]["after_nan"] == rank_results[1]["after_nan"]


def test_running_statistics_combine_the_ranks_batches(rank_results):
    parts = []
    for rank in (0, 1):
        g = torch.Generator().manual_seed(7 + rank)
        parts.append(torch.randn(5 + 3 * rank, 2, generator=g) * (rank + 1))
        if rank == 0:
            parts.append(torch.randn(4, 2, generator=g))
    data = torch.cat(parts).double()
    for rank in (0, 1):
        mean, var, count = rank_results[rank]["stats"]
        assert count == len(data)
        torch.testing.assert_close(mean, data.mean(0))
        torch.testing.assert_close(var, data.var(0, unbiased=False))
    assert torch.equal(rank_results[0]["stats"][0], rank_results[1]["stats"][0])


def test_control_collectives(rank_results):
    for rank in (0, 1):
        assert rank_results[rank]["sum"] == [1.0, 2.0]
        assert rank_results[rank]["gathered"] == [[0.0], [10.0]]
        assert rank_results[rank]["broadcast"] == {"from": 0}


def test_diverged_parameters_are_reported(rank_results):
    for rank in (0, 1):
        message = rank_results[rank]["divergence"]
        assert message and "diverged" in message and "compute_loss" in message


def test_a_released_data_parallel_loss_is_refused(rank_results):
    for rank in (0, 1):
        message = rank_results[rank]["released"]
        assert message and "release()" in message


def test_a_backward_outside_compute_loss_is_refused(rank_results):
    for rank in (0, 1):
        message = rank_results[rank]["bypass"]
        assert message and "compute_loss" in message


@pytest.mark.parametrize("recurrent", [False, True])
def test_ranks_with_different_numbers_of_valid_steps_make_the_same_updates(rank_results, recurrent):
    # Without the shared plan, rank 1 would make no update and rank 0 would wait for it
    # in the gradient all-reduce until the timeout.
    digest0, skipped0 = rank_results[0]["ppo"][recurrent]
    digest1, skipped1 = rank_results[1]["ppo"][recurrent]
    assert digest0 == digest1
    assert skipped0 == skipped1 == 0.0


# ---------------------------------------------------------- single process
def test_not_distributed_without_torchrun_variables(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert init_distributed(device=torch.device("cpu"), timeout_s=1) is None
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert init_distributed(device=torch.device("cpu"), timeout_s=1) is None


def test_world_size_without_rendezvous_variables_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="torchrun"):
        init_distributed(device=torch.device("cpu"), timeout_s=1)


def test_share_divides_run_totals():
    context = DistributedContext(rank=1, world_size=4, local_rank=1, backend="gloo")
    assert context.share(16, "x") == 4
    with pytest.raises(ValueError, match="mini_batch_size=10 .* divisible by the 4 ranks"):
        context.share(10, "mini_batch_size")


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="not a device"):
        resolve_device("gpu0")
    with pytest.raises(ValueError, match="only 'cpu', 'cuda'"):
        resolve_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            resolve_device("cuda")
    else:
        assert resolve_device("cuda", local_rank=0, world_size=2) == torch.device("cuda", 0)
        with pytest.raises(ValueError, match="use 'cuda'"):
            resolve_device("cuda:0", world_size=2)


def test_communication_errors_are_recognised():
    assert is_communication_error(RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error"))
    assert is_communication_error(RuntimeError("Connection reset by peer"))
    assert not is_communication_error(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


def test_each_rank_builds_its_share_of_the_run_environments():
    whole = create_environment("CartPole-v1", 4, seed=3)
    reference = whole.reset().observation
    whole.close()
    for rank in (0, 1):
        env = create_environment("CartPole-v1", 4, seed=3, num_ranks=2, rank=rank)
        assert env.batch_size == 2
        torch.testing.assert_close(env.reset().observation, reference[2 * rank : 2 * rank + 2])
        env.close()
    with pytest.raises(ValueError, match="divisible by the 3 ranks"):
        create_environment("CartPole-v1", 4, num_ranks=3)


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_mixed_precision_updates_on_cpu(precision):
    algorithm = _Regression()
    algorithm.configure_training(mixed_precision=precision)
    x, y = _data(0)
    autocast_dtypes = []

    def loss_fn(x: torch.Tensor, y: torch.Tensor) -> LossInfo:
        autocast_dtypes.append(algorithm.net(x).dtype)
        return algorithm.loss(x, y)

    before = parameter_digest(algorithm)
    result = algorithm.update_with_gradient(algorithm.compute_loss(loss_fn, x, y))
    assert autocast_dtypes == [getattr(torch, precision)]
    assert "grad_norm" in result and parameter_digest(algorithm) != before
    assert algorithm.net.weight.dtype == torch.float32  # master weights stay float32


def test_float16_overflow_skips_the_update_and_lowers_the_loss_scale():
    algorithm = _Regression()
    algorithm.configure_training(mixed_precision="float16")
    scale = algorithm._grad_scaler.get_scale()
    x, y = _data(0)
    before = parameter_digest(algorithm)
    # A finite loss whose scaled gradient overflows float16 (65504).
    loss = algorithm.compute_loss(algorithm.loss, x * 10, y + 1e3)
    assert torch.isfinite(loss.loss)
    result = algorithm.update_with_gradient(loss)
    assert float(result["skipped"]) == 1.0
    assert parameter_digest(algorithm) == before
    assert algorithm._grad_scaler.get_scale() < scale
    result = algorithm.update_with_gradient(algorithm.compute_loss(algorithm.loss, x, y))
    assert float(result["skipped"]) == 0.0


def test_mixed_precision_name_is_checked():
    with pytest.raises(ValueError, match="mixed_precision"):
        _Regression().configure_training(mixed_precision="fp8")


def test_parameter_digest_sees_every_bit():
    algorithm = _Regression()
    algorithm.log_alpha = nn.Parameter(torch.tensor(0.5))  # a 0-d parameter, as SAC's
    algorithm.register_buffer("count", torch.tensor(3, dtype=torch.int64))
    digest = parameter_digest(algorithm)
    with torch.no_grad():
        algorithm.net.bias.copy_(torch.from_numpy(np.nextafter(algorithm.net.bias.numpy(), 1)))
    assert parameter_digest(algorithm) != digest
    digest = parameter_digest(algorithm)
    with torch.no_grad():
        algorithm.log_alpha.add_(1e-6)
    assert parameter_digest(algorithm) != digest


def test_float16_loss_scale_is_checkpointed():
    algorithm = _Regression()
    algorithm.configure_training(mixed_precision="float16")
    x, y = _data(0)
    algorithm.update_with_gradient(algorithm.compute_loss(algorithm.loss, x * 10, y + 1e3))
    state = algorithm.checkpoint_state()
    assert state["grad_scaler"]["scale"] == 512.0  # lowered once by the overflow
    restored = _Regression()
    restored.load_checkpoint_state(state)  # before configure_training, as the trainer does
    restored.configure_training(mixed_precision="float16")
    assert restored._grad_scaler.get_scale() == 512.0
