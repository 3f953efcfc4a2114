"""A run directory is data: ``play`` and ``export`` check a saved ``config.gin`` before gin
parses it (``alf/saved_config.py``), so a crafted one runs nothing."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers_cli import (
    assert_clean_user_error,
    copy_run,
    play_cmd,
    run_cli,
    shared_tiny_run,
    snapshot,
)

from alf import config as alf_config
from alf.configurables import import_configurables
from alf.saved_config import (
    UntrustedConfigError,
    check_saved_config,
    load_saved_config,
    read_config_text,
)

PLAY = "alf.bin.play"
EXPORT = "alf.bin.export"

_EXPLOIT = """from __gin__ import dynamic_registration
import os
TrainerConfig.random_seed = @os.system()
os.system.command = 'touch {marker}'
"""


@pytest.fixture(scope="module", autouse=True)
def _registered() -> None:
    import_configurables()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root, _ = shared_tiny_run(tmp_path_factory)
    return root


def _check(text: str, *trusted: str) -> None:
    check_saved_config(text, "/runs/x/config.gin", trusted_modules=trusted)


def test_alf_bindings_macros_and_references_pass() -> None:
    _check(
        "PPOAlgorithm.gamma = 0.99\n"
        "UNROLL = 32\n"
        "TrainerConfig.unroll_length = %UNROLL\n"
        "TrainerConfig.algorithm_ctor = @PPOAlgorithm\n"
        "lr/LinearSchedule.start = 1e-3\n"
        "PPOAlgorithm.optimizer_ctor = @torch.optim.Adam\n"
        "create_environment.env_name = 'CartPole-v1'\n"
    )


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("from __gin__ import dynamic_registration\n", 1, ("dynamic_registration", "refused")),
        ("PPOAlgorithm.gamma = 0.9\nimport os\n", 2, ("import os", "--trust_module=os")),
        ("include 'ppo_cart_pole.gin'\n", 1, ("include",)),
        ("os.system.command = 'id'\n", 1, ("os.system",)),
        ("TrainerConfig.algorithm_ctor = @subprocess.call()\n", 1, ("subprocess.call",)),
        ("X = @shutil.rmtree\n", 1, ("shutil.rmtree",)),
    ],
)
def test_refused_statements_name_the_file_and_line(text: str, line: int, words: tuple) -> None:
    with pytest.raises(UntrustedConfigError) as info:
        _check(text)
    message = str(info.value)
    assert message.startswith(f"/runs/x/config.gin, line {line}: "), message
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_an_environment_module_outside_site_packages_must_be_trusted(tmp_path, monkeypatch):
    (tmp_path / "alf_test_shipped_env.py").write_text("raise SystemExit('ran shipped code')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = "create_environment.env_name = 'alf_test_shipped_env:Evil-v0'\n"
    with pytest.raises(UntrustedConfigError, match="--trust_module=alf_test_shipped_env"):
        _check(text)
    assert "alf_test_shipped_env" not in sys.modules  # found, never imported
    _check(text, "alf_test_shipped_env")
    # An installed package (gymnasium's own module here) is fine.
    _check("create_environment.env_name = 'gymnasium.envs.classic_control:CartPole-v1'\n")


def test_a_trusted_module_may_be_imported_and_its_configurables_bound(tmp_path, monkeypatch):
    (tmp_path / "alf_test_trusted_mod.py").write_text(
        "import gin\n\n@gin.configurable\ndef alf_test_trusted_fn(x=1):\n    return x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    conf = tmp_path / "config.gin"
    conf.write_text(
        "import alf_test_trusted_mod\nalf_test_trusted_fn.x = 3\nPPOAlgorithm.gamma = 0.5\n"
    )
    with pytest.raises(UntrustedConfigError, match="import alf_test_trusted_mod"):
        load_saved_config(str(conf))
    load_saved_config(str(conf), trusted_modules=["alf_test_trusted_mod"])
    assert alf_config.current_bindings()["alf_test_trusted_fn.x"] == "3"


def test_a_config_that_is_not_text_is_one_line_naming_it(tmp_path):
    conf = tmp_path / "config.gin"
    conf.write_bytes(b"PPOAlgorithm.gamma = 0.9\n\xff\xfe\x00binary")
    with pytest.raises(alf_config.ConfigError, match=f"config '{conf}' is not a text config"):
        read_config_text(str(conf))


@pytest.mark.parametrize("tool", [PLAY, EXPORT])
def test_a_crafted_config_runs_nothing_under_play_and_export(tool, tiny_run, tmp_path):
    root = copy_run(tiny_run, tmp_path / "downloaded")
    marker = tmp_path / "marker"
    conf = root / "config.gin"
    conf.write_text(_EXPLOIT.format(marker=marker) + conf.read_text())
    before = snapshot(root)
    if tool == PLAY:
        cmd = play_cmd(root, "--num_episodes=1")
    else:
        out = tmp_path / "policy.pt"
        cmd = [sys.executable, "-m", EXPORT, f"--root_dir={root}", "--format=torchscript"]
        cmd.append(f"--out={out}")
    result = run_cli(cmd)
    assert result.returncode == 2, result.stderr[-3000:]
    assert_clean_user_error(result, tool, f"{conf}, line 1", "dynamic_registration", "refused")
    assert not marker.exists()
    assert snapshot(root) == before
    # Without the registration line, the import is refused (even if `os` were "trusted",
    # os.system is no configurable).
    conf.write_text("\n".join(conf.read_text().splitlines()[1:]))
    result = run_cli(play_cmd(root, "--num_episodes=1"))
    assert_clean_user_error(result, PLAY, "'import os' is refused", "--trust_module=os")
    result = run_cli(play_cmd(root, "--num_episodes=1", "--trust_module=os"))
    assert_clean_user_error(result, PLAY, "'os.system' is not a configurable")
    assert not marker.exists()


def test_play_names_a_config_that_is_not_text(tiny_run, tmp_path):
    root = copy_run(tiny_run, tmp_path / "run")
    conf = root / "config.gin"
    conf.write_bytes(conf.read_bytes() + b"\n\xff\xfe")
    result = run_cli(play_cmd(root, "--num_episodes=1"))
    assert result.returncode == 2
    assert_clean_user_error(result, PLAY, str(conf), "not a text config")


class _RunsCode:
    """A pickle that would run code when loaded."""

    def __reduce__(self) -> tuple:
        return (os.system, ("touch /nonexistent-alf-marker",))


def test_a_crafted_checkpoint_is_refused_without_torchs_unsafe_advice(tiny_run, tmp_path):
    import torch

    root = copy_run(tiny_run, tmp_path / "run")
    crafted = root / "checkpoints" / "ckpt-999.pt"
    torch.save({"iteration": 999, "env_steps": 1, "algorithm": _RunsCode()}, crafted)
    before = snapshot(root)
    result = run_cli(play_cmd(root, "--num_episodes=1"))
    assert result.returncode == 2
    stderr = assert_clean_user_error(result, PLAY, str(crafted), "asks to run code", "refused")
    assert "weights_only" not in stderr and "likely succeed" not in stderr
    assert snapshot(root) == before
