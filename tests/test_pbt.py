"""Tests of ``alf.bin.pbt``: the round state machine through a fake launcher (the exploit
plan, copies and lineage; a crash at every write of the state, then a rerun, gives the
uninterrupted lineage; a killed member is resumed), then the real command on CartPole: a
2-round population of 2 (a copied checkpoint, a changed hyperparameter in the member's
config, the lineage, the resume check strict for every other binding, the plot), a rerun
that redoes nothing, kill -9 of the controller mid-round (no orphan, the rerun
completes), and bad input (one line, status 2, nothing written)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_cli import (
    CONF,
    error_lines,
    popen_cli,
    run_cli,
    snapshot,
    stop_process,
    train_cmd,
    wait_for,
)

from alf.experiments import pbt_state
from alf.experiments.launcher import RunSpec
from alf.experiments.pbt import Population, plan_exploit, rank_members
from alf.experiments.pbt_space import MutationError, parse_mutation
from alf.experiments.pbt_state import PopulationSettings, PopulationState
from alf.run_dir import layout

LR = "PPOAlgorithm.learning_rate"
MUTATE = f"--mutate={LR}=loguniform(1e-4, 1e-2)"
# Constants for PBT (the example's schedules would follow each round's budget), a small
# evaluation, one epoch: a member's round is a few seconds, mostly start-up.
PARAMS = (
    f"{LR}=1e-3",
    "PPOAlgorithm.clip=0.2",
    "PPOAlgorithm.num_epochs=1",
    "TrainerConfig.num_eval_episodes=2",
    "TrainerConfig.num_eval_environments=2",
)


def pbt_cmd(root: Path, *flags: str, params: tuple[str, ...] = PARAMS) -> list[str]:
    cmd = [sys.executable, "-m", "alf.bin.pbt", f"--conf={CONF}", f"--root_dir={root}"]
    return cmd + [f"--conf_param={p}" for p in params] + list(flags)


ROUNDS_OF_TWO = ("--population=2", "--interval=512", "--num_env_steps=1024", "--jobs=2")


def lineage(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "lineage.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------ fake launcher
class FakeJob:
    """A member 'trained' at once: its status, an evaluation whose return is the
    member's learning rate (the higher the better) and a checkpoint naming what it
    resumed from."""

    def __init__(self, spec: RunSpec, exit_code: int = 0) -> None:
        self.spec, self.pid, self.adopted, self.killed = spec, 1, False, False
        self.log_path = os.path.join(spec.run_dir, "train.log")
        self.exit_code = exit_code
        params = dict(p.split("=", 1) for p in spec.conf_params)
        budget = int(params["TrainerConfig.num_env_steps"])
        lr = float(spec.conf_params[-1].split("=", 1)[1])  # the mutated value comes last
        directory = os.path.join(spec.run_dir, "checkpoints")
        os.makedirs(directory, exist_ok=True)
        before = sorted(os.listdir(directory))
        resumed = open(os.path.join(directory, before[-1])).read() if before else "fresh"
        if exit_code:  # killed before the end: nothing recorded
            return
        with open(os.path.join(directory, f"ckpt-{budget // 256}.pt"), "w") as f:
            f.write(f"{spec.run_dir} at {budget} (from {resumed})")
        layout.write_config(spec.run_dir, f"{LR} = {lr}\n")  # what the run used
        with open(os.path.join(spec.run_dir, "progress.jsonl"), "a") as f:
            f.write(json.dumps({"env_steps": budget, "eval/average_return": lr}) + "\n")
        layout.write_status(spec.run_dir, "finished", env_steps=budget, num_env_steps=budget)

    def poll(self) -> int:
        return self.exit_code

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def wait(self, timeout_s: float | None = None) -> int:
        return self.exit_code

    def after_kill(self) -> None: ...

    def last_error_line(self) -> str:
        return ""


class FakeLauncher:
    def __init__(self, kill_first: set[int] = frozenset()) -> None:
        self.kill_first, self.launched = set(kill_first), []

    def launch(self, spec: RunSpec) -> FakeJob:
        index = int(spec.run_dir.rsplit("-", 1)[1])
        self.launched.append(index)
        if index in self.kill_first:
            self.kill_first.discard(index)
            return FakeJob(spec, exit_code=-9)
        return FakeJob(spec)


def fake_population(
    root: Path, launcher: FakeLauncher, lines: list[str], name: str = LR
) -> Population:
    settings = PopulationSettings(
        conf=str(CONF),
        conf_params=(),
        mutations=(f"{name}=loguniform(0.0001, 0.01)",),
        population=4,
        interval=512,
        num_env_steps=1536,
        seed=3,
        quantile=0.25,
        perturb=(0.8, 1.25),
        resample_probability=0.25,
    )
    return Population(
        settings=settings,
        mutations=[parse_mutation(settings.mutations[0])],
        root_dir=str(root),
        jobs=2,
        launcher=launcher,
        out=lines.append,
        poll_s=0.0,
    )


def test_ranking_and_the_exploit_plan():
    assert rank_members([1.0, None, 3.0, 3.0]) == [2, 3, 0, 1]  # ties by index, None last
    pairs = plan_exploit(
        [5.0, 1.0, 9.0, 7.0, 2.0, 3.0, 8.0, 4.0], quantile=0.25, rng=random.Random(0)
    )
    assert [member for member, _ in pairs] == [1, 4]  # the bottom 2 of 8 ...
    assert {donor for _, donor in pairs} <= {2, 6}  # ... copy the top 2
    assert plan_exploit([3.0, 2.0, 1.0], quantile=0.5, rng=random.Random(0)) == [(2, 0)]
    mutation = parse_mutation(f"{LR}=choice(1e-4, 3e-4, 1e-3)")
    assert mutation.initial_values(4, random.Random(0)) == [1e-4, 3e-4, 1e-3, 1e-4]
    assert mutation.perturb(3e-4, random.Random(0), factors=(1.25,)) == 1e-3  # a neighbour
    with pytest.raises(MutationError, match="not a number"):
        parse_mutation("create_environment.env_name=choice('a', 'b')")


def test_rounds_copies_and_lineage_through_a_fake_launcher(tmp_path):
    lines: list[str] = []
    population = fake_population(tmp_path / "pop", FakeLauncher(), lines)
    assert population.run() == 0
    records = lineage(tmp_path / "pop")
    assert [(r["round"], r["member"]) for r in records] == [
        (r, m) for r in range(3) for m in range(4)
    ]
    for record in records[:8]:  # after rounds 1 and 2: the worst member copies the best
        if record["rank"] == 3:
            donor = record["copied_from"]
            assert records[record["round"] * 4 + donor]["rank"] == 0
            assert (
                record["checkpoint"]
                == f"member-{donor}/checkpoints/ckpt-{2 * (record['round'] + 1)}.pt"
            )
            assert (
                record["next_hyperparameters"]
                != records[record["round"] * 4 + donor]["hyperparameters"]
            )
            nxt = records[(record["round"] + 1) * 4 + record["member"]]
            assert nxt["hyperparameters"] == record["next_hyperparameters"]
        else:
            assert record["copied_from"] is None
    assert all(r["next_hyperparameters"] is None for r in records[8:])
    # The copy is what the member resumed from.
    member = next(r["member"] for r in records[:4] if r["copied_from"] is not None)
    donor = records[member]["copied_from"]
    final = (tmp_path / "pop" / f"member-{member}" / "checkpoints" / "ckpt-4.pt").read_text()
    assert f"(from {tmp_path / 'pop' / f'member-{donor}'} at 512" in final
    assert json.loads((tmp_path / "pop" / "member-0" / "mutable_bindings.json").read_text())[
        "bindings"
    ] == [LR, "TrainerConfig.random_seed"]


def test_a_crash_at_any_write_then_a_rerun_gives_the_uninterrupted_lineage(tmp_path, monkeypatch):
    assert fake_population(tmp_path / "ref", FakeLauncher(), []).run() == 0
    expected = lineage(tmp_path / "ref")
    save = PopulationState.save
    writes = []
    monkeypatch.setattr(PopulationState, "save", lambda *a: (writes.append(1), save(*a)))
    assert fake_population(tmp_path / "count", FakeLauncher(), []).run() == 0
    assert len(writes) == 6  # open; per round: its end and (but the last) its exploit
    for crash_at in range(1, len(writes) + 1):
        calls = []

        def crashing_save(self, root_dir, calls=calls, crash_at=crash_at):
            calls.append(1)
            if len(calls) == crash_at:
                raise KeyboardInterrupt  # as if killed before this write
            save(self, root_dir)

        monkeypatch.setattr(PopulationState, "save", crashing_save)
        root = tmp_path / f"crash-{crash_at}"
        with pytest.raises(KeyboardInterrupt):
            fake_population(root, FakeLauncher(), []).run()
        monkeypatch.setattr(PopulationState, "save", save)
        assert fake_population(root, FakeLauncher(), []).run() == 0
        assert lineage(root) == expected, crash_at
        assert PopulationState.load(str(root)).phase == pbt_state.DONE


def test_a_killed_member_is_resumed(tmp_path):
    lines: list[str] = []
    launcher = FakeLauncher(kill_first={1})
    assert fake_population(tmp_path / "pop", launcher, lines).run() == 0
    assert "pbt: member-1 killed by signal 9 before the end of the round; resuming it" in lines
    assert launcher.launched.count(1) == 4 and len(lineage(tmp_path / "pop")) == 12


def test_a_mutation_the_members_never_use_stops_the_population(tmp_path):
    # Adam.lr is a parameter of a configurable, but the config never builds Adam through
    # gin: refused once the first round shows it (in no member's operative config.gin).
    population = fake_population(tmp_path / "pop", FakeLauncher(), [], name="Adam.lr")
    with pytest.raises(MutationError, match="the members never used Adam.lr"):
        population.run()
    assert not lineage(tmp_path / "pop")


# ------------------------------------------------------------------ the command
@pytest.fixture(scope="module")
def population(tmp_path_factory):
    root = tmp_path_factory.mktemp("pbt") / "pop"
    proc = run_cli(pbt_cmd(root, MUTATE, *ROUNDS_OF_TWO), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root, proc


def test_a_population_copies_a_checkpoint_and_changes_a_hyperparameter(population):
    root, proc = population
    assert "warning" not in proc.stderr  # constants, no schedules
    records = lineage(root)
    assert [(r["round"], r["member"]) for r in records] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    copy = next(r for r in records if r["copied_from"] is not None)
    member, donor = copy["member"], copy["copied_from"]
    assert copy["round"] == 0 and copy["rank"] == 1 and records[donor]["rank"] == 0
    checkpoint = f"member-{donor}/checkpoints/ckpt-2.pt"
    assert copy["checkpoint"] == checkpoint
    copied = root / f"member-{member}" / "checkpoints" / "ckpt-2.pt"
    assert copied.read_bytes() == (root / checkpoint).read_bytes()
    log = (root / f"member-{member}" / "train.log").read_text()
    assert f"Resumed from {copied} (iteration 2, 512 env steps)" in log
    # The member trained round 2 with the donor's learning rate, perturbed.
    new_lr = copy["next_hyperparameters"][LR]
    assert new_lr != copy["hyperparameters"][LR] and 1e-4 <= new_lr <= 1e-2
    assert records[2 + member]["hyperparameters"][LR] == new_lr
    config = layout.read_bindings(str(root / f"member-{member}"))
    assert float(config[LR]) == new_lr
    best = next(r for r in records[2:] if r["rank"] == 0)
    assert proc.stdout.strip().splitlines()[-1] == f"{LR} = {best['hyperparameters'][LR]!r}"


def test_a_rerun_redoes_nothing(population):
    root, _ = population
    before = snapshot(root)
    again = run_cli(pbt_cmd(root, MUTATE, *ROUNDS_OF_TWO), timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "all 2 rounds done" in again.stdout and "started" not in again.stdout
    assert snapshot(root) == before


def test_a_root_dir_of_another_population_is_refused(population):
    root, _ = population
    before = snapshot(root)
    flags = ("--population=3", "--interval=512", "--num_env_steps=1024")
    proc = run_cli(pbt_cmd(root, MUTATE, *flags), timeout=120)
    assert proc.returncode == 2
    errors = error_lines(proc.stderr, "alf.bin.pbt")
    assert len(errors) == 1 and "holds a population with a different --population" in errors[0]
    assert snapshot(root) == before


def test_the_resume_check_stays_strict_but_for_the_mutable_bindings(population, tmp_path):
    root, _ = population
    member = tmp_path / "member"
    os.system(f"cp -r {root / 'member-1'} {member}")
    cmd = train_cmd(
        member,
        *PARAMS,
        f"{LR}=0.5",  # mutable: accepted
        "TrainerConfig.random_seed=99",  # a member keeps its seed on a copy: accepted
        "TrainerConfig.num_env_steps=2048",
        "PPOAlgorithm.gamma=0.5",  # anything else: refused
    )
    proc = run_cli(cmd)
    assert proc.returncode == 2
    errors = error_lines(proc.stderr, "alf.bin.train")
    assert len(errors) == 1 and "config differs" in errors[0]
    listed = proc.stderr[proc.stderr.index(errors[0]) :].splitlines()[1:]
    assert [line.strip() for line in listed if line.startswith("  ")] == [
        "PPOAlgorithm.gamma: 0.98 -> 0.5"
    ]


def test_plot_draws_the_population(population, tmp_path):
    root, _ = population
    out = tmp_path / "pop.png"
    proc = run_cli([sys.executable, "-m", "alf.bin.plot", str(root), f"--out={out}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "population of 2, 1 copy" in proc.stdout and out.stat().st_size > 0
    rows = (tmp_path / "pop.csv").read_text().splitlines()
    assert rows[0] == "member,env_steps,return" and {r[0] for r in rows[1:]} == {"0", "1"}


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line names ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and _alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_kill_9_of_the_controller_mid_round_then_a_rerun_completes(tmp_path):
    root = tmp_path / "pop"
    proc, out_path, _ = popen_cli(pbt_cmd(root, MUTATE, *ROUNDS_OF_TWO), tmp_path / "logs")
    statuses = [root / f"member-{i}" / "status.json" for i in range(2)]
    try:
        wait_for(
            lambda: any(
                (layout.read_json(str(s)) or {}).get("state") == "running" for s in statuses
            ),
            timeout=240,
            proc=proc,
            what="a member training",
        )
        proc.kill()  # kill -9 of the controller alone
        proc.wait(timeout=30)
    finally:
        stop_process(proc)
    # The members get SIGTERM from the kernel: they checkpoint and exit.
    wait_for(lambda: not _processes_naming(str(root)), timeout=120, what="the members to exit")
    again = run_cli(pbt_cmd(root, MUTATE, *ROUNDS_OF_TWO), timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "round 1 of 2 (train)" in again.stdout
    assert not _processes_naming(str(root))
    records = lineage(root)
    assert [(r["round"], r["member"]) for r in records] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert sum(r["copied_from"] is not None for r in records) == 1
    assert PopulationState.load(str(root)).phase == pbt_state.DONE
    for index in range(2):
        status = layout.read_status(str(root / f"member-{index}"))
        assert status["state"] == "finished" and status["env_steps"] >= 1024


def test_help_names_the_console_script():
    code = "import sys; sys.argv = ['alf-pbt', '--help']; from alf.bin.pbt import run; run()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: alf-pbt ") and "--mutate SPACE" in proc.stdout


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "flags, culprit",
    [
        (["--population=1", MUTATE, "--interval=512"], "--population must be >= 2"),
        (["--population=2", MUTATE, "--interval=0"], "--interval must be >= 1"),
        (["--population=2", MUTATE, "--interval=abc"], "invalid int value: 'abc'"),
        (["--population=2", MUTATE, "--interval=100"], "less than one training iteration"),
        (["--population=2", MUTATE, "--interval=4096", "--num_env_steps=1024"], "more than"),
        (
            ["--population=2", f"--mutate={LR}e=uniform(0.1, 0.3)", "--interval=512"],
            "learning_ratee",
        ),
        (
            ["--population=2", "--mutate=NoSuchThing.lr=uniform(0.1, 0.3)", "--interval=512"],
            "NoSuchThing",
        ),
        (
            [
                "--population=2",
                "--mutate=create_environment.env_name=uniform(1, 2)",
                "--interval=512",
            ],
            "not a number",
        ),
        (
            [
                "--population=2",
                "--mutate=ActorDistributionNetwork.std_transform=uniform(1, 2)",
                "--interval=512",
            ],
            "must be one of 'softplus', 'exp'",
        ),
        (
            [
                "--population=2",
                "--mutate=create_environment.env_name=choice('A-v1', 'B-v1')",
                "--interval=512",
            ],
            "not a number",
        ),
        (
            ["--population=2", "--mutate=PPOAlgorithm.num_epochs=uniform(1, 4)", "--interval=512"],
            "must be an int",
        ),
    ],
)
def test_bad_input_is_one_line_status_2_and_nothing_written(tmp_path, flags, culprit):
    root = tmp_path / "pop"
    proc = run_cli(pbt_cmd(root, *flags), timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = error_lines(proc.stderr, "alf.bin.pbt")
    assert len(errors) == 1 and culprit in errors[0], proc.stderr
    assert not root.exists()


def test_a_schedule_bound_where_a_number_is_mutated_is_refused(tmp_path):
    root = tmp_path / "pop"
    proc = run_cli(pbt_cmd(root, MUTATE, "--population=2", "--interval=512", params=()))
    assert proc.returncode == 2
    errors = error_lines(proc.stderr, "alf.bin.pbt")
    assert (
        len(errors) == 1 and "binds PPOAlgorithm.learning_rate = @lr/LinearSchedule()" in errors[0]
    )
    assert not root.exists()
