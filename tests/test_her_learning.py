"""HER learns where DQN alone cannot: bit flipping with 12 bits (reward -1 until every bit
equals the goal's), DQN with and without hindsight relabelling at the same budget of
6,000 env steps (``alf/examples/dqn_her_bit_flipping.gin``), both trained at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_cli import CONF, read_progress, run_many, train_cmd

BITS_CONF = CONF.parent / "dqn_her_bit_flipping.gin"


@pytest.mark.slow
def test_dqn_with_her_solves_bit_flipping_where_dqn_alone_fails(tmp_path: Path) -> None:
    cmds = {
        "her": train_cmd(tmp_path / "her", conf=BITS_CONF),
        "no_her": train_cmd(tmp_path / "no_her", "ReplayBuffer.hindsight=None", conf=BITS_CONF),
    }
    procs = run_many(cmds, max_workers=2, timeout=600)
    rates = {}
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
        progress = read_progress(tmp_path / name)
        rates[name] = [
            (p["env_steps"], p["eval/success_rate"]) for p in progress if "eval/success_rate" in p
        ]
    print(f"evaluation success rates (env steps, rate): {rates}")
    assert max(rate for _, rate in rates["her"][-2:]) >= 0.9, rates
    assert max(rate for _, rate in rates["no_her"]) <= 0.1, rates
