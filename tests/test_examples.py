"""Every config in ``alf/examples`` trains for a few iterations and plays, through the
real command line. A config added later is covered automatically; one whose optional
extra is not installed is skipped with the reason (CI installs every extra, so there
none is)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from helpers_cli import CONF, play_cmd, played_average_return, run_cli, train_cmd

EXAMPLES = sorted(CONF.parent.glob("*.gin"))

# Configs that need an optional extra, by the module it installs.
NEEDS = {
    "half_cheetah": ("mujoco", "mujoco"),
    "common/mujoco_": ("mujoco", "mujoco"),
    "envpool": ("envpool", "envpool"),
    'preset = "atari"': ("ale_py", "atari"),
    "dm_control/": ("shimmy", "dmc"),
}

TINY = (
    "TrainerConfig.num_iterations=3",
    "TrainerConfig.initial_collect_steps=0",
    "TrainerConfig.eval_interval=0",
    "TrainerConfig.num_eval_episodes=1",
    "TrainerConfig.num_eval_environments=1",
    "TrainerConfig.summary_interval=1",
    "TrainerConfig.checkpoint_interval=1000",
    "create_environment.max_episode_steps=50",
)


def _missing_extra(conf: Path) -> str | None:
    text = conf.name + conf.read_text()
    for key, (module, extra) in NEEDS.items():
        if key in text and importlib.util.find_spec(module) is None:
            return f"{conf.name} needs the [{extra}] extra ({module} is not installed)"
    return None


def test_every_example_is_covered():
    assert len(EXAMPLES) >= 23, [p.name for p in EXAMPLES]


@pytest.mark.parametrize("conf", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_trains_and_plays(tmp_path, conf):
    reason = _missing_extra(conf)
    if reason:
        pytest.skip(reason)
    root = tmp_path / conf.stem
    params = TINY
    if "common/mujoco_" in conf.read_text():
        # The MuJoCo configs collect 2048 steps and make 320 updates per iteration;
        # shorter unrolls keep their smoke test as cheap as the others'.
        params = (*TINY, "TrainerConfig.unroll_length=16")
    trained = run_cli(train_cmd(root, *params, conf=conf))
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "Finished at iteration 3" in trained.stdout, trained.stdout[-2000:]
    played = run_cli(play_cmd(root, "--num_episodes=1"))
    played_average_return(played)  # exits 0 and prints its average return
