"""Every config in ``alf/examples`` trains for a few iterations and plays, through the
real command line. A config added later is covered automatically; one whose optional
extra is not installed is skipped with the reason (CI installs every extra, so there
none is)."""

from __future__ import annotations

import importlib.util
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from helpers_cli import CONF, REPO, play_cmd, played_average_return, run_cli, train_cmd

EXAMPLES = sorted(CONF.parent.glob("*.gin"))

# Configs that need an optional extra, by the module it installs.
NEEDS = {
    "half_cheetah": ("mujoco", "mujoco"),
    "common/mujoco_": ("mujoco", "mujoco"),
    "envpool": ("envpool", "envpool"),
    'preset = "atari"': ("ale_py", "atari"),
    'preset = "vizdoom"': ("vizdoom", "vizdoom"),
    "dm_control/": ("shimmy", "dmc"),
    "TrainerConfig.offline_dataset": ("minari", "offline"),
    "MiniGrid-": ("minigrid", "minigrid"),
    "Fetch": ("gymnasium_robotics", "robotics"),
}

# An offline config's dataset (e.g. alf/hopper-medium-v0) is made on demand, never
# committed: its smoke run trains on the committed Pendulum dataset instead, in Pendulum,
# by --conf_param alone (what the configs promise for another environment and dataset).
OFFLINE_DATASET = REPO / "tests" / "data" / "datasets" / "pendulum-sac-v0"
OFFLINE_SMOKE = (
    'create_environment.env_name="Pendulum-v1"',
    f'TrainerConfig.offline_dataset="{OFFLINE_DATASET}"',
)

TINY = (
    "TrainerConfig.num_iterations=3",
    "TrainerConfig.initial_collect_steps=0",
    "TrainerConfig.eval_interval=0",
    "TrainerConfig.num_eval_episodes=1",
    "TrainerConfig.num_eval_environments=1",
    "TrainerConfig.summary_interval=1",
    "TrainerConfig.checkpoint_interval=1000",
    "create_environment.max_episode_steps=50",
    # (two examples run at once: more threads would only contend for the cores)
    "TrainerConfig.torch_num_threads=1",
)


def _missing_extra(conf: Path) -> str | None:
    text = conf.name + conf.read_text()
    for key, (module, extra) in NEEDS.items():
        if key in text and importlib.util.find_spec(module) is None:
            return f"{conf.name} needs the [{extra}] extra ({module} is not installed)"
    return None


def test_every_example_is_covered():
    assert len(EXAMPLES) >= 23, [p.name for p in EXAMPLES]


def _settings(conf: Path) -> str:
    """The config without comments, blank lines and its environment id."""
    lines = (line.strip() for line in conf.read_text().splitlines())
    return "\n".join(
        line
        for line in lines
        if line and not line.startswith("#") and not line.startswith("create_environment.env_name")
    )


def _first_with_same_settings() -> dict[Path, Path]:
    """For each config that differs from an earlier one only in its environment id (e.g.
    ``ppo_walker2d.gin`` and ``ppo_hopper.gin``, which include the same settings): that
    earlier config."""
    first: dict[str, Path] = {}
    twins: dict[Path, Path] = {}
    for conf in EXAMPLES:
        key = _settings(conf)
        if key in first:
            twins[conf] = first[key]
        else:
            first[key] = conf
    return twins


TWINS = _first_with_same_settings()
TRAINED = [conf for conf in EXAMPLES if conf not in TWINS]


def test_twins_are_recognized():
    # The MuJoCo PPO configs share common/mujoco_ppo.gin; Ant and HalfCheetah add the
    # log-std parameter, Hopper and Walker2d do not: the first of each pair (by name) is
    # trained.
    envs = ("ant", "half_cheetah", "hopper", "walker2d")
    ppo = {env: CONF.parent / f"ppo_{env}.gin" for env in envs}
    assert TWINS[ppo["half_cheetah"]] == ppo["ant"] and TWINS[ppo["walker2d"]] == ppo["hopper"]
    assert ppo["ant"] in TRAINED and ppo["hopper"] in TRAINED
    assert CONF.parent / "ppo_cart_pole.gin" in TRAINED and len(TRAINED) + len(TWINS) == len(
        EXAMPLES
    )


@pytest.mark.parametrize("conf", list(TWINS), ids=[p.stem for p in TWINS])
def test_example_differing_only_in_its_environment_builds(conf):
    """A config whose settings another example trains and plays with (only the
    environment id differs): its environment and algorithm build, and the algorithm acts
    in it (the command line itself is tested on the twin)."""
    reason = _missing_extra(conf)
    if reason:
        pytest.skip(reason)
    from alf import config as alf_config
    from alf.data_structures import StepType
    from alf.environments import create_environment
    from alf.trainers import TrainerConfig, build_algorithm

    alf_config.load_config(str(conf))
    env = create_environment(num_parallel_environments=1, seed=0)
    try:
        algorithm = build_algorithm(TrainerConfig(), env)
        time_step = env.reset()
        transformed, _ = algorithm.data_transformer.transform_timestep(
            time_step, algorithm.data_transformer.initial_state(1)
        )
        state = algorithm.zero_state(algorithm.rollout_state_spec, 1)
        step = algorithm.rollout_step(transformed, state)
        next_step = env.step(step.output)
        assert next_step.step_type.item() in (StepType.MID, StepType.LAST)
    finally:
        env.close()


