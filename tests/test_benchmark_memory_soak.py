"""``benchmarks/collection/memory_soak.py``'s pure parts: the drift summary of its CSV,
its ``/proc`` parsing (on this process) and its ``/dev/shm`` accounting (no training)."""

from __future__ import annotations

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks.collection import memory_soak as soak  # noqa: E402
from benchmarks.collection import proc_memory as probes  # noqa: E402

MIB = soak.MIB


def _rows(values: dict[str, list[float]], step_s: float = 10.0) -> list[dict]:
    """CSV-like rows: per sample one row per kind; ``actor`` values are split over two
    actors, so the summary must add them up."""
    rows = []
    for index in range(len(next(iter(values.values())))):
        common = {"sample": index, "elapsed_s": index * step_s}
        for kind, series in values.items():
            if kind == "actor":
                for _ in range(2):
                    rows.append({**common, "kind": kind, "rss_bytes": series[index] / 2,
                                 "pss_bytes": ""})
            elif kind == "shm":
                rows.append({**common, "kind": kind, "shm_bytes": series[index]})
            else:
                rows.append({**common, "kind": kind, "rss_bytes": series[index],
                             "pss_bytes": series[index] / 2})
    return rows


def test_least_squares_slope():
    assert soak.least_squares_slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert soak.least_squares_slope([5], [1]) == 0.0
    assert soak.least_squares_slope([1, 1], [1, 2]) == 0.0


def test_summarize_drops_the_warmup_and_judges_the_drift():
    xs = [0, 10, 20, 30, 40]
    ys = [50.0, 100.0, 101.0, 102.0, 104.0]
    s = soak.summarize(xs, ys, warmup_s=10)
    assert s["samples"] == 4 and s["start"] == 100.0 and s["end"] == 104.0
    assert s["max"] == 104.0 and s["drift_pct"] == pytest.approx(4.0)
    assert s["slope_per_h"] == pytest.approx(0.13 * 3600)
    assert s["verdict"] == "PASS"
    assert soak.summarize(xs, [100, 100, 100, 100, 106], warmup_s=0)["verdict"] == "FAIL"
    assert soak.summarize(xs, [100, 100, 100, 100, 94], warmup_s=0)["verdict"] == "FAIL"
    assert soak.summarize(xs, ys, warmup_s=40)["verdict"] == "n/a"


def test_summary_sums_the_actors_and_survives_a_csv_round_trip(tmp_path):
    rows = _rows({"learner": [100 * MIB, 100 * MIB, 110 * MIB],
                  "actor": [40 * MIB, 40 * MIB, 41 * MIB],
                  "shm": [30 * MIB, 30 * MIB, 30 * MIB]})
    path = str(tmp_path / "samples.csv")
    soak.write_csv(path, rows[:5])
    soak.write_csv(path, rows[5:])  # appended without a second header
    back = soak.read_csv(path)
    assert len(back) == len(rows)
    for data in (rows, back):
        summaries, table = soak.summary_table(data, warmup_s=0)
        assert summaries["learner RSS"]["drift_pct"] == pytest.approx(10.0)
        assert summaries["learner RSS"]["verdict"] == "FAIL"
        assert summaries["learner PSS"]["end"] == pytest.approx(55 * MIB)
        assert summaries["actors RSS (sum)"]["start"] == pytest.approx(40 * MIB)
        assert summaries["actors RSS (sum)"]["verdict"] == "PASS"
        assert summaries["actors PSS (sum)"]["verdict"] == "n/a"  # no PSS recorded
        assert summaries["/dev/shm (run's files)"]["drift_pct"] == 0.0
        assert "learner RSS" in table and "FAIL" in table and "+10.00" in table


def test_proc_parsing_on_this_process():
    memory = probes.read_status("self")
    assert memory["rss_bytes"] > 1 * MIB
    assert set(memory) >= {"rss_bytes"}
    pss = probes.read_pss(os.getpid())
    assert pss is None or 0 < pss <= memory["rss_bytes"] * 2
    assert "python" in probes.read_cmdline(os.getpid()) or "pytest" in probes.read_cmdline(
        os.getpid())
    ppid, started = probes.read_stat(os.getpid())
    assert ppid == os.getppid() and started > 0
    assert probes.read_stat(2**31 - 1) is None
    assert os.getpid() in probes.descendants(os.getppid())


def test_classify():
    spawn = "python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)"
    tracker = "python -c from multiprocessing.resource_tracker import main;main(4)"
    assert probes.classify(10, 10, 1, "python -m alf.bin.train") == "learner"
    assert probes.classify(11, 10, 10, spawn) == "actor"
    assert probes.classify(12, 10, 10, tracker) == "resource_tracker"
    assert probes.classify(13, 10, 11, spawn) == "other"  # an actor's own worker


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_shm_accounting_finds_unlinked_torch_tensors_once():
    import torch

    before = probes.run_shm(os.getpid(), [os.getpid()])
    a = torch.zeros(10_000, dtype=torch.uint8).share_memory_()
    b = torch.zeros(3, dtype=torch.float64).share_memory_()
    try:
        after = probes.run_shm(os.getpid(), [os.getpid(), os.getpid()])  # pid twice: once
        assert after["shm_files"] - before["shm_files"] == 2
        assert after["shm_bytes"] - before["shm_bytes"] == 10_000 + 24
        assert after["shm_alloc_bytes"] >= after["shm_bytes"] - before["shm_bytes"]
        files = probes.shm_files_of(os.getpid())
        assert any(f.size == 10_000 and "torch_" in f.name for f in files.values())
    finally:
        del a, b


def test_named_run_files(tmp_path):
    for name in ("sem.alf_123-abc", "sem.alf_999-x", "torch_77_1_0", "torch_5_1_0", "other"):
        (tmp_path / name).write_bytes(b"x" * 32)
    assert probes.named_run_files(123, {123, 77}, str(tmp_path)) == [
        "sem.alf_123-abc", "torch_77_1_0"]
    shm = probes.run_shm(123, [], str(tmp_path))  # no live pid: the semaphore alone
    assert (shm["shm_files"], shm["shm_bytes"], shm["shm_sem_files"]) == (1, 32, 1)


def test_shm_accounting_counts_a_named_semaphore_by_its_name():
    import multiprocessing as mp

    config = mp.current_process()._config
    old = config.get("semprefix")
    config["semprefix"] = f"/alf_{os.getpid()}"  # as AsyncUnroller names its semaphores
    try:
        lock = mp.get_context("spawn").Lock()
        shm = probes.run_shm(os.getpid(), [os.getpid()])
        assert shm["shm_sem_files"] >= 1 and shm["shm_bytes"] % 4096 != 0  # 32 B, not a page
        del lock
    finally:
        config["semprefix"] = old
