r"""Kill -9 soak: trains PPO, APPO (2 actor processes) and SAC (with its replay buffer in
the checkpoints), SIGKILLs each run at random times, resumes it, and checks what the
kill left.

Usage::

    python benchmarks/reliability/kill_soak.py [--minutes=5] [--root=/tmp/alf_kill_soak] \
        [--seed=0] [--algos=ppo,appo,sac] [--max_delay_s=8]

The algorithms take turns. Each turn starts ``alf.bin.train`` in the algorithm's run
directory (the same command every time, in a session of its own), waits until the run
is training (its ``Resumed from`` line and a progress record after it, or its first
checkpoint for a fresh run), waits
a random time (uniform in ``[0, --max_delay_s]``: kills fall into collection, updates,
evaluation and checkpoint writes alike) and SIGKILLs either the trainer alone or its
whole process group (chosen at random). Then:

* **torn files**: every ``checkpoints/ckpt-*.pt`` must load as an ALF checkpoint, every
  line of ``progress.jsonl`` must be a JSON object, ``status.json`` must parse;
* **orphans**: after a kill of the trainer alone, every other process of its session
  (APPO's actors, the multiprocessing resource tracker) must be gone within 20 s;
* **verified resumes**: the next start must print ``Resumed from <newest checkpoint>
  (iteration I, E env steps)`` with the newest checkpoint that survived the kill and its
  own iteration and env steps;
* **shm left**: named semaphores of killed trainers (``/dev/shm/sem.alf_<pid>-*``) still
  there once the next start is training.

Prints one line per kill and a summary: kills / verified resumes / torn files / orphans.
Exit status 0 when nothing was torn, orphaned or wrongly resumed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "alf" / "examples"
_COMMON = (
    "TrainerConfig.num_env_steps=100000000",
    "TrainerConfig.progress_interval_s=0",
    "TrainerConfig.num_checkpoints=2",
)
ALGOS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ppo": (
        "ppo_cart_pole.gin",
        ("TrainerConfig.checkpoint_interval=3", "TrainerConfig.eval_interval=5",
         "TrainerConfig.num_eval_episodes=2", "TrainerConfig.summary_interval=2"),
    ),
    "appo": (
        "appo_cart_pole.gin",
        ("TrainerConfig.checkpoint_interval=2", "TrainerConfig.eval_interval=10",
         "TrainerConfig.num_eval_episodes=2", "TrainerConfig.num_eval_environments=2",
         "TrainerConfig.summary_interval=4"),
    ),
    "sac": (
        "sac_pendulum.gin",
        ("TrainerConfig.checkpoint_interval=100", "TrainerConfig.eval_interval=400",
         "TrainerConfig.num_eval_episodes=1", "TrainerConfig.summary_interval=50",
         "TrainerConfig.initial_collect_steps=200", "ReplayBuffer.max_length=20000",
         "ReplayBuffer.enable_checkpoint=True", "SacAlgorithm.mini_batch_size=64"),
    ),
}
_RESUMED = re.compile(r"Resumed from (\S+) \(iteration (\d+), (\d+) env steps\)")
_CKPT = re.compile(r"^ckpt-(\d+)\.pt$")
READY_TIMEOUT_S = 180.0
ORPHAN_WAIT_S = 20.0


@dataclass
class Tally:
    """What the soak saw for one algorithm."""

    kills: int = 0
    group_kills: int = 0
    resumes: int = 0
    verified: int = 0
    torn: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    shm_left: int = 0
    last_killed: int | None = None


def _checkpoints(root: Path) -> list[tuple[int, Path]]:
    found = []
    for path in (root / "checkpoints").glob("ckpt-*.pt"):
        match = _CKPT.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def torn_files(root: Path) -> list[str]:
    """Files of the run that a reader cannot use: checkpoints that do not load,
    ``progress.jsonl`` lines that are not JSON objects, a ``status.json`` that does not
    parse."""
    from alf.run_dir.checkpoints import CheckpointError, read_checkpoint_file

    torn = []
    for _, path in _checkpoints(root):
        try:
            read_checkpoint_file(str(path))
        except CheckpointError as err:
            torn.append(f"{path}: {err}")
    progress = root / "progress.jsonl"
    if progress.exists():
        for number, line in enumerate(progress.read_text().splitlines(), 1):
            try:
                ok = isinstance(json.loads(line), dict)
            except ValueError:
                ok = False
            if not ok:
                torn.append(f"{progress}:{number}: {line[:60]!r}")
    status = root / "status.json"
    if status.exists():
        try:
            json.loads(status.read_text())
        except ValueError:
            torn.append(f"{status}: not JSON")
    return torn


def session_members(sid: int) -> list[int]:
    """Live processes (not zombies) of session ``sid``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[4]) == sid:  # state, ppid, pgrp, session
            members.append(int(entry))
    return members


def semaphores_of(pid: int) -> list[str]:
    """Named semaphores of the async learner ``pid`` in ``/dev/shm``."""
    return glob.glob(f"/dev/shm/sem.alf_{pid}-*")


