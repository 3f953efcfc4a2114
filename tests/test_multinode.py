"""A multi-node ``torchrun`` rehearsed on one machine: two "nodes" (two ``torchrun``
commands with ``--nnodes=2``, their own ``--node_rank`` and a c10d rendezvous on
127.0.0.1) train CartPole, checkpoint, stop together on Ctrl-C, resume; one node is lost
(its processes killed) and the other's rank exits with status 3 and one error line;
both are started again and finish from the last checkpoint (the commands of
``docs/scaling.md``'s "Several machines")."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers_cli import CONF, checkpoint_steps, cli_env, free_port, wait_for

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)

PARAMS = (
    "TrainerConfig.checkpoint_interval=2",
    "TrainerConfig.eval_interval=0",
    "TrainerConfig.evaluate=False",
    "TrainerConfig.distributed_timeout_s=20",
)


def _node(root: Path, node_rank: int, port: int, log: Path, steps: int) -> subprocess.Popen:
    """One "node": ``torchrun --nnodes=2 --nproc_per_node=1 --node_rank=N``, in a session
    of its own (as on its own machine), its output going to ``log``."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes=2", "--nproc_per_node=1", f"--node_rank={node_rank}",
        "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=rehearsal",
        "-m", "alf.bin.train", f"--root_dir={root}", f"--conf={CONF}",
        *(f"--conf_param={p}" for p in (*PARAMS, f"TrainerConfig.num_env_steps={steps}")),
    ]  # fmt: skip
    with open(log, "a") as out:
        return subprocess.Popen(
            cmd, cwd=root.parent, env=cli_env(), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def _both(root: Path, tmp_path: Path, name: str, steps: int) -> list[subprocess.Popen]:
    """Node 0, then node 1 once node 0 serves the rendezvous (the first ``torchrun`` on
    the endpoint's host serves its store; the one lost later must not be that one)."""
    port = free_port()
    first = _node(root, 0, port, tmp_path / f"{name}-node0.txt", steps)
    wait_for(lambda: _listening(port), 60, first, what="node 0's rendezvous store")
    return [first, _node(root, 1, port, tmp_path / f"{name}-node1.txt", steps)]


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _end(nodes: list[subprocess.Popen]) -> None:
    for node in nodes:
        if node.poll() is None:
            _lose(node)
        node.wait(timeout=30)


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (Linux ``/proc``): torchrun's workers and theirs."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [p for child in map(int, children) for p in (child, *_descendants(child))]


def _lose(node: subprocess.Popen) -> None:
    """Kills every process of a "node" at once (its workers run in their own process
    groups), as when a machine goes down."""
    for pid in (*_descendants(node.pid), node.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _status(root: Path) -> dict:
    return json.loads((root / "status.json").read_text())


@pytest.mark.slow
def test_two_nodes_train_stop_lose_a_node_and_resume(tmp_path):
    root = tmp_path / "run"
    steps = 256 * 400  # more than the test lets it train before the last command
    # 1. Train, then Ctrl-C on both "machines": they stop together with a checkpoint.
    nodes = _both(root, tmp_path, "first", steps)
    try:
        wait_for(lambda: checkpoint_steps(root), 180, nodes[0], what="the first checkpoint")
        for node in nodes:
            os.killpg(node.pid, signal.SIGINT)  # a terminal's Ctrl-C: its process group
        for node in nodes:
            node.wait(timeout=90)
    finally:
        _end(nodes)
    first = (tmp_path / "first-node0.txt").read_text() + (tmp_path / "first-node1.txt").read_text()
    assert "Stopped by signal at iteration" in first, first[-3000:]
    stopped = checkpoint_steps(root)[-1]
    assert _status(root)["state"] in ("stopped", "interrupted")

    # 2. Resume, then lose node 1 (every process of it killed): node 0's rank exits 3.
    nodes = _both(root, tmp_path, "second", steps)
    try:
        wait_for(
            lambda: max(checkpoint_steps(root), default=0) > stopped,
            180,
            nodes[0],
            what="a new checkpoint",
        )
        _lose(nodes[1])
        nodes[0].wait(timeout=90)
    finally:
        _end(nodes)
    survivor = (tmp_path / "second-node0.txt").read_text()
    assert f"Resumed from {root}" in survivor, survivor[-3000:]
    errors = {line for line in survivor.splitlines() if "alf.bin.train: error:" in line}
    assert len(errors) == 1 and "lost contact with the other ranks" in next(iter(errors)), survivor[
        -3000:
    ]
    assert "exitcode  : 3" in survivor, survivor[-3000:]  # torchrun's report of the rank
    lost_at = checkpoint_steps(root)[-1]

    # 3. Both nodes again: the run resumes from the last checkpoint and finishes.
    budget = (lost_at + 4) * 256
    nodes = _both(root, tmp_path, "third", budget)
    try:
        for node in nodes:
            node.wait(timeout=240)
    finally:
        _end(nodes)
    third = (tmp_path / "third-node0.txt").read_text() + (tmp_path / "third-node1.txt").read_text()
    assert [node.returncode for node in nodes] == [0, 0], third[-3000:]
    assert f"(iteration {lost_at}," in third and "Resumed from" in third, third[-3000:]
    assert _status(root)["state"] == "finished" and _status(root)["iteration"] == lost_at + 4
