"""End-to-end tests of ``python -m alf.bin.train`` and ``python -m alf.bin.play`` on
``alf/examples/ppo_cart_pole.gin`` with a tiny budget (real subprocesses)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers_cli import (
    PROGRESS_LINE_RE,
    STEPS_PER_ITERATION,
    TINY_NUM_CHECKPOINTS,
    TINY_NUM_ITERATIONS,
    UNUSED_BINDING,
    assert_clean_user_error,
    checkpoint_steps,
    copy_run,
    eval_records,
    play_cmd,
    read_progress,
    run_many,
    shared_tiny_run,
    train_records,
)

FLOAT = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
AVERAGE_RETURN_RE = re.compile(rf"^average_return: ({FLOAT})$")
EPISODE_LINE_RE = re.compile(rf"^episode \d+: return ({FLOAT}), length (\d+)$")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return shared_tiny_run(tmp_path_factory)


@pytest.fixture(scope="module")
def run_dir(tiny_run) -> Path:
    return tiny_run[0]


def test_train_exits_zero_and_reports_budget(tiny_run):
    _, result = tiny_run
    assert result.returncode == 0
    assert "Traceback" not in result.stderr
    steps = TINY_NUM_ITERATIONS * STEPS_PER_ITERATION
    assert f"Finished at iteration {TINY_NUM_ITERATIONS} ({steps} env steps)" in result.stdout


def test_root_dir_layout(run_dir):
    assert (run_dir / "config.gin").is_file()
    for group in ("train", "eval"):
        events = list((run_dir / group).glob("events.out.tfevents.*"))
        assert events, f"no TensorBoard event file in {group}/"
        assert all(e.stat().st_size > 0 for e in events)
    assert (run_dir / "progress.jsonl").is_file()
    assert (run_dir / "checkpoints" / f"ckpt-{TINY_NUM_ITERATIONS}.pt").is_file()
    leftovers = [p.name for p in (run_dir / "checkpoints").iterdir() if ".tmp" in p.name]
    assert not leftovers


def test_config_gin_is_parsable_and_operative(run_dir):
    import gin

    from alf import config as alf_config

    text = (run_dir / "config.gin").read_text()
    # Operative bindings: the ones set by the file and --conf_param, and used defaults.
    for line in (
        "create_environment.env_name = 'CartPole-v1'",
        "PPOAlgorithm.gamma = 0.98",
        f"TrainerConfig.num_env_steps = {TINY_NUM_ITERATIONS * STEPS_PER_ITERATION}",
        f"TrainerConfig.num_checkpoints = {TINY_NUM_CHECKPOINTS}",
        "TrainerConfig.algorithm_ctor = @PPOAlgorithm",
        "TrainerConfig.random_seed = 0",  # a default that was used
    ):
        assert line in text, f"{line!r} not in config.gin:\n{text}"
    assert "never_used" not in text  # inoperative bindings are not operative
    try:
        alf_config.load_config_text(text)
        assert gin.query_parameter("TrainerConfig.num_env_steps") == (
            TINY_NUM_ITERATIONS * STEPS_PER_ITERATION
        )
        assert gin.query_parameter("create_environment.env_name") == "CartPole-v1"
        assert gin.query_parameter("PPOAlgorithm.num_epochs") == 20
    finally:
        gin.clear_config()


def test_tensorboard_events_hold_train_and_eval_scalars(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train = EventAccumulator(str(run_dir / "train"))
    train.Reload()
    train_tags = set(train.Tags()["scalars"])
    assert {"train/average_return", "train/loss"} <= train_tags, train_tags
    # Scalars are logged against env steps; the iteration is a scalar of its own.
    iterations = list(range(2, TINY_NUM_ITERATIONS + 1, 2))
    assert [e.step for e in train.Scalars("train/loss")] == [
        i * STEPS_PER_ITERATION for i in iterations
    ]
    assert [e.value for e in train.Scalars("train/iteration")] == iterations
    evaluation = EventAccumulator(str(run_dir / "eval"))
    evaluation.Reload()
    eval_tags = set(evaluation.Tags()["scalars"])
    assert {"eval/average_return", "eval/average_episode_length"} <= eval_tags, eval_tags
    assert {"eval/iteration"} <= eval_tags


def test_progress_jsonl(run_dir):
    records = read_progress(run_dir)  # every line parses as JSON
    assert all(isinstance(r, dict) for r in records)
    train = train_records(records)
    assert [r["iteration"] for r in train] == list(range(2, TINY_NUM_ITERATIONS + 1, 2))
    for r in train:
        assert {"iteration", "env_steps", "elapsed_s", "fps"} <= set(r), r
        assert r["env_steps"] == r["iteration"] * STEPS_PER_ITERATION
        assert r["elapsed_s"] > 0 and r["fps"] > 0
        # Random CartPole episodes last ~20 steps, so every summary window saw some end.
        assert isinstance(r["train/average_return"], float) and r["train/average_return"] > 0
    elapsed = [r["elapsed_s"] for r in train]
    assert elapsed == sorted(elapsed)
    evals = eval_records(records)
    assert [r["iteration"] for r in evals] == [4, 8]
    for r in evals:
        assert r["env_steps"] == r["iteration"] * STEPS_PER_ITERATION
        assert r["eval/average_return"] > 0
        assert r["eval/average_episode_length"] > 0
        # Wall time of the run when the evaluation ended, and the pure training time.
        assert r["elapsed_s"] >= r["train_time_s"] > 0
    # elapsed_s is the run's wall-clock time: it never goes backwards.
    elapsed = [r["elapsed_s"] for r in records]
    assert elapsed == sorted(elapsed)


def test_unused_binding_is_warned_about(tiny_run):
    _, result = tiny_run
    warnings = [line for line in result.stderr.splitlines() if UNUSED_BINDING in line]
    assert warnings, result.stderr
    assert "never used" in warnings[0]
    # Bindings that were used are not listed.
    assert "TrainerConfig.num_env_steps" not in warnings[0]


def test_progress_line_is_logged_to_stderr(tiny_run):
    _, result = tiny_run
    assert PROGRESS_LINE_RE.search(result.stderr), result.stderr
    assert not PROGRESS_LINE_RE.search(result.stdout)


def test_num_checkpoints_keeps_only_the_newest(run_dir):
    # checkpoint_interval=2 wrote 2, 4, 6, 8; num_checkpoints=2 keeps the newest two.
    expected = list(range(2, TINY_NUM_ITERATIONS + 1, 2))[-TINY_NUM_CHECKPOINTS:]
    assert checkpoint_steps(run_dir) == expected
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == sorted(
        f"ckpt-{s}.pt" for s in expected
    )


def _check_play_output(result, num_episodes: int) -> float:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.strip().splitlines()
    episodes = [m for m in map(EPISODE_LINE_RE.match, lines) if m]
    assert len(episodes) == num_episodes, result.stdout
    match = AVERAGE_RETURN_RE.match(lines[-1])
    assert match, f"last stdout line is {lines[-1]!r}"
    average = float(match.group(1))
    returns = [float(m.group(1)) for m in episodes]
    assert average == pytest.approx(sum(returns) / len(returns), abs=0.01)
    return average


@pytest.fixture(scope="module")
def plays(run_dir, tmp_path_factory) -> dict:
    """The play commands of the tests below, run concurrently once."""
    base = tmp_path_factory.mktemp("play")
    # A copy whose newest checkpoint is unreadable: only loading an older one can work.
    corrupt = copy_run(run_dir, base / "newest_corrupt")
    older, newest = checkpoint_steps(corrupt)[-2:]
    (corrupt / "checkpoints" / f"ckpt-{newest}.pt").write_bytes(b"not a checkpoint")
    video = base / "videos" / "out.mp4"
    results = run_many(
        {
            "newest": play_cmd(run_dir, "--num_episodes=3"),
            "step": play_cmd(corrupt, f"--checkpoint_step={older}", "--num_episodes=2"),
            "checkpoint": play_cmd(corrupt, f"--checkpoint={older}", "--num_episodes=2"),
            "corrupt": play_cmd(corrupt, f"--checkpoint={newest}", "--num_episodes=2"),
            "record": play_cmd(run_dir, "--num_episodes=2", f"--record_file={video}"),
        }
    )
    unreadable = corrupt / "checkpoints" / f"ckpt-{newest}.pt"
    return {**results, "video": video, "unreadable": unreadable}


def test_play_newest_checkpoint(plays):
    assert _check_play_output(plays["newest"], 3) > 0


def test_play_checkpoint_step_loads_that_checkpoint(plays):
    _check_play_output(plays["step"], 2)


def test_play_checkpoint_loads_that_checkpoint(plays):
    """``--checkpoint=N`` (the documented spelling) plays iteration N's checkpoint: the
    older one works, and naming the newest (unreadable) one fails naming that file."""
    _check_play_output(plays["checkpoint"], 2)
    assert_clean_user_error(plays["corrupt"], "alf.bin.play", str(plays["unreadable"]))


def test_play_records_mp4(plays):
    _check_play_output(plays["record"], 2)
    video = plays["video"]
    assert "video:" in plays["record"].stdout
    assert video.is_file() and video.stat().st_size > 1000
    head = video.read_bytes()[:12]
    assert head[4:8] == b"ftyp", head  # an ISO-BMFF (mp4) container


def test_stray_arguments_error_names_the_first_word_and_suggests_conf_param():
    from alf.bin.cli import stray_arguments_error

    assert stray_arguments_error(["alf-train"], takes_bindings=True) is None
    binding = stray_arguments_error(["train", "A.b=1", "x"], takes_bindings=True)
    assert binding == (
        "unexpected argument 'A.b=1' (and 1 more): a gin binding goes through --conf_param='A.b=1'"
    )
    word = stray_arguments_error(["export", "onnx"], takes_bindings=True)
    assert word == "unexpected argument 'onnx': every option is a --flag (see --help)"
    assert "--conf_param" not in stray_arguments_error(["t", "A.b=1"], takes_bindings=False)