def _records(root: Path) -> int:
    path = root / "progress.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_ready(proc: subprocess.Popen, log: Path, root: Path, resuming: bool) -> str | None:
    """Waits until the run trains: a resumed run has printed its ``Resumed from`` line
    and written a progress record since (an async run's actors are up), a fresh run has
    written its first checkpoint. Returns the ``Resumed from`` line (None: fresh).
    Raises RuntimeError if the run exits first."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    records = _records(root)
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        match = _RESUMED.search(text)
        if match and _records(root) > records:
            return match.group(0)
        if not resuming and _checkpoints(root):
            return None
        if proc.poll() is not None:
            raise RuntimeError(
                f"the run exited ({proc.returncode}) before training:\n{text[-2000:]}"
            )
        time.sleep(0.05)
    raise RuntimeError(f"the run did not start training within {READY_TIMEOUT_S:.0f} s ({log})")


def expected_resume(root: Path) -> tuple[str, int, int] | None:
    """(file, iteration, env steps) of the newest checkpoint, which the next start must
    resume from (read before it starts: it rotates old checkpoints away)."""
    from alf.run_dir.checkpoints import read_checkpoint_file

    newest = _checkpoints(root)
    if not newest:
        return None
    saved = read_checkpoint_file(str(newest[-1][1]))
    return str(newest[-1][1].resolve()), saved.iteration, saved.env_steps


def check_resume(line: str | None, expected: tuple[str, int, int] | None) -> str | None:
    """What is wrong with a start's ``Resumed from`` line given the newest checkpoint
    that survived the kill (None: right)."""
    if expected is None:
        return None if line is None else f"resumed without a checkpoint: {line}"
    if line is None:
        return f"started fresh although {expected[0]} exists"
    match = _RESUMED.search(line)
    assert match is not None
    got = (os.path.abspath(match.group(1)), int(match.group(2)), int(match.group(3)))
    return None if got == expected else f"resumed {got}, expected {expected}"


def one_turn(name: str, root: Path, rng: random.Random, tally: Tally, max_delay_s: float) -> str:
    """Starts the run, verifies its resume, SIGKILLs it at a random time and checks the
    damage; returns the kill's report line."""
    conf, params = ALGOS[name]
    cmd = [sys.executable, "-m", "alf.bin.train", f"--root_dir={root}", f"--conf={EXAMPLES / conf}"]
    cmd += [f"--conf_param={p}" for p in (*_COMMON, *params)]
    expected = expected_resume(root)
    log = root.parent / f"{name}.start-{tally.kills:03d}.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True
        )
    try:
        line = wait_ready(proc, log, root, resuming=expected is not None)
    except BaseException:  # never leave a run training behind the soak
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    verdict = "-"
    if expected is not None:
        tally.resumes += 1
        wrong = check_resume(line, expected)
        if wrong:
            tally.wrong.append(f"{name}: {wrong}")
            verdict = "WRONG"
        else:
            tally.verified += 1
            verdict = f"verified at iteration {expected[1]}"
    if tally.last_killed is not None:
        tally.shm_left += len(semaphores_of(tally.last_killed))
    time.sleep(rng.uniform(0.0, max_delay_s))
    group = rng.random() < 0.5
    (os.killpg if group else os.kill)(proc.pid, signal.SIGKILL)
    proc.wait()
    tally.kills += 1
    tally.group_kills += group
    tally.last_killed = proc.pid
    left = session_members(proc.pid)
    deadline = time.monotonic() + ORPHAN_WAIT_S
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = session_members(proc.pid)
    if left:
        tally.orphans += [f"{name}: pid {pid} of killed {proc.pid}" for pid in left]
        os.killpg(proc.pid, signal.SIGKILL)
    torn = torn_files(root)
    tally.torn += torn
    newest = _checkpoints(root)
    return (
        f"{name}: kill {tally.kills} ({'group' if group else 'trainer'}) pid {proc.pid}; "
        f"newest checkpoint {newest[-1][0] if newest else None}; torn {len(torn)}; "
        f"orphans {len(left)}; its start's resume: {verdict}"
    )


def main(argv: list[str] | None = None) -> int:
    """Runs the soak; returns 0 when every check held."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--root", default="/tmp/alf_kill_soak")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--algos", default="ppo,appo,sac")
    parser.add_argument("--max_delay_s", type=float, default=8.0)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.algos.split(",") if n.strip()]
    unknown = [n for n in names if n not in ALGOS]
    if unknown:
        parser.error(f"--algos: unknown {unknown}; known: {', '.join(ALGOS)}")
    base = Path(args.root)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    tallies = {name: Tally() for name in names}
    started = time.monotonic()
    while time.monotonic() - started < 60.0 * args.minutes:
        for name in names:
            print(one_turn(name, base / name, rng, tallies[name], args.max_delay_s), flush=True)
    total = Tally()
    print(f"\n{'algo':<6} {'kills':>5} {'group':>5} {'verified resumes':>18} {'torn':>5} "
          f"{'orphans':>7} {'shm left':>8}")
    for name, t in tallies.items():
        print(f"{name:<6} {t.kills:>5} {t.group_kills:>5} {f'{t.verified} of {t.resumes}':>18} "
              f"{len(t.torn):>5} {len(t.orphans):>7} {t.shm_left:>8}")
        total.kills += t.kills
        total.resumes += t.resumes
        total.verified += t.verified
        total.torn += t.torn
        total.orphans += t.orphans
        total.wrong += t.wrong
        total.shm_left += t.shm_left
    for line in [*total.torn, *total.orphans, *total.wrong]:
        print(f"  {line}")
    minutes = (time.monotonic() - started) / 60.0
    print(
        f"kills: {total.kills} | verified resumes: {total.verified} of {total.resumes} | "
        f"torn files: {len(total.torn)} | orphans: {len(total.orphans)} | "
        f"shm entries left: {total.shm_left} ({minutes:.1f} min)"
    )
    return 0 if not (total.torn or total.orphans or total.wrong) else 1


if __name__ == "__main__":
    sys.exit(main())
