"""LeanStep steps fused Adam/AdamW exactly as torch's own step does, and a found_inf
step changes nothing: parameters, moments or step counts."""

from __future__ import annotations

import copy

import pytest
import torch

from alf.algorithms.optimizer_step import LeanStep, clip_coefficient, non_finite


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def _loss(model: torch.nn.Module, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(16, 4, generator=g)
    return (model(x) - 1.0).pow(2).mean()


def _state(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [t.clone() for s in optimizer.state.values() for t in s.values()]


@pytest.mark.parametrize("ctor", [torch.optim.Adam, torch.optim.AdamW])
def test_lean_step_matches_torch_step_across_a_checkpoint_load(ctor):
    reference, lean_model = _model(), _model()
    ref_opt = ctor(reference.parameters(), lr=1e-2, weight_decay=0.01, fused=True)
    lean_opt = ctor(lean_model.parameters(), lr=1e-2, weight_decay=0.01, fused=True)
    lean = LeanStep(optimizer=lean_opt)
    for step in range(6):
        for model, opt in ((reference, ref_opt), (lean_model, lean_opt)):
            opt.param_groups[0]["lr"] = 1e-2 / (step + 1)  # as a schedule does
            for p in model.parameters():
                p.grad = None
            _loss(model, step).backward()
        ref_opt.step()
        lean.step(torch.zeros(()))
        if step == 2:  # a resume replaces the state tensors and the group
            lean_opt.load_state_dict(copy.deepcopy(lean_opt.state_dict()))
    for a, b in zip(reference.parameters(), lean_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(_state(ref_opt), _state(lean_opt), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_found_inf_step_changes_nothing():
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
    lean = LeanStep(optimizer=optimizer)
    for step in range(2):
        _loss(model, step).backward()
        lean.step(torch.zeros(()))
    params = [p.detach().clone() for p in model.parameters()]
    state = _state(optimizer)
    for p in model.parameters():
        p.grad = torch.full_like(p, float("nan"))
    lean.step(torch.ones(()))
    for a, b in zip(params, model.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(state, _state(optimizer), strict=True):
        assert torch.equal(a, b)


def test_only_fused_adam_is_supported():
    params = list(_model().parameters())
    assert LeanStep.supports(torch.optim.Adam(params, fused=True))
    assert not LeanStep.supports(torch.optim.Adam(params))
    assert not LeanStep.supports(torch.optim.Adam(params, fused=True, amsgrad=True))
    assert not LeanStep.supports(torch.optim.SGD(params, lr=0.1))
    groups = [{"params": params[:2]}, {"params": params[2:], "amsgrad": True}]
    assert not LeanStep.supports(torch.optim.Adam(groups, fused=True))


def test_lean_step_matches_torch_step_with_a_learning_rate_per_group():
    reference, lean_model = _model(), _model()

    def groups(model: torch.nn.Module) -> list[dict]:
        params = list(model.parameters())
        return [{"params": params[:2]}, {"params": params[2:], "lr": 1e-3}]

    ref_opt = torch.optim.Adam(groups(reference), lr=1e-2, fused=True)
    lean_opt = torch.optim.Adam(groups(lean_model), lr=1e-2, fused=True)
    lean = LeanStep(optimizer=lean_opt)
    for step in range(4):
        for model in (reference, lean_model):
            for p in model.parameters():
                p.grad = None
            _loss(model, step).backward()
        ref_opt.step()
        lean.step(torch.zeros(()))
    for a, b in zip(reference.parameters(), lean_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_non_finite_and_clip_coefficient_stay_tensors():
    assert float(non_finite(torch.tensor(1.0), torch.tensor(2.0))) == 0.0
    assert float(non_finite(torch.tensor(float("inf")), torch.tensor(2.0))) == 1.0
    assert float(non_finite(torch.tensor(1.0), torch.tensor(float("nan")))) == 1.0
    assert float(clip_coefficient(torch.tensor(0.1), 0.5)) == 1.0
    assert float(clip_coefficient(torch.tensor(2.0), 0.5)) == pytest.approx(0.25, rel=1e-5)
