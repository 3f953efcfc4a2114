"""User errors on the command line (real subprocesses): each must exit nonzero with one
clear ``<prog>: error:`` message naming the problem, no traceback, and must leave an
existing good run (its checkpoints above all) byte-for-byte intact.

Every case gets a private copy of a good run; the bad commands are independent, so the
module fixture runs them concurrently and each test checks one outcome.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from helpers_cli import (
    CONF,
    assert_clean_user_error,
    checkpoint_steps,
    copy_run,
    play_cmd,
    run_many,
    shared_tiny_run,
    snapshot,
    train_cmd,
)

TRAIN = "alf.bin.train"
PLAY = "alf.bin.play"
# What a user would pass to resume the good run (a larger budget).
RESUME_PARAMS = ("TrainerConfig.num_env_steps=4096", "TrainerConfig.progress_interval_s=0")


@dataclass
class Case:
    """A bad command against ``root`` (a copy of a good run) and what it left behind."""

    root: Path
    cmd: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    before: dict[str, str] = field(default_factory=dict)
    result: subprocess.CompletedProcess | None = None

    def assert_untouched(self) -> None:
        assert snapshot(self.root) == self.before, "the failed command changed the run's files"


def _newest(root: Path) -> Path:
    return root / "checkpoints" / f"ckpt-{checkpoint_steps(root)[-1]}.pt"


def _missing_conf(case: Case, tmp: Path) -> None:
    case.info["conf"] = tmp / "no_such_config.gin"
    case.cmd = train_cmd(case.root, *RESUME_PARAMS, conf=case.info["conf"])


def _unknown_configurable(case: Case, tmp: Path) -> None:
    case.cmd = train_cmd(case.root, *RESUME_PARAMS, "NoSuchConfigurable.x=1")


def _unknown_parameter(case: Case, tmp: Path) -> None:
    case.cmd = train_cmd(case.root, *RESUME_PARAMS, "TrainerConfig.no_such_param=1")


def _unregistered_env(case: Case, tmp: Path) -> None:
    case.cmd = train_cmd(case.root, *RESUME_PARAMS, 'create_environment.env_name="CartPol-v1"')


def _corrupt_checkpoint(case: Case, tmp: Path) -> None:
    case.info["steps"] = checkpoint_steps(case.root)
    case.info["newest"] = _newest(case.root)
    case.info["newest"].write_bytes(b"\x00garbage, not a torch checkpoint\xff" * 64)
    case.cmd = train_cmd(case.root, *RESUME_PARAMS)


def _play_no_run(case: Case, tmp: Path) -> None:
    case.root = tmp / "not_a_run"
    case.root.mkdir()
    case.cmd = play_cmd(case.root)


def _play_missing_step(case: Case, tmp: Path) -> None:
    case.info["steps"] = checkpoint_steps(case.root)
    case.info["missing"] = case.info["steps"][-1] + 1
    case.cmd = play_cmd(case.root, f"--checkpoint_step={case.info['missing']}")


def _non_alf_checkpoint(case: Case, tmp: Path) -> None:
    import torch

    case.info["newest"] = _newest(case.root)
    torch.save({"weights": torch.zeros(2)}, case.info["newest"])
    case.cmd = train_cmd(case.root, *RESUME_PARAMS)


def _conf_syntax_error(case: Case, tmp: Path) -> None:
    case.info["conf"] = tmp / "broken.gin"
    case.info["conf"].write_text(f'include "{CONF}"\nTrainerConfig.num_env_steps = (4096,\n')
    case.cmd = train_cmd(case.root, conf=case.info["conf"])


def _include_example(case: Case, tmp: Path) -> None:
    case.info["conf"] = tmp / "mine.gin"
    case.info["conf"].write_text('include "ppo_cart_pole.gin"\nNoSuchConfigurable.x = 1\n')
    case.cmd = train_cmd(case.root, conf=case.info["conf"])


def _missing_user_module(case: Case, tmp: Path) -> None:
    case.info["conf"] = tmp / "user.gin"
    case.info["conf"].write_text(f'import no_such_user_module_xyz\ninclude "{CONF}"\n')
    case.cmd = train_cmd(case.root, conf=case.info["conf"])


def _unknown_device(case: Case, tmp: Path) -> None:
    case.cmd = [*train_cmd(case.root, *RESUME_PARAMS), "--device=tpu"]


def _cuda_without_gpu(case: Case, tmp: Path) -> None:
    case.cmd = [*train_cmd(case.root, *RESUME_PARAMS), "--device=cuda"]


def _bad_mixed_precision(case: Case, tmp: Path) -> None:
    case.cmd = train_cmd(case.root, *RESUME_PARAMS, 'TrainerConfig.mixed_precision="fp8"')


def _binding_without_conf_param(case: Case, tmp: Path) -> None:
    # absl would drop the word and resume with the old budget as if nothing was wrong.
    case.cmd = [*train_cmd(case.root), "TrainerConfig.num_env_steps=4096"]


def _play_stray_word(case: Case, tmp: Path) -> None:
    case.cmd = [*play_cmd(case.root), "episodes", "3"]


CASES: dict[str, Callable[[Case, Path], None]] = {
    "missing_conf": _missing_conf,
    "unknown_configurable": _unknown_configurable,
    "unknown_parameter": _unknown_parameter,
    "unregistered_env": _unregistered_env,
    "corrupt_checkpoint": _corrupt_checkpoint,
    "play_no_run": _play_no_run,
    "play_missing_step": _play_missing_step,
    "non_alf_checkpoint": _non_alf_checkpoint,
    "conf_syntax_error": _conf_syntax_error,
    "include_example": _include_example,
    "missing_user_module": _missing_user_module,
    "unknown_device": _unknown_device,
    "cuda_without_gpu": _cuda_without_gpu,
    "bad_mixed_precision": _bad_mixed_precision,
    "binding_without_conf_param": _binding_without_conf_param,
    "play_stray_word": _play_stray_word,
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[str, Case]:
    good, _ = shared_tiny_run(tmp_path_factory)
    assert len(checkpoint_steps(good)) >= 2
    prepared = {}
    for name, prepare in CASES.items():
        tmp = tmp_path_factory.mktemp(name)
        case = Case(root=copy_run(good, tmp / "root"))
        prepare(case, tmp)
        case.before = snapshot(case.root)
        prepared[name] = case
    results = run_many({name: case.cmd for name, case in prepared.items()})
    for name, case in prepared.items():
        case.result = results[name]
    return prepared


def test_missing_conf_file(cases):
    case = cases["missing_conf"]
    assert_clean_user_error(case.result, TRAIN, "not found", str(case.info["conf"]))
    case.assert_untouched()


def test_binding_without_conf_param_is_refused_with_the_flag_to_use(cases):
    case = cases["binding_without_conf_param"]
    assert_clean_user_error(
        case.result,
        TRAIN,
        "unexpected argument 'TrainerConfig.num_env_steps=4096'",
        "--conf_param='TrainerConfig.num_env_steps=4096'",
    )
    case.assert_untouched()


def test_stray_words_after_play_flags_are_refused(cases):
    case = cases["play_stray_word"]
    assert_clean_user_error(case.result, PLAY, "unexpected argument 'episodes' (and 1 more)")
    case.assert_untouched()


def test_unknown_configurable_in_conf_param(cases):
    case = cases["unknown_configurable"]
    assert_clean_user_error(case.result, TRAIN, "No configurable matching", "NoSuchConfigurable")
    case.assert_untouched()


def test_unknown_parameter_of_known_configurable(cases):
    case = cases["unknown_parameter"]
    assert_clean_user_error(case.result, TRAIN, "TrainerConfig", "no_such_param", "parameter")
    case.assert_untouched()


def test_unregistered_env_id_suggests_close_match(cases):
    case = cases["unregistered_env"]
    stderr = assert_clean_user_error(case.result, TRAIN, "CartPol-v1", "not registered")
    assert "CartPole-v1" in stderr.split("CartPol-v1", 1)[1]  # suggested after the bad id
    case.assert_untouched()


def test_corrupt_newest_checkpoint_is_reported_and_kept(cases):
    case = cases["corrupt_checkpoint"]
    assert_clean_user_error(case.result, TRAIN, str(case.info["newest"]), "corrupt")
    case.assert_untouched()  # the bad file and the older good ones are all still there
    assert checkpoint_steps(case.root) == case.info["steps"]


def test_play_on_directory_without_run(cases):
    case = cases["play_no_run"]
    assert_clean_user_error(case.result, PLAY, "config.gin", "not found", str(case.root))
    assert list(case.root.iterdir()) == []


def test_play_with_missing_checkpoint_step(cases):
    case = cases["play_missing_step"]
    stderr = assert_clean_user_error(
        case.result, PLAY, f"No checkpoint for iteration {case.info['missing']}"
    )
    assert all(str(s) in stderr for s in case.info["steps"]), "available ones not listed"
    case.assert_untouched()


def test_error_in_conf_including_an_example_is_located_without_noise(cases):
    # gin used to log "E... Path not found" for every search path tried before the
    # examples dir; the include reader of alf/config.py now resolves includes itself.
    case = cases["include_example"]
    stderr = assert_clean_user_error(
        case.result, TRAIN, "NoSuchConfigurable", str(case.info["conf"]), "line 2"
    )
    case.assert_untouched()
    assert "Path not found" not in stderr


# ----------------------------------------------------------------- known bugs
def test_non_alf_checkpoint_is_a_clean_error(cases):
    case = cases["non_alf_checkpoint"]
    case.assert_untouched()
    assert_clean_user_error(case.result, TRAIN, str(case.info["newest"]))


def test_conf_file_syntax_error_is_a_clean_error(cases):
    case = cases["conf_syntax_error"]
    case.assert_untouched()
    assert_clean_user_error(case.result, TRAIN, str(case.info["conf"]))


def test_bad_conf_param_is_not_blamed_on_the_conf_file(cases):
    case = cases["unknown_configurable"]
    stderr = assert_clean_user_error(case.result, TRAIN, "NoSuchConfigurable", "--conf_param")
    assert f"config file '{CONF}'" not in stderr


def test_conf_importing_a_missing_module_is_a_clean_error(cases):
    case = cases["missing_user_module"]
    assert_clean_user_error(case.result, TRAIN, "no_such_user_module_xyz", "PYTHONPATH")
    case.assert_untouched()


def test_unknown_device_is_a_clean_error(cases):
    case = cases["unknown_device"]
    assert_clean_user_error(case.result, TRAIN, "TrainerConfig.device", "tpu", "cuda")
    case.assert_untouched()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_device_without_a_gpu_is_a_clean_error(cases):
    case = cases["cuda_without_gpu"]
    assert_clean_user_error(case.result, TRAIN, "cuda", "no CUDA GPU", "--device=cpu")
    case.assert_untouched()


def test_unknown_mixed_precision_is_a_clean_error(cases):
    case = cases["bad_mixed_precision"]
    assert_clean_user_error(case.result, TRAIN, "mixed_precision", "fp8", "bfloat16")
    case.assert_untouched()
