"""Recurrence works: PPO with LSTM networks learns CartPole with the velocities hidden
from the observation, where the same budget with MLP networks stays far below."""

from __future__ import annotations

import pytest
from helpers_cli import eval_records, read_progress, run_many, train_cmd
from helpers_learning import EXAMPLES, TIMEOUT_S, check_reached

CONF = EXAMPLES / "ppo_lstm_cart_pole_masked.gin"
BUDGET = 60_000  # the config's num_env_steps
TARGET = 400.0
MLP_CEILING = 150.0


@pytest.mark.slow
def test_lstm_ppo_learns_masked_cart_pole_where_an_mlp_cannot(tmp_path):
    common = ("TrainerConfig.torch_num_threads=1", f"TrainerConfig.num_env_steps={BUDGET}")
    cmds = {
        seed: train_cmd(
            tmp_path / f"lstm_{seed}",
            *common,
            f"TrainerConfig.random_seed={seed}",
            f"TrainerConfig.stop_at_eval_return={TARGET}",
            conf=CONF,
        )
        for seed in (0, 1)
    }
    cmds["mlp"] = train_cmd(
        tmp_path / "mlp",
        *common,
        "ActorDistributionNetwork.lstm_hidden_size=None",
        "ValueNetwork.lstm_hidden_size=None",
        conf=CONF,
    )
    procs = run_many(cmds, max_workers=len(cmds), timeout=TIMEOUT_S)
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
    runs = {seed: eval_records(read_progress(tmp_path / f"lstm_{seed}")) for seed in (0, 1)}
    check_reached("LSTM PPO, masked CartPole", runs, TARGET, BUDGET)

    mlp = eval_records(read_progress(tmp_path / "mlp"))
    assert mlp[-1]["env_steps"] >= BUDGET  # the MLP run used the whole budget
    best = max(e["eval/average_return"] for e in mlp)
    print(f"MLP PPO, masked CartPole: best evaluation {best} in {BUDGET} env steps")
    assert best < MLP_CEILING, f"the MLP policy reached {best} without memory"
