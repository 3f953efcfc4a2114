"""``run_info.json`` and ``code.diff``: what a run records about how it was started and
resumed, and git calls that can never fail or stall a run."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers_cli import REPO, shared_tiny_run

import alf
from alf.run_dir import layout
from alf.run_dir import metadata as run_metadata
from alf.run_dir.metadata import GitInfo, git_info, record_run_start, shell_command

GIT = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A git repository with one commit of ``pkg/code.py``; ``venv/`` is ignored."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "code.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text("venv/\n")
    (repo / "venv" / "pkg").mkdir(parents=True)
    (repo / "venv" / "pkg" / "code.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def test_git_info_of_a_clean_and_a_modified_checkout(checkout):
    info = git_info(str(checkout / "pkg"))
    assert info.revision == _git(checkout, "rev-parse", "HEAD")
    assert Path(info.root).resolve() == checkout.resolve()
    assert info.diff == "" and info.dirty is False
    (checkout / "pkg" / "code.py").write_text("x = 2\n")
    info = git_info(str(checkout / "pkg"))
    assert info.dirty is True and "+x = 2" in info.diff


def test_git_info_is_null_outside_a_checkout_and_for_untracked_code(tmp_path, checkout):
    assert git_info(str(tmp_path)) == GitInfo()
    # A package installed in an ignored directory of some checkout is not its code.
    assert git_info(str(checkout / "venv" / "pkg")) == GitInfo()


def test_git_info_is_null_without_git(checkout, monkeypatch, tmp_path):
    empty = tmp_path / "empty_path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert git_info(str(checkout / "pkg")) == GitInfo()


def test_a_stalled_git_times_out(checkout, monkeypatch, tmp_path):
    fake = tmp_path / "fake_bin"
    fake.mkdir()
    script = fake / "git"
    script.write_text("#!/bin/sh\nsleep 30\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    start = time.monotonic()
    assert git_info(str(checkout / "pkg"), timeout_s=0.5) == GitInfo()
    assert time.monotonic() - start < 10


def test_shell_command_round_trips(monkeypatch):
    argv = ["/x/alf-train", "--conf=a b.gin", "--conf_param=TrainerConfig.wandb_project='p'"]
    monkeypatch.setitem(sys.modules, "__main__", SimpleNamespace(__spec__=None))
    assert shlex.split(shell_command(argv)) == argv
    script = ["train.py", "--root_dir=/r"]
    assert shlex.split(shell_command(script)) == [sys.executable, *script]
    spec = SimpleNamespace(name="alf.bin.train")
    monkeypatch.setitem(sys.modules, "__main__", SimpleNamespace(__spec__=spec))
    assert shlex.split(shell_command(["/repo/alf/bin/train.py", "--root_dir=/r"])) == [
        sys.executable,
        "-m",
        "alf.bin.train",
        "--root_dir=/r",
    ]


def _config(seed: int = 3) -> SimpleNamespace:
    class PPOAlgorithm:
        pass

    return SimpleNamespace(algorithm_ctor=PPOAlgorithm, random_seed=seed)


def test_fresh_start_then_resumes(tmp_path, monkeypatch):
    root = tmp_path / "run"
    root.mkdir()
    diffs = iter(["diff --git a/x b/x\n+changed\n", "", ""])
    monkeypatch.setattr(
        run_metadata,
        "_alf_git_info",
        lambda timeout_s: GitInfo(root="/repo", revision="abc", diff=next(diffs)),
    )
    first = record_run_start(
        str(root), config=_config(), device="cpu", trackers={"wandb": {"run_id": "w1"}}
    )
    on_disk = json.loads((root / layout.METADATA_FILE).read_text())
    assert on_disk == first
    assert first["framework"] == "alf" and first["algorithm"] == "PPOAlgorithm"
    assert first["seed"] == 3 and first["env_name"] == "CartPole-v1"
    assert first["git_revision"] == "abc" and first["git_dirty"] is True
    assert first["code_diff"] == layout.CODE_DIFF_FILE
    assert (root / layout.CODE_DIFF_FILE).read_text() == "diff --git a/x b/x\n+changed\n"
    assert first["versions"]["alf"] == alf.__version__
    assert {"python", "torch", "gymnasium", "numpy", "mujoco", "envpool"} <= set(first["versions"])
    assert first["resumes"] == [] and first["trackers"] == {"wandb": {"run_id": "w1"}}

    second = record_run_start(
        str(root),
        config=_config(),
        device="cpu",
        resumed_from=(7, 1792),
        trackers={"mlflow": {"run_id": "m1"}},
    )
    # The first start's record is kept; the resumption is appended.
    assert {k: v for k, v in second.items() if k not in ("resumes", "trackers")} == {
        k: v for k, v in first.items() if k not in ("resumes", "trackers")
    }
    (resume,) = second["resumes"]
    assert resume["iteration"] == 7 and resume["env_steps"] == 1792
    assert resume["git_revision"] == "abc" and resume["git_dirty"] is False
    assert resume["argv"] == sys.argv and "time" in resume
    assert second["trackers"] == {"wandb": {"run_id": "w1"}, "mlflow": {"run_id": "m1"}}
    assert (root / layout.CODE_DIFF_FILE).exists()  # the start's diff is kept

    # A fresh start (no checkpoint to resume) replaces the record, and the stale diff.
    third = record_run_start(str(root), config=_config(seed=4), device="cpu")
    assert third["resumes"] == [] and third["seed"] == 4 and third["code_diff"] is None
    assert not (root / layout.CODE_DIFF_FILE).exists()


def test_a_tiny_run_records_how_it_was_started(tmp_path_factory):
    root, _ = shared_tiny_run(tmp_path_factory)
    info = layout.read_metadata(str(root))
    assert info is not None
    assert info["framework"] == "alf"
    assert info["env_name"] == "CartPole-v1" and info["algorithm"] == "PPOAlgorithm"
    assert info["seed"] == 0 and info["device"] == "cpu" and info["world_size"] == 1
    assert info["argv"][1:] == shlex.split(info["command"])[3:]
    assert shlex.split(info["command"])[1:3] == ["-m", "alf.bin.train"]
    assert info["host"] and info["num_cpus"] >= 1 and info["device_name"]
    assert info["versions"]["alf"] == alf.__version__
    assert info["resumes"] == [] and info["trackers"] == {}
    # ALF is imported from this checkout (when it is one): its revision and diff.
    expected = git_info(str(Path(alf.__file__).parent))
    if expected.revision is None:
        assert info["git_revision"] is None
    else:
        assert Path(alf.__file__).resolve().is_relative_to(REPO)
        assert info["git_revision"] == expected.revision
        assert (root / layout.CODE_DIFF_FILE).exists() == bool(info["git_dirty"])
