"""``benchmarks/peers/offline.py``'s hyperparameter mapping onto d3rlpy (no d3rlpy run:
that needs the peer's own virtual environment) and ``benchmarks.common.run_logged``."""

from __future__ import annotations

import os
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks.common import run_logged  # noqa: E402
from benchmarks.peers.offline_mapping import (  # noqa: E402
    MappingError,
    d3rlpy_spec,
    read_alf_settings,
)


@pytest.fixture(autouse=True)
def _fresh_gin():
    import gin

    gin.clear_config()
    yield
    gin.clear_config()


def test_cql_maps_its_target_action_onto_d3rlpy():
    spec, rows = d3rlpy_spec("cql", read_alf_settings("cql", []), 10_000)
    assert spec["config"] == "CQLConfig" and spec["fields"]["soft_q_backup"] is False
    assert ("CqlAlgorithm.next_action", "mean", "(target action)", "mean") in rows
    soft = read_alf_settings(
        "cql", ["CqlAlgorithm.backup_entropy=True", "CqlAlgorithm.next_action='sample'"]
    )
    assert d3rlpy_spec("cql", soft, 10_000)[0]["fields"]["soft_q_backup"] is True
    sampled = read_alf_settings("cql", ["CqlAlgorithm.next_action='sample'"])
    with pytest.raises(MappingError, match=r"CqlAlgorithm.next_action = 'sample'"):
        d3rlpy_spec("cql", sampled, 10_000)


def test_iql_maps_every_setting_onto_d3rlpy():
    spec, rows = d3rlpy_spec("iql", read_alf_settings("iql", []), 10_000)
    assert spec["config"] == "IQLConfig"
    assert spec["fields"]["expectile"] == 0.7 and spec["fields"]["weight_temp"] == 3.0
    assert spec["fields"]["max_weight"] == 100.0
    assert any(row[0] == "IqlAlgorithm.squash_mean" for row in rows)


def test_a_setting_d3rlpy_cannot_express_is_refused_by_name():
    settings = read_alf_settings("iql", ["IqlAlgorithm.squash_mean=False"])
    with pytest.raises(MappingError, match=r"IqlAlgorithm.squash_mean = False"):
        d3rlpy_spec("iql", settings, 10_000)


def test_run_logged_stops_the_whole_group_at_its_timeout(tmp_path):
    # a child that starts a grandchild: both must be gone when run_logged returns
    script = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print('started', flush=True); time.sleep(60)"
    )
    start = time.monotonic()
    rc, wall = run_logged(
        [sys.executable, "-c", script], log=tmp_path / "log", cwd=tmp_path, timeout_s=2.0
    )
    assert rc != 0 and wall < 30 and time.monotonic() - start < 30
    assert "started" in (tmp_path / "log").read_text()
