"""Tests of alf.trainers.Checkpointer: atomic saves, pruning, temporaries, errors."""

import os

import pytest
import torch

from alf.trainers import Checkpointer, CheckpointError


def _state(step):
    return {
        "iteration": step,
        "weights": {"w": torch.full((2, 3), float(step)), "b": torch.arange(3)},
        "rng": torch.get_rng_state(),
        "names": ["a", "b"],
        "lr": 1e-3,
    }


@pytest.fixture
def ckpt(tmp_path):
    return Checkpointer(directory=str(tmp_path / "checkpoints"), num_to_keep=3)


def test_empty_directory(ckpt):
    assert ckpt.steps() == []
    assert ckpt.latest_step() is None
    ckpt.remove_stale_temporaries()  # no directory yet: nothing to do
    with pytest.raises(CheckpointError, match="No checkpoint"):
        ckpt.load()


def test_save_load_round_trip(ckpt):
    path = ckpt.save(7, _state(7))
    assert path == ckpt.path(7) == os.path.join(ckpt.directory, "ckpt-7.pt")
    assert os.listdir(ckpt.directory) == ["ckpt-7.pt"]  # no temporary left behind
    loaded = ckpt.load(7)
    expected = _state(7)
    assert loaded["iteration"] == 7 and loaded["names"] == ["a", "b"] and loaded["lr"] == 1e-3
    assert torch.equal(loaded["weights"]["w"], expected["weights"]["w"])
    assert torch.equal(loaded["weights"]["b"], expected["weights"]["b"])
    assert torch.equal(loaded["rng"], expected["rng"])
    assert ckpt.load()["iteration"] == 7


def test_round_trip_of_a_module_and_optimizer(ckpt):
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.randn(4, 3)).sum().backward()
    opt.step()
    ckpt.save(1, {"module": net.state_dict(), "optimizer": opt.state_dict()})
    loaded = ckpt.load(1)
    other = torch.nn.Linear(3, 2)
    other.load_state_dict(loaded["module"])
    assert torch.equal(other.weight, net.weight)
    other_opt = torch.optim.SGD(other.parameters(), lr=0.1, momentum=0.9)
    other_opt.load_state_dict(loaded["optimizer"])
    assert torch.equal(
        other_opt.state_dict()["state"][0]["momentum_buffer"],
        opt.state_dict()["state"][0]["momentum_buffer"],
    )


def test_load_defaults_to_newest_and_steps_sort_numerically(ckpt):
    for step in (2, 10, 9):
        ckpt.save(step, _state(step))
    assert ckpt.steps() == [2, 9, 10]
    assert ckpt.latest_step() == 10
    assert ckpt.load()["iteration"] == 10
    assert ckpt.load(2)["iteration"] == 2


def test_pruning_keeps_the_newest(tmp_path):
    ckpt = Checkpointer(directory=str(tmp_path), num_to_keep=2)
    for step in range(1, 6):
        ckpt.save(step, _state(step))
        assert ckpt.steps() == list(range(max(1, step - 1), step + 1))
    assert sorted(os.listdir(tmp_path)) == ["ckpt-4.pt", "ckpt-5.pt"]
    assert ckpt.load(4)["iteration"] == 4


def test_temporaries_are_ignored_and_removed(ckpt):
    ckpt.save(1, _state(1))
    stale = os.path.join(ckpt.directory, "ckpt-9.pt.tmp-12345")
    with open(stale, "wb") as f:
        f.write(b"half a checkpoint")
    other = os.path.join(ckpt.directory, "notes.txt")
    with open(other, "w") as f:
        f.write("keep me")
    assert ckpt.steps() == [1]
    assert ckpt.latest_step() == 1
    ckpt.remove_stale_temporaries()
    assert sorted(os.listdir(ckpt.directory)) == ["ckpt-1.pt", "notes.txt"]


def test_corrupt_checkpoint_raises_and_is_kept(ckpt):
    ckpt.save(1, _state(1))
    corrupt = ckpt.path(2)
    with open(corrupt, "wb") as f:
        f.write(b"\x00not a torch file")
    assert ckpt.latest_step() == 2
    with pytest.raises(CheckpointError) as info:
        ckpt.load()
    assert "ckpt-2.pt" in str(info.value)
    assert os.path.isfile(corrupt)
    with open(corrupt, "rb") as f:
        assert f.read() == b"\x00not a torch file"
    assert ckpt.load(1)["iteration"] == 1


def test_truncated_checkpoint_raises_checkpoint_error(ckpt):
    path = ckpt.save(3, _state(3))
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(CheckpointError):
        ckpt.load(3)
    assert os.path.isfile(path)


class _Custom:
    pass


def test_non_tensor_objects_are_refused_on_load(ckpt):
    ckpt.save(1, {"obj": _Custom()})
    with pytest.raises(CheckpointError):
        ckpt.load(1)  # weights_only=True refuses arbitrary pickled classes


def test_missing_step_lists_available_steps(ckpt):
    ckpt.save(3, _state(3))
    ckpt.save(5, _state(5))
    with pytest.raises(CheckpointError) as info:
        ckpt.load(4)
    message = str(info.value)
    assert "4" in message
    assert "[3, 5]" in message


def test_failed_save_leaves_no_temporary_and_keeps_older(ckpt):
    ckpt.save(1, _state(1))
    with pytest.raises(Exception):  # noqa: B017 - lambdas cannot be pickled
        ckpt.save(2, {"fn": lambda: None})
    assert os.listdir(ckpt.directory) == ["ckpt-1.pt"]
    assert ckpt.load()["iteration"] == 1