SMOKE_UNROLL_LENGTH = 16


def _configured_unroll_length(conf: Path) -> int:
    """``TrainerConfig.unroll_length`` as ``conf`` or a file it includes sets it (1 if
    neither does)."""
    text = conf.read_text()
    for included in re.findall(r"^include\s+['\"](.+?)['\"]", text, re.MULTILINE):
        text += "\n" + (conf.parent / included).read_text()
    found = re.findall(r"^TrainerConfig\.unroll_length\s*=\s*(\d+)", text, re.MULTILINE)
    return int(found[-1]) if found else 1


def _rows_per_game(conf: Path) -> int:
    """The batch rows one environment of ``conf`` has: its number of agents for a
    simultaneous-move PettingZoo game (each agent is a row), 1 otherwise."""
    from alf.environments.pettingzoo_games import game_info, is_pettingzoo

    found = re.findall(
        r"^create_environment\.env_name\s*=\s*['\"](.+?)['\"]", conf.read_text(), re.M
    )
    if not found or not is_pettingzoo(found[-1]):
        return 1
    game = game_info(found[-1])
    return 1 if game.turn_based else len(game.agents)


def _trains_on_a_dataset(conf: Path) -> bool:
    """Whether ``conf`` binds ``TrainerConfig.offline_dataset`` (an offline RL config)."""
    return bool(re.search(r"^TrainerConfig\.offline_dataset\s*=", conf.read_text(), re.M))


def _tiny_params(conf: Path) -> tuple[str, ...]:
    params = TINY
    if _trains_on_a_dataset(conf):
        params = (*params, *OFFLINE_SMOKE)
    rows = _rows_per_game(conf)
    if rows > 1:
        # One evaluation game of a multi-agent environment is one row per agent.
        params = tuple(p for p in params if not p.startswith("TrainerConfig.num_eval_env"))
        params = (*params, f"TrainerConfig.num_eval_environments={rows}")
    if _configured_unroll_length(conf) > SMOKE_UNROLL_LENGTH:
        # Long unrolls (MuJoCo's 256 x 8 envs with 320 updates, Pong's 128 x 8 through a
        # CNN) would make three iterations cost minutes; shorter ones keep every smoke
        # test as cheap as the others'.
        return (*params, f"TrainerConfig.unroll_length={SMOKE_UNROLL_LENGTH}")
    return params


Outcome = tuple[CompletedProcess, CompletedProcess | None] | BaseException


def _train_and_play(conf: Path, root: Path) -> Outcome:
    """The ``train`` command's result and then ``play``'s (None if training failed), or
    what was raised (a timeout)."""
    try:
        trained = run_cli(train_cmd(root, *_tiny_params(conf), conf=conf), timeout=600)
        if trained.returncode != 0:
            return trained, None
        return trained, run_cli(play_cmd(root, "--num_episodes=1"), timeout=600)
    except Exception as err:  # noqa: BLE001 - reported by that config's test
        return err


@pytest.fixture(scope="module")
def example_runs(tmp_path_factory) -> dict[Path, Outcome]:  # noqa: ANN001
    """Every trained example's ``train`` and ``play`` commands, two examples at a time
    (each command is a process of its own; most of its time is start-up)."""
    tmp = tmp_path_factory.mktemp("examples")
    runnable = [conf for conf in TRAINED if _missing_extra(conf) is None]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {conf: pool.submit(_train_and_play, conf, tmp / conf.stem) for conf in runnable}
        return {conf: future.result() for conf, future in futures.items()}


@pytest.mark.parametrize("conf", TRAINED, ids=[p.stem for p in TRAINED])
def test_example_trains_and_plays(example_runs, conf):
    reason = _missing_extra(conf)
    if reason:
        pytest.skip(reason)
    outcome = example_runs[conf]
    if isinstance(outcome, BaseException):
        raise outcome
    trained, played = outcome
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "Finished at iteration 3" in trained.stdout, trained.stdout[-2000:]
    played_average_return(played)  # exits 0 and prints its average return


def test_smoke_runs_cap_long_unrolls_from_the_config_or_its_include():
    assert _configured_unroll_length(CONF.parent / "ppo_pong.gin") == 128
    assert _configured_unroll_length(CONF.parent / "ppo_hopper.gin") == 256  # included
    assert _configured_unroll_length(CONF.parent / "sac_pendulum.gin") == 1
    assert "TrainerConfig.unroll_length=16" in _tiny_params(CONF.parent / "ppo_pong.gin")
    assert _tiny_params(CONF.parent / "ppo_masked.gin") == TINY


def test_offline_smoke_runs_train_on_the_committed_dataset_in_its_environment():
    assert OFFLINE_DATASET.is_dir()
    iql = _tiny_params(CONF.parent / "iql_hopper_medium.gin")
    assert iql == (*TINY, *OFFLINE_SMOKE)
    assert not _trains_on_a_dataset(CONF.parent / "sac_hopper.gin")


def test_smoke_runs_evaluate_one_whole_game_of_a_multi_agent_example():
    pytest.importorskip("mpe2")
    spread = _tiny_params(CONF.parent / "ppo_simple_spread.gin")
    assert "TrainerConfig.num_eval_environments=3" in spread
    assert "TrainerConfig.num_eval_environments=1" not in spread
    # A turn-based game has one learner row per game.
    assert _rows_per_game(CONF.parent / "ppo_connect_four_selfplay.gin") == 1
