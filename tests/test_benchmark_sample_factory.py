"""``benchmarks/peers/sample_factory.py``: its Sample Factory log parser and its task table
(no Sample Factory run: that needs the script's own virtual environment)."""

from __future__ import annotations

import os
import sys

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
