"""The console of ``alf.bin.train`` / ``alf.bin.play``: the start-up line, the progress
line (percent, elapsed, ETA that is not fooled by a fast random warm-up) and ``--help``
under ``python -m`` and under the console scripts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_cli import (
    CONF,
    PROGRESS_LINE_RE,
    REPO,
    TINY_NUM_ITERATIONS,
    cli_env,
    shared_tiny_run,
    train_cmd,
)

from alf.trainers.train_report import RateWindow, TrainingReport, format_duration
from alf.unrollers.episode_tracker import CompletedEpisodes

TRAIN_FLAGS = ("--conf", "--root_dir", "--conf_param", "--device")
PLAY_FLAGS = (
    "--root_dir",
    "--checkpoint",
    "--num_episodes",
    "--seed",
    "--record_file",
    "--conf_param",
)


# ----------------------------------------------------------------- progress line
class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _report(clock: FakeClock) -> TrainingReport:
    return TrainingReport(
        summary=None, distributed=None, start_iteration=0, start_env_steps=0, clock=clock
    )


def _eta_s(line: str) -> float | None:
    match = PROGRESS_LINE_RE.search(line)
    assert match, line
    if match["eta"] == "n/a":
        return None
    hours, minutes, seconds = map(int, match["eta"].split(":"))
    return 3600 * hours + 60 * minutes + seconds


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0:00:00"),
        (59.4, "0:00:59"),
        (243, "0:04:03"),
        (3600 + 745, "1:12:25"),
        (100 * 3600, "100:00:00"),
        (-3, "0:00:00"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def _run_phase(
    report: TrainingReport,
    clock: FakeClock,
    *,
    iteration: int,
    env_steps: int,
    iterations: int,
    steps_per_iteration: int,
    seconds_per_iteration: float,
    trained: bool,
    num_env_steps: int,
) -> tuple[int, int, str]:
    line = ""
    for _ in range(iterations):
        clock.now += seconds_per_iteration
        iteration += 1
        env_steps += steps_per_iteration
        report.add_iteration(
            steps_per_iteration,
            seconds_per_iteration,
            CompletedEpisodes([1.0], [1], [0], [float("nan")]),
            trained=trained,
        )
        line = report.print_progress(
            iteration,
            env_steps,
            elapsed_s=clock.now - 1000.0,
            interval_s=0,
            num_env_steps=num_env_steps,
            num_iterations=0,
        )
    return iteration, env_steps, line


def test_eta_right_after_the_random_warm_up_is_the_training_rate():
    """An off-policy run: 20k random steps at 10k steps/s, then training at 500 steps/s.
    Right after the switch the ETA must be the training-phase truth; the session average
    (blended rate) would promise it many times sooner."""
    clock = FakeClock()
    report = _report(clock)
    budget = 200_000
    state = dict(iteration=0, env_steps=0, num_env_steps=budget)
    # Warm-up: 100 iterations of 200 steps in 0.02 s each (10k steps/s), no training.
    iteration, env_steps, line = _run_phase(
        report,
        clock,
        **state,
        iterations=100,
        steps_per_iteration=200,
        seconds_per_iteration=0.02,
        trained=False,
    )
    assert _eta_s(line) is None, "no honest ETA while only random steps were taken"
    assert "10000 steps/s" in line
    # Training: 200 steps per 0.4 s (500 steps/s); check after 3 iterations (1.2 s).
    iteration, env_steps, line = _run_phase(
        report,
        clock,
        iteration=iteration,
        env_steps=env_steps,
        num_env_steps=budget,
        iterations=3,
        steps_per_iteration=200,
        seconds_per_iteration=0.4,
        trained=True,
    )
    truth = (budget - env_steps) / 500
    blended = (budget - env_steps) / (env_steps / (clock.now - 1000.0))
    eta = _eta_s(line)
    assert eta == pytest.approx(truth, rel=0.02), (line, truth, blended)
    assert abs(eta - truth) < abs(eta - blended) / 10
    assert "500 steps/s" in line
    assert f"({100 * env_steps / budget:.1f}%)" in line
    # And it keeps following the truth (it does not creep as the warm-up ages out).
    for _ in range(5):
        iteration, env_steps, line = _run_phase(
            report,
            clock,
            iteration=iteration,
            env_steps=env_steps,
            num_env_steps=budget,
            iterations=50,
            steps_per_iteration=200,
            seconds_per_iteration=0.4,
            trained=True,
        )
        assert _eta_s(line) == pytest.approx((budget - env_steps) / 500, rel=0.02, abs=1)


def test_rate_follows_a_slowdown_within_the_window():
    window = RateWindow(now=0.0, env_steps=0, iteration=0, window_s=10.0)
    t, steps = 0.0, 0
    for _ in range(100):  # 1000 steps/s for 50 s
        t, steps = t + 0.5, steps + 500
        window.add(t, steps, 0)
    for _ in range(40):  # then 100 steps/s for 20 s
        t, steps = t + 0.5, steps + 50
        window.add(t, steps, 0)
    rate, _ = window.rates()
    assert rate == pytest.approx(100, rel=0.06)


def test_progress_line_with_an_iteration_budget():
    clock = FakeClock()
    report = _report(clock)
    clock.now += 10
    report.add_iteration(100, 10, CompletedEpisodes([], [], [], []), trained=True)
    line = report.progress_line(10, 1000, elapsed_s=3723, num_env_steps=0, num_iterations=40)
    match = PROGRESS_LINE_RE.search(line)
    assert match, line
    assert match["percent"] == "25.0"
    assert match["ret"] == "n/a"
    assert match["elapsed"] == "1:02:03"
    assert match["eta"] == "0:00:30"  # 30 iterations at one per second


def test_progress_lines_of_a_real_run(tmp_path_factory):
    _, result = shared_tiny_run(tmp_path_factory)
    assert result.stdout.splitlines()[0].startswith("alf.bin.train: building ")
    matches = [m for m in map(PROGRESS_LINE_RE.search, result.stderr.splitlines()) if m]
    assert len(matches) == TINY_NUM_ITERATIONS, result.stderr
    percents = [float(m["percent"]) for m in matches]
    assert percents == sorted(percents) and percents[-1] == 100.0
    assert matches[-1]["eta"] == "0:00:00"


# ----------------------------------------------------------------- start-up line
def test_startup_line_comes_first_and_before_torch_is_imported(tmp_path):
    """``-X importtime`` reports every import on stderr as it completes; with stderr
    merged into stdout, the start-up line must precede every torch (and gymnasium)
    import, and be the first line the program prints."""
    root = tmp_path / "run"
    # The config fails (no budget) after the heavy imports: nothing is trained.
    cmd = train_cmd(root, "TrainerConfig.num_env_steps=0")
    cmd.insert(1, "-X")
    cmd.insert(2, "importtime")
    result = subprocess.run(
        cmd,
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=240,
        check=False,
    )
    lines = result.stdout.splitlines()
    assert result.returncode == 2, result.stdout[-3000:]
    own = [i for i, line in enumerate(lines) if not line.startswith("import time:")]
    assert own, result.stdout[-3000:]
    first = lines[own[0]]
    assert first == f"alf.bin.train: building {CONF} into {root}"
    heavy = re.compile(r"^import time:.*\|\s*(torch|gymnasium)(\.|$)")
    first_heavy = next(i for i, line in enumerate(lines) if heavy.match(line))
    assert own[0] < first_heavy
    # A start that failed records nothing about the run.
    assert not (root / "run_info.json").exists()


# ----------------------------------------------------------------- --help
def _help(cmd: list[str]) -> str:
    result = subprocess.run(
        cmd, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result.stdout


def _assert_lists(text: str, names: tuple[str, ...]) -> None:
    for name in names:
        assert re.search(rf"^\s+{name}\b", text, re.MULTILINE), f"{name} not in:\n{text}"


@pytest.mark.parametrize(
    ("module", "names"), [("alf.bin.train", TRAIN_FLAGS), ("alf.bin.play", PLAY_FLAGS)]
)
def test_help_lists_own_flags_under_python_m(module, names):
    text = _help([sys.executable, "-m", module, "--help"])
    _assert_lists(text, names)


@pytest.mark.parametrize(
    ("module", "prog", "names"),
    [("alf.bin.train", "alf-train", TRAIN_FLAGS), ("alf.bin.play", "alf-play", PLAY_FLAGS)],
)
def test_help_lists_own_flags_under_a_console_script(module, prog, names):
    code = f"import sys; from {module} import run; sys.argv = [{prog!r}, '--help']; run()"
    text = _help([sys.executable, "-c", code])
    _assert_lists(text, names)
    assert "Usage::" in text  # the module's docstring, not only absl's one-line usage


@pytest.mark.parametrize(("prog", "names"), [("alf-train", TRAIN_FLAGS), ("alf-play", PLAY_FLAGS)])
def test_help_of_the_installed_console_script(prog, names):
    script = Path(sys.executable).parent / prog
    if not script.exists():
        pytest.skip(f"{prog} is not installed next to {sys.executable}")
    _assert_lists(_help([str(script), "--help"]), names)
