"""Tests of alf.utils.target_update: make_target and TargetUpdater."""

import pytest
import torch
import torch.nn as nn

from alf.utils.target_update import TargetUpdater, make_target


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


class _Net(nn.Module):
    """A linear layer plus a float buffer and an integer counter buffer."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("running", torch.zeros(2))
        self.register_buffer("count", torch.tensor(0, dtype=torch.int64))


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _perturb(module, amount=1.0):
    with torch.no_grad():
        for t in (*module.parameters(), *module.buffers()):
            t.add_(amount if t.is_floating_point() else 1)


def test_make_target_is_a_frozen_deep_copy():
    """The target equals the source, takes no gradient, shares no storage, and keeps
    its values when the source changes; the source still takes gradients."""
    source = _Net()
    target = make_target(source)
    assert all(not p.requires_grad for p in target.parameters())
    assert all(p.requires_grad for p in source.parameters())
    for (name, s), t in zip(source.state_dict().items(), target.state_dict().values(), strict=True):
        assert torch.equal(s, t), name
        assert s.data_ptr() != t.data_ptr(), name
    before = _state(target)
    _perturb(source)
    for k, v in target.state_dict().items():
        assert torch.equal(v, before[k]), k
    out = target.fc(torch.randn(4, 3))
    assert not out.requires_grad


def test_hard_update_every_third_call():
    """tau=1, period=3 copies the source only on calls 3, 6, ... (returning True then)
    and leaves the target untouched on the other calls."""
    source = _Net()
    target = make_target(source)
    updater = TargetUpdater(sources=[source], targets=[target], tau=1.0, period=3)
    results = []
    for call in range(1, 7):
        _perturb(source, 0.5)
        before = _state(target)
        results.append(updater())
        after = _state(target)
        if call % 3:
            assert all(torch.equal(after[k], before[k]) for k in after)
        else:
            assert torch.equal(target.fc.weight, source.fc.weight)
            assert torch.equal(target.fc.bias, source.fc.bias)
            assert torch.equal(target.running, source.running)
    assert results == [False, False, True, False, False, True]


def test_polyak_update_interpolates():
    """tau=0.1, period=1 sets every float tensor to ``0.9 * old + 0.1 * source`` on
    every call."""
    source = _Net()
    target = make_target(source)
    _perturb(target, -2.0)
    updater = TargetUpdater(sources=[source], targets=[target], tau=0.1)
    for _ in range(3):
        _perturb(source, 0.7)
        old, src = _state(target), _state(source)
        assert updater() is True
        for k in ("fc.weight", "fc.bias", "running"):
            expected = 0.9 * old[k] + 0.1 * src[k]
            assert torch.allclose(target.state_dict()[k], expected, atol=1e-6), k


def test_polyak_update_keeps_target_frozen_and_source_unchanged():
    """Updating neither modifies the source nor makes target parameters trainable, and
    records no autograd history."""
    source = _Net()
    target = make_target(source)
    _perturb(source)
    src = _state(source)
    TargetUpdater(sources=[source], targets=[target], tau=0.5)()
    assert all(torch.equal(v, src[k]) for k, v in source.state_dict().items())
    assert all(not p.requires_grad and p.grad_fn is None for p in target.parameters())


@pytest.mark.parametrize("tau", [1.0, 0.3])
def test_integer_buffers_are_left_alone(tau):
    """Integer buffers (e.g. counters) are neither copied nor interpolated."""
    source = _Net()
    target = make_target(source)
    with torch.no_grad():
        source.count.fill_(7)
        target.count.fill_(3)
    updater = TargetUpdater(sources=[source], targets=[target], tau=tau)
    updater()
    assert target.count.item() == 3 and target.count.dtype == torch.int64
    assert source.count.item() == 7


def test_several_networks_are_updated_in_order():
    """Each target follows the source at the same position in the lists."""
    sources = [nn.Linear(2, 2), nn.Linear(2, 2)]
    targets = [make_target(s) for s in sources]
    _perturb(sources[0], 1.0)
    _perturb(sources[1], -1.0)
    TargetUpdater(sources=sources, targets=targets, tau=1.0)()
    for s, t in zip(sources, targets, strict=True):
        assert torch.equal(s.weight, t.weight) and torch.equal(s.bias, t.bias)


@pytest.mark.parametrize(
    "source, target",
    [
        (nn.Linear(3, 4), nn.Linear(4, 3)),
        (nn.Linear(3, 4), nn.Linear(3, 4, bias=False)),
        (nn.Linear(3, 4), nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 4))),
    ],
    ids=["shapes", "fewer-tensors", "more-tensors"],
)
def test_mismatched_networks_raise(source, target):
    """Targets whose float tensors differ in number or shape from their sources are
    rejected."""
    with pytest.raises(ValueError):
        TargetUpdater(sources=[source], targets=[target])


def test_mismatched_network_lists_raise():
    """A missing target network is rejected."""
    nets = [nn.Linear(2, 2), nn.Linear(2, 2)]
    with pytest.raises(ValueError):
        TargetUpdater(sources=nets, targets=[make_target(nets[0])])


@pytest.mark.parametrize("tau", [0.0, -0.1, 1.5, float("nan")])
def test_bad_tau_raises(tau):
    """tau outside (0, 1] is rejected."""
    net = nn.Linear(2, 2)
    with pytest.raises(ValueError):
        TargetUpdater(sources=[net], targets=[make_target(net)], tau=tau)


@pytest.mark.parametrize("period", [0, -3])
def test_bad_period_raises(period):
    """period below 1 is rejected."""
    net = nn.Linear(2, 2)
    with pytest.raises(ValueError):
        TargetUpdater(sources=[net], targets=[make_target(net)], period=period)
