"""``benchmarks/peers/sample_factory.py``: its Sample Factory log parser and its task table
(no Sample Factory run: that needs the script's own virtual environment)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _module():
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from benchmarks.peers import sample_factory

    return sample_factory


LOG = """\
\x1b[36m[2026-11-27 18:40:06,362][22249] Fps is (10 sec: 0.0, 60 sec: 0.0, 300 sec: 0.0). \
Total num frames: 0. Throughput: 0: 0.0. Samples: 0.\x1b[0m
\x1b[36m[2026-11-27 18:40:06,363][22249] Avg episode reward: [(0, '-1.676')]\x1b[0m
Traceback lines and other output are ignored
[2026-11-27 18:41:06,362][22249] Fps is (10 sec: 0.0, 60 sec: 273.1, 300 sec: 250.5). \
Total num frames: 16384. Throughput: 0: 154.6. Samples: 11588.
[2026-11-27 18:41:06,363][22249] Avg episode reward: [(0, '0.52')]
"""


def test_parse_sf_log_scales_returns_back_and_times_them():
    frames, points = _module().parse_sf_log(LOG, 0.01)
    assert frames == 16384
    assert [(round(t), f, round(r, 1)) for t, f, r in points] == [
        (0, 0, -167.6),
        (60, 16384, 52.0),
    ]


def test_every_task_names_an_example_config():
    module = _module()
    for name, bench in module.BENCHES.items():
        assert (module.EXAMPLES / bench.alf_conf).exists(), name
        assert bench.frame_skip >= 1 and bench.sf_reward_scale > 0


def _gin_values(path: Path) -> dict[str, str]:
    """``name = value`` bindings of a gin file and the files it includes (one line each,
    comments dropped; a later binding wins)."""
    values: dict[str, str] = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line.startswith("include"):
            values.update(_gin_values(path.parent / line.split(None, 1)[1].strip("'\"")))
        elif "=" in line and not line.startswith("import"):
            name, value = (part.strip() for part in line.split("=", 1))
            values[name] = value
    return values


def test_sample_factory_makes_alf_updates_per_frame():
    """SF's mini-batch and mini-batches per iteration are ALF's: the same number of updates
    of the same size per frame (SF's --batch_size is its mini-batch, in transitions)."""
    module = _module()
    for name, bench in module.BENCHES.items():
        alf = _gin_values(module.EXAMPLES / bench.alf_conf)
        sf = dict(a[2:].split("=", 1) for a in bench.sf_args)
        envs = int(alf["create_environment.num_parallel_environments"])
        actors = int(alf["AsyncUnroller.num_actors"])
        unroll = int(alf["TrainerConfig.unroll_length"])
        fragments = int(alf["AsyncUnroller.fragments_per_iteration"])
        mini_batch = int(alf["AppoAlgorithm.mini_batch_size"])
        assert int(sf["num_workers"]) * int(sf["num_envs_per_worker"]) == envs, name
        assert int(sf["rollout"]) == unroll, name
        assert int(sf["batch_size"]) == mini_batch, name
        iteration_steps = fragments * unroll * envs // actors
        assert int(sf["batch_size"]) * int(sf["num_batches_per_epoch"]) == iteration_steps, name
        assert int(sf["num_epochs"]) == int(alf["AppoAlgorithm.num_epochs"]), name


def test_network_layouts_match_in_both_frameworks():
    module = _module()
    bench = module.BENCHES["doom_basic"]
    shared = module.with_network(bench, "shared")
    assert "--actor_critic_share_weights=True" in shared.sf_args
    assert (
        "@ActorValueNetwork"
        in _gin_values(module.EXAMPLES / bench.alf_conf)["AppoAlgorithm.actor_value_network_ctor"]
    )
    separate = module.with_network(bench, "separate")
    assert "--actor_critic_share_weights=False" in separate.sf_args
    assert "AppoAlgorithm.actor_value_network_ctor=None" in separate.alf_params


def test_alf_variants_parse_to_a_label_and_bindings():
    import argparse

    import pytest

    sample_factory = _module()
    assert sample_factory.parse_variant(
        "single_pass:AppoAlgorithm.single_pass=True; AppoAlgorithm.value_clip=None"
    ) == ("alf_single_pass", ("AppoAlgorithm.single_pass=True", "AppoAlgorithm.value_clip=None"))
    for bad in ("single_pass", ":AppoAlgorithm.single_pass=True", "label:;"):
        with pytest.raises(argparse.ArgumentTypeError, match="LABEL:BINDING"):
            sample_factory.parse_variant(bad)


def test_time_to_score_ignores_reports_before_any_training():
    sample_factory = _module()
    points = [(15.0, 0, 87.0), (20.0, 4096, -118.9), (135.0, 180224, 54.7), (140.0, 184320, 40.0)]
    summary = sample_factory._summary("sf", 0, 200.0, 600_000, points, 50.0, "log")
    assert (summary["time_to_score_s"], summary["frames_to_score"]) == (135.0, 180224)
    assert summary["final_return"] == 40.0


def test_plot_writes_the_curves_and_their_points(tmp_path):
    import csv
    import json

    _module()
    from benchmarks.peers import sample_factory_plot

    runs = [
        {
            "framework": name,
            "env": "doom_basic",
            "seed": 0,
            "curve": [[5.0, 4096, -150.0], [9.0, 8192, 60.0]],
        }
        for name in ("sample_factory", "alf")
    ]
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"runs": runs}))
    out = tmp_path / "curves.png"
    sample_factory_plot.main([str(results), f"--out={out}", "--score=50"])
    assert out.stat().st_size > 0
    with out.with_suffix(".csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and rows[-1]["framework"] == "alf" and float(rows[-1]["return"]) == 60.0
