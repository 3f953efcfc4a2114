"""``TrainerConfig.compile``: compiled updates learn exactly what eager ones do (up to
float rounding), and a data-parallel run refuses them with one line."""

from __future__ import annotations

import copy

import pytest
import torch
from test_algorithms import _experience, _make

from alf.config import ConfigValueError
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
