"""What a new user hit first (issue 29's defects), through the commands they type: a bug
in their own code (an environment, an algorithm, a network) keeps its traceback,
re-running a finished run changes nothing, the folder holding a clone does not shadow the
package, and progress lines are plain."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_cli import (
    REPO,
    TINY_PARAMS,
    cli_env,
    copy_run,
    run_cli,
    shared_tiny_run,
    snapshot,
    train_cmd,
)

TRAIN = "alf.bin.train"

_USER_ENVS = """
import gymnasium as gym
import numpy as np


class AlfTestBrokenEnv(gym.Env):
    def __init__(self, render_mode=None):
        self.observation_space = gym.spaces.Box(-1, 1, (3,))
        self.action_space = gym.spaces.Discrete(2)
        scale = None
        self.scale = 2.0 + scale


class AlfTestUfuncEnv(gym.Env):
    def __init__(self, render_mode=None):
        np.add(np.array(["a"]), np.array([1.0]))


gym.register("AlfTestBroken-v0", entry_point=AlfTestBrokenEnv)
gym.register("AlfTestUfunc-v0", entry_point=AlfTestUfuncEnv)
"""

_ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]", re.MULTILINE)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    return shared_tiny_run(tmp_path_factory)


@pytest.mark.parametrize(
    ("env_id", "line", "kind", "text"),
    [
        ("AlfTestBroken-v0", 11, "TypeError", "self.scale = 2.0 + scale"),
        # gymnasium re-raises as type(e)(...), which this numpy error cannot take: the
        # user's frame is found through the chain all the same.
        ("AlfTestUfunc-v0", 16, "UFuncTypeError", 'np.add(np.array(["a"]), np.array([1.0]))'),
    ],
)
def test_a_bug_in_the_users_environment_keeps_its_traceback(
    tmp_path: Path, env_id: str, line: int, kind: str, text: str
) -> None:
    (tmp_path / "alf_test_user_bugs.py").write_text(_USER_ENVS)
    root = tmp_path / "run"
    binding = f"create_environment.env_name='alf_test_user_bugs:{env_id}'"
    result = run_cli(train_cmd(root, binding), pythonpath=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    stderr = result.stderr
    user_file = str(tmp_path / "alf_test_user_bugs.py")
    assert f'File "{user_file}", line {line}, in __init__' in stderr, stderr
    assert text in stderr
    last = stderr.strip().splitlines()[-1]
    assert last == (
        f"{TRAIN}: error: your code raised {kind} while the run was being built "
        f"(alf_test_user_bugs.py, line {line}); its traceback is above"
    ), stderr
    # ALF's and gymnasium's frames are hidden, and nothing was written.
    assert "site-packages" not in stderr and "/alf/" not in stderr.replace(user_file, "")
    assert not root.exists()
    # --traceback shows the whole of it.
    full = run_cli([*train_cmd(root, binding), "--traceback"], pythonpath=tmp_path)
    assert full.returncode == 2
    assert "gymnasium/envs/registration.py" in full.stderr, full.stderr
    assert not root.exists()


_USER_MODELS = """
from alf.algorithms import PPOAlgorithm
from alf.config import configurable
from alf.networks import ValueNetwork


