"""``TrainerConfig.compile``: compiled updates learn exactly what eager ones do (up to
float rounding), and a data-parallel run refuses them with one line."""

from __future__ import annotations

import copy

import pytest
import torch
from test_algorithms import _experience, _make

from alf.algorithms.algorithm import _cuda_graph_safe
from alf.algorithms.appo import AppoAlgorithm
from alf.algorithms.ppo import PPOAlgorithm
from alf.config import ConfigValueError
from alf.data_structures import LossInfo
from alf.trainers.data_parallel import configure_training


@pytest.mark.slow
def test_compiled_updates_match_eager_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    eager = _make(num_epochs=2, mini_batch_size=5, learning_rate=1e-2, max_grad_norm=0.5)
    compiled = copy.deepcopy(eager)
    compiled.configure_training(compile=True)
    exp = _experience(eager)
    torch.manual_seed(1)
    eager_stats = eager.train_from_unroll(exp)
    torch.manual_seed(1)  # the same mini-batch order
    compiled_stats = compiled.train_from_unroll(exp)
    assert compiled._compiled_losses, "no loss function was compiled"
    for a, b in zip(eager.parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled_stats["loss"], eager_stats["loss"], rtol=1e-4, atol=1e-5)
    assert float(compiled_stats["skipped"]) == 0.0
    assert any((tmp_path / "inductor").iterdir()), "nothing was cached on disk"


def test_compile_is_refused_in_a_data_parallel_run():
    class Context:  # configure_training refuses before it uses the context
        world_size = 2

    with pytest.raises(ConfigValueError, match=r"TrainerConfig.compile = True must be False"):
        configure_training(
            _make(), Context(), find_unused_parameters=False, mixed_precision=None, compile=True
        )


@pytest.mark.slow
@pytest.mark.parametrize("cls", [PPOAlgorithm, AppoAlgorithm])
def test_compiled_updates_survive_summary_iterations(cls, tmp_path, monkeypatch):
    # record_statistics flips on summary iterations: the compiled loss recompiles and must
    # rebuild its LossInfo (torch 2.11 failed on one made by NamedTuple._replace).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    algorithm = _make(cls, num_epochs=2, mini_batch_size=5)
    algorithm.configure_training(compile=True)
    exp = _experience(algorithm)
    for record in (False, True, False):
        algorithm.record_statistics = record
        stats = algorithm.train_from_unroll(exp)
        assert ("approx_kl" in stats) == record
        assert torch.isfinite(torch.as_tensor(stats["loss"]))


def test_cuda_graph_safe_losses_return_copies():
    # Under CUDA graphs the next replay overwrites a call's outputs: each call's tensors
    # are copied out, so the statistics kept from earlier mini-batches stay intact.
    buffer = torch.zeros(())

    def graph_like(x: torch.Tensor) -> LossInfo:
        buffer.copy_(x)
        return LossInfo(loss=buffer, extra={"x": buffer})

    safe = _cuda_graph_safe(graph_like)
    first = safe(torch.tensor(1.0))
    second = safe(torch.tensor(2.0))
    assert float(first.loss) == 1.0 and float(first.extra["x"]) == 1.0
    assert float(second.loss) == 2.0
