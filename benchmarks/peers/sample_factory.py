"""ALF's asynchronous APPO against Sample Factory 2 on this machine's CPU.

Both frameworks train the same task with the same network shape (Sample Factory's
'convnet_simple' encoder + 512 fc, ELU, no recurrent core; ``--network=shared``, the
default: one encoder feeding the action and value heads, SF's default and ALF's
``ActorValueNetwork`` as the example configs have it; ``--network=separate``: separate
actor and critic encoders, SF's ``--actor_critic_share_weights=False`` and ALF's
``ActorDistributionNetwork`` + ``ValueNetwork``), the same environment count, rollout,
learning rate (1e-3, constant in both: SF 2.1.1's command line offers no linear decay,
so the ALF config's decay is overridden), clip, entropy bonus and frame skip, and the
same updates: ALF trains each iteration on 4 fragments of 8 environments x 32 steps
(1,024 steps) in 4 mini-batches of 256, which is SF's ``--batch_size=256`` (SF's
mini-batch, in transitions) with ``--num_batches_per_epoch=4``, one epoch. The budget is
the same frame count; runs alternate between the frameworks seed by seed so drifting
load hits both alike. (Before 2026-11-28 SF was given ``--batch_size=1024``, i.e. 4,096
steps per iteration in mini-batches of 1,024: a quarter of ALF's updates per frame.)
Reported per run: env frames/s (agent steps x frame skip, as Sample Factory counts
them), the wall time to a score of the training episodes' average return (SF evaluates
nothing during training, so both are judged by their training episodes), and the load
average (``uptime``) before and after.

Sample Factory pins ``gymnasium<1.0`` and ``numpy<2``, so it runs from its own virtual
environment, which this script builds on first use (``--sf_venv``; torch is pinned to the
version ALF runs with, so both use the same kernels). Never install it into ALF's.

Known differences that remain (SF 2.1.1): SF's PPO targets use GAE without V-trace
(its V-trace path fails in 2.1.1's learner summaries, ``'AttrDict' object has no
attribute 'advantages'``), ALF's APPO uses V-trace; Sample Factory writes ``_vizdoom.ini``
and ``_vizdoom/`` into its working directory (a temporary one here).

Usage::

    python benchmarks/peers/sample_factory.py --envs=doom_basic --frames=400000 --seeds=0,1 \
        --out=/tmp/sf_bench [--sf_venv=~/.cache/alf/sf_venv]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import (  # noqa: E402
    fmt_num,
    fmt_seconds,
    format_table,
    machine_info,
    run_logged,
    uptime,
)

SF_ENV = {"SDL_VIDEODRIVER": "dummy"}  # both frameworks' runs: VizDoom headless

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "alf" / "examples"
SF_VERSION = "2.1.1"


@dataclasses.dataclass(frozen=True)
class Bench:
    """One task in both frameworks.

    Attributes:
        alf_conf: the ALF example config.
        alf_params: extra ``--conf_param`` bindings for ALF.
        sf_module: the Sample Factory training module.
        sf_env: Sample Factory's environment name.
        sf_args: Sample Factory flags giving it ALF's settings.
        frame_skip: frames per agent step.
        score: the training-return threshold (the environment's own score).
        sf_reward_scale: the factor SF's reported returns carry (its reward scaling).
    """

    alf_conf: str
    alf_params: tuple[str, ...]
    sf_module: str
    sf_env: str
    sf_args: tuple[str, ...]
    frame_skip: int
    score: float
    sf_reward_scale: float = 1.0


# appo_doom_basic.gin's settings, as Sample Factory flags.
_DOOM_SF = (
    "--num_workers=2",
    "--num_envs_per_worker=8",
    "--worker_num_splits=2",
    "--batch_size=256",
    "--rollout=32",
    "--num_batches_per_epoch=4",
    "--num_epochs=1",
    "--use_rnn=False",
    "--learning_rate=0.001",
    "--exploration_loss=entropy",
    "--exploration_loss_coeff=0.003",
    "--with_vtrace=False",
    "--ppo_clip_ratio=0.1",
    "--ppo_clip_value=0.2",
    "--max_grad_norm=4.0",
    "--gamma=0.99",
    "--gae_lambda=0.95",
    "--value_loss_coeff=0.5",
    "--nonlinearity=elu",
    "--encoder_conv_architecture=convnet_simple",
    "--actor_critic_share_weights=True",
    "--normalize_input=False",
    "--normalize_returns=False",
    "--decorrelate_envs_on_one_worker=False",
    "--env_frameskip=4",
    "--res_w=128",
    "--res_h=72",
    "--wide_aspect_ratio=False",
)

BENCHES: dict[str, Bench] = {
    "doom_basic": Bench(
        alf_conf="appo_doom_basic.gin",
        alf_params=("TrainerConfig.eval_interval=0", "AppoAlgorithm.learning_rate=1e-3"),
        sf_module="sf_examples.vizdoom.train_vizdoom",
        sf_env="doom_basic",
        sf_args=_DOOM_SF,
        frame_skip=4,
        score=50.0,
        sf_reward_scale=0.01,
    ),
    "doom_defend_center": Bench(
        alf_conf="appo_doom_defend_center.gin",
        alf_params=("TrainerConfig.eval_interval=0", "AppoAlgorithm.learning_rate=1e-3"),
        sf_module="sf_examples.vizdoom.train_vizdoom",
        sf_env="doom_defend_the_center",
        sf_args=_DOOM_SF,
        frame_skip=4,
        score=10.0,
    ),
}

# ALF's separate actor and value networks (the configs share one ``ActorValueNetwork``),
# the layout of Sample Factory's ``--actor_critic_share_weights=False``.
_ALF_SEPARATE_NETWORKS = (
    "AppoAlgorithm.actor_value_network_ctor=None",
    "ActorDistributionNetwork.fc_layer_params=(512,)",
    "ActorDistributionNetwork.activation='elu'",
    "ValueNetwork.fc_layer_params=(512,)",
    "ValueNetwork.activation='elu'",
)


def with_network(bench: Bench, network: str) -> Bench:
    """``bench`` with both frameworks' actor and critic sharing one encoder (``"shared"``:
    the configs as they are) or with separate encoders (``"separate"``)."""
    if network == "shared":
        return bench
    if network != "separate":
        raise ValueError(f"--network must be 'shared' or 'separate', got {network!r}")
    sf_args = tuple(
        "--actor_critic_share_weights=False" if a.startswith("--actor_critic_share_weights") else a
        for a in bench.sf_args
    )
    return dataclasses.replace(
        bench, sf_args=sf_args, alf_params=(*bench.alf_params, *_ALF_SEPARATE_NETWORKS)
    )


_SF_LINE = re.compile(r"^\[(?P<ts>[\d-]+ [\d:]+),\d+\]\[\d+\] (?P<msg>.*)$")
_SF_FRAMES = re.compile(r"Total num frames: (\d+)")
_SF_REWARD = re.compile(r"Avg episode reward: \[\(0, '(-?[\d.]+)'\)\]")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ensure_sf_venv(venv: Path) -> Path:
    """Builds Sample Factory's virtual environment at ``venv`` unless it is there; returns
    its interpreter. torch is pinned to this interpreter's torch version."""
    python = venv / "bin" / "python"
    marker = venv / ".alf_sf_ready"
    if marker.exists():
        return python
    from importlib import metadata

    torch_version = metadata.version("torch")
    print(f"building Sample Factory's venv in {venv} (torch=={torch_version}) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"torch=={torch_version}"], check=True)
    subprocess.run([*pip, f"sample-factory=={SF_VERSION}", "vizdoom>=1.3"], check=True)
    marker.write_text(json.dumps({"torch": torch_version, "sample-factory": SF_VERSION}))
    return python


def run_sf(bench: Bench, python: Path, seed: int, frames: int, out: Path, timeout_s: float):
    """One Sample Factory run; its frames/s and time to the score from its log."""
    work = Path(tempfile.mkdtemp(prefix="sf_", dir=out))
    cmd = [
        str(python),
        "-m",
        bench.sf_module,
        f"--env={bench.sf_env}",
        f"--experiment=seed{seed}",
        f"--train_dir={work / 'train_dir'}",
        "--device=cpu",
        f"--seed={seed}",
        f"--train_for_env_steps={frames}",
        *bench.sf_args,
    ]
    log = out / f"sf_{bench.sf_env}_seed{seed}.log"
    rc, wall = run_logged(cmd, log=log, cwd=work, timeout_s=timeout_s, env=SF_ENV)
    frames_done, points = parse_sf_log(log.read_text(errors="replace"), bench.sf_reward_scale)
    shutil.rmtree(work, ignore_errors=True)
    return _summary("sample_factory", rc, wall, frames_done, points, bench.score, log)


def parse_sf_log(text: str, reward_scale: float) -> tuple[int, list[tuple[float, int, float]]]:
    """Sample Factory's periodic reports in its log: the last ``Total num frames`` and,
    per ``Avg episode reward`` report, (seconds since the log's first line, frames then,
    the return divided by ``reward_scale``)."""
    points: list[tuple[float, int, float]] = []
    first = None
    frames_now = 0
    for raw in text.splitlines():
        match = _SF_LINE.match(_ANSI.sub("", raw))
        if not match:
            continue
        stamp = time.mktime(time.strptime(match["ts"], "%Y-%m-%d %H:%M:%S"))
        first = stamp if first is None else first
        if found := _SF_FRAMES.search(match["msg"]):
            frames_now = int(found[1])
        if found := _SF_REWARD.search(match["msg"]):
            points.append((stamp - first, frames_now, float(found[1]) / reward_scale))
    return frames_now, points


def run_alf(
    bench: Bench,
    seed: int,
    frames: int,
    out: Path,
    timeout_s: float,
    variant: tuple[str, tuple[str, ...]] = ("alf", ()),
):
    """One ALF run; its frames/s and time to the score from ``progress.jsonl``.
    ``variant``: its label and the bindings it adds (:func:`parse_variant`)."""
    label, extra = variant
    name = f"{label}_{Path(bench.alf_conf).stem}_seed{seed}"
    root = out / name
    shutil.rmtree(root, ignore_errors=True)
    params = (
        f"TrainerConfig.num_env_steps={frames // bench.frame_skip}",
        f"TrainerConfig.random_seed={seed}",
        "TrainerConfig.checkpoint_interval=100000",
        *bench.alf_params,
        *extra,
    )
    cmd = [
        sys.executable,
        "-m",
        "alf.bin.train",
        f"--conf={EXAMPLES / bench.alf_conf}",
        f"--root_dir={root}",
        *[f"--conf_param={p}" for p in params],
    ]
    work = Path(tempfile.mkdtemp(prefix="alf_", dir=out))
    log = out / f"{name}.log"
    rc, wall = run_logged(cmd, log=log, cwd=work, timeout_s=timeout_s, env=SF_ENV)
    shutil.rmtree(work, ignore_errors=True)
    points = []
    steps = 0
    progress = root / "progress.jsonl"
    for line in progress.read_text().splitlines() if progress.exists() else []:
        record = json.loads(line)
        if "train/average_return" in record:
            steps = record["env_steps"]
            points.append(
                (record["elapsed_s"], steps * bench.frame_skip, record["train/average_return"])
            )
    return _summary(label, rc, wall, steps * bench.frame_skip, points, bench.score, log)


def parse_variant(text: str) -> tuple[str, tuple[str, ...]]:
    """``LABEL:BINDING[;BINDING...]`` (``--alf_variant``) -> ``("alf_LABEL", bindings)``.

    Raises:
        argparse.ArgumentTypeError: no label or no binding.
    """
    label, _, bindings = text.partition(":")
    params = tuple(b.strip() for b in bindings.split(";") if b.strip())
    if not label.strip() or not params:
        raise argparse.ArgumentTypeError(
            f"--alf_variant={text!r}: expected LABEL:BINDING[;BINDING...], e.g. "
            "single_pass:AppoAlgorithm.single_pass=True"
        )
    return f"alf_{label.strip()}", params


def _summary(framework, rc, wall, frames, points, score, log) -> dict[str, Any]:
    # Reports at frame 0 average the few episodes played before any training (one SF run
    # reported 87 there from one early kill): the score counts from the first update on.
    reached = next(((t, f) for t, f, r in points if r >= score and f > 0), None)
    return {
        "framework": framework,
        "returncode": rc,
        "wall_s": round(wall, 1),
        "frames": frames,
        "frames_per_s": round(frames / wall, 1) if wall > 0 else None,
        "final_return": points[-1][2] if points else None,
        "time_to_score_s": None if reached is None else round(reached[0], 1),
        "frames_to_score": None if reached is None else reached[1],
        "curve": points,
        "log": str(log),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="doom_basic", help=f"comma list of {list(BENCHES)}")
    parser.add_argument("--frames", type=int, default=400_000, help="env frames per run")
    parser.add_argument("--seeds", default="0", help="comma list of seeds")
    parser.add_argument("--out", default="/tmp/alf_sf_bench", help="logs, runs, results.json")
    parser.add_argument("--sf_venv", default="~/.cache/alf/sf_venv", help="SF's venv")
    parser.add_argument("--timeout_s", type=float, default=3600, help="wall limit per run")
    parser.add_argument(
        "--network",
        default="shared",
        choices=("shared", "separate"),
        help="actor and critic sharing one encoder (SF's default; ALF's ActorValueNetwork, "
        "as the example configs) or with separate encoders",
    )
    parser.add_argument(
        "--alf_variant",
        type=parse_variant,
        action="append",
        default=[],
        help="LABEL:BINDING[;BINDING...]: one more ALF run per seed with these bindings, "
        "in the same alternation (repeatable), e.g. single_pass:AppoAlgorithm.single_pass=True",
    )
    args = parser.parse_args(argv)
    out = Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    python = ensure_sf_venv(Path(args.sf_venv).expanduser())
    results: dict[str, Any] = {
        "machine": machine_info(),
        "uptime_start": uptime(),
        "network": args.network,
        "runs": [],
    }
    print(results["uptime_start"], flush=True)
    for name in args.envs.split(","):
        bench = with_network(BENCHES[name], args.network)
        for seed in (int(s) for s in args.seeds.split(",")):
            contenders = ["sf", ("alf", ()), *args.alf_variant]
            for contender in contenders if seed % 2 == 0 else contenders[::-1]:  # by seed
                if contender == "sf":
                    result = run_sf(bench, python, seed, args.frames, out, args.timeout_s)
                else:
                    result = run_alf(bench, seed, args.frames, out, args.timeout_s, contender)
                result.update(env=name, seed=seed, uptime_after=uptime())
                results["runs"].append(result)
                print(
                    f"{name} seed {seed} {result['framework']}: rc {result['returncode']}, "
                    f"{fmt_num(result['frames_per_s'])} frames/s, time to {bench.score:g}: "
                    f"{fmt_seconds(result['time_to_score_s'])} | {result['uptime_after']}",
                    flush=True,
                )
    results["uptime_end"] = uptime()
    rows = [
        [
            f"{r['env']} s{r['seed']} {r['framework']}",
            fmt_num(r["frames"]),
            fmt_num(r["frames_per_s"]),
            fmt_num(r["final_return"], 1),
            fmt_seconds(r["time_to_score_s"]),
            fmt_num(r["frames_to_score"]),
        ]
        for r in results["runs"]
    ]
    header = ["run", "frames", "frames/s", "final return", "s to score", "frames to score"]
    print(format_table(header, rows))
    print(f"uptime at the start: {results['uptime_start']}")
    print(f"uptime at the end: {results['uptime_end']}")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"raw numbers in {out / 'results.json'}")


if __name__ == "__main__":
    main()