@configurable
class AlfTestBrokenPPO(PPOAlgorithm):
    def __init__(self, *, temperature=None, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature * 2


@configurable
class AlfTestBrokenValueNetwork(ValueNetwork):
    def __init__(self, *, input_spec, **kwargs):
        super().__init__(input_spec=input_spec, **kwargs)
        self.scale = 1.0 + kwargs.get("scale")
"""

_USER_CONF = """
import alf_test_user_models
include 'ppo_cart_pole.gin'
"""


@pytest.mark.parametrize(
    ("binding", "line", "text", "message"),
    [
        (
            "TrainerConfig.algorithm_ctor = @AlfTestBrokenPPO",
            11,
            "self.temperature = temperature * 2",
            "unsupported operand type(s) for *: 'NoneType' and 'int'",
        ),
        (
            "PPOAlgorithm.value_network_ctor = @AlfTestBrokenValueNetwork",
            18,
            'self.scale = 1.0 + kwargs.get("scale")',
            "unsupported operand type(s) for +: 'float' and 'NoneType'",
        ),
    ],
    ids=["algorithm", "network"],
)
def test_a_bug_in_the_users_algorithm_or_network_keeps_its_traceback(
    tmp_path: Path, binding: str, line: int, text: str, message: str
) -> None:
    """A configurable subclass of the user's own (an algorithm, a network) whose
    ``__init__`` raises while the run is built: a short traceback ending in their file."""
    user_file = tmp_path / "alf_test_user_models.py"
    user_file.write_text(_USER_MODELS)
    conf = tmp_path / "my_conf.gin"
    conf.write_text(_USER_CONF + binding + "\n")
    root = tmp_path / "run"
    result = run_cli(train_cmd(root, conf=conf), pythonpath=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    stderr = result.stderr
    lines = stderr.strip().splitlines()
    start = lines.index(
        "Traceback (most recent call last; frames of ALF and installed packages hidden, "
        "--traceback shows them all):"
    )
    # Only the user's frames: the innermost is the line that failed, in __init__.
    frames = [i for i in range(start + 1, len(lines)) if lines[i].startswith("  File ")]
    assert frames and all(f'File "{user_file}"' in lines[i] for i in frames), stderr
    assert lines[frames[-1]] == f'  File "{user_file}", line {line}, in __init__', stderr
    assert lines[frames[-1] + 1].strip() == text, stderr
    assert lines[-2] == f"TypeError: {message}", stderr
    assert lines[-1] == (
        f"{TRAIN}: error: your code raised TypeError while the run was being built "
        f"(alf_test_user_models.py, line {line}); its traceback is above"
    ), stderr
    assert len(lines) - start <= 9, stderr  # short: ALF's and torch's frames hidden
    assert "site-packages" not in stderr and "/alf/" not in stderr.replace(str(user_file), "")
    assert not root.exists()
    # --traceback shows the whole of it, ALF's frames included.
    full = run_cli([*train_cmd(root, conf=conf), "--traceback"], pythonpath=tmp_path)
    assert full.returncode == 2
    assert f'File "{user_file}", line {line}, in __init__' in full.stderr
    assert os.path.join("alf", "trainers", "") in full.stderr, full.stderr
    assert not root.exists()


def test_alf_config_errors_stay_one_line(tmp_path: Path) -> None:
    result = run_cli(train_cmd(tmp_path / "run", "PPOAlgorithm.num_epochs=0"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith(f"{TRAIN}: error")]
    assert lines == [
        f"{TRAIN}: error: invalid configuration: PPOAlgorithm.num_epochs = 0 must be an int >= 1"
    ], result.stderr


def test_rerunning_a_finished_run_changes_no_file(tiny_run, tmp_path: Path) -> None:
    root = copy_run(tiny_run[0], tmp_path / "run")
    config_lines = (root / "config.gin").read_text().count("\n")
    before = snapshot(root)
    lock = (root / ".lock").read_bytes()
    result = run_cli(train_cmd(root, *TINY_PARAMS))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "had already finished" in result.stdout, result.stdout
    assert "nothing was trained or written" in result.stdout
    assert snapshot(root) == before
    assert (root / ".lock").read_bytes() == lock
    # A grown budget trains on, and config.gin is still the operative config (defaults
    # included), not the explicit bindings alone.
    grown = [p for p in TINY_PARAMS if not p.startswith("TrainerConfig.num_env_steps")]
    result = run_cli(train_cmd(root, *grown, "TrainerConfig.num_env_steps=3072"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Finished at iteration 12" in result.stdout
    text = (root / "config.gin").read_text()
    assert "TrainerConfig.random_seed" in text
    assert text.count("\n") >= config_lines
    assert json.loads((root / "status.json").read_text())["state"] == "finished"


def test_training_from_the_folder_that_holds_the_clone(tmp_path: Path) -> None:
    # `alf/` (the clone) in the working directory is a namespace package named alf.
    (tmp_path / "alf").symlink_to(REPO, target_is_directory=True)
    root = tmp_path / "run"
    conf = "alf/alf/examples/ppo_cart_pole.gin"
    cmd = [*train_cmd(root, *TINY_PARAMS, conf=conf)]
    result = subprocess.run(
        cmd, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((root / "run_info.json").read_text())
    assert info["versions"]["alf"], info


def test_progress_lines_are_plain_and_the_summary_prints_once(tiny_run) -> None:
    result = tiny_run[1]
    output = result.stdout + result.stderr
    assert not _ABSL_PREFIX.search(output), output[:2000]
    assert re.search(r"^iteration \d+ \| env steps", output, re.MULTILINE), output[:2000]
    assert output.count("Finished at iteration") == 1, output


@pytest.mark.parametrize("tool", ["train", "play", "export", "dataset"])
def test_help_exits_zero(tool: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", f"alf.bin.{tool}", "--help"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--root_dir" in result.stdout
    assert os.path.join("alf", "bin", f"{tool}.py") not in result.stdout.splitlines()[0]


def test_device_flag_over_the_configs_device_says_so(tmp_path: Path) -> None:
    cmd = [
        *train_cmd(
            tmp_path / "run", "TrainerConfig.device='cuda'", "TrainerConfig.num_env_steps=256"
        ),
        "--device=cpu",
    ]
    result = run_cli(cmd)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "alf.bin.train: note: --device=cpu overrides TrainerConfig.device='cuda' of the config"
        in result.stderr
    )


def test_a_conf_that_is_not_text_is_named(tmp_path: Path) -> None:
    conf = tmp_path / "binary.gin"
    conf.write_bytes(b"include 'ppo_cart_pole.gin'\n\xff\xfe\x00")
    result = run_cli(train_cmd(tmp_path / "run", conf=conf))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"config '{conf}' is not a text config file" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "tool", ["sweep", "plot", "report", "tune", "train", "play", "export", "dataset"]
)
def test_usage_names_the_console_script_it_was_started_as(tool: str) -> None:
    code = f"import sys; sys.argv = ['alf-{tool}', '--help']; from alf.bin.{tool} import run; run()"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"usage: alf-{tool} "), result.stdout[:200]


def test_play_records_one_episode_by_default(tiny_run, tmp_path: Path) -> None:
    video = tmp_path / "play.mp4"
    result = run_cli(
        [
            sys.executable,
            "-m",
            "alf.bin.play",
            f"--root_dir={tiny_run[0]}",
            f"--record_file={video}",
        ]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    episodes = [line for line in result.stdout.splitlines() if line.startswith("episode ")]
    assert len(episodes) == 1 and video.is_file()
    average = result.stdout.strip().splitlines()[-1].split(": ")[1]
    assert len(average.split(".")[-1]) <= 4, average
