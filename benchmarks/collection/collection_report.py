"""The report of ``collection.py``: tables, targets and warnings from its results."""

from __future__ import annotations

from typing import Any

from benchmarks.collection.collection_common import CARTPOLE, RAW_NUM_ENVS
from benchmarks.common import fmt_num, format_table, median


def percent(value: float | None, ref: float | None) -> str:
    """``value`` as a percentage of ``ref``, or ``-``."""
    if value is None or not ref:
        return "-"
    return f"{100 * value / ref:.0f}%"


def report(results: dict[str, Any]) -> str:
    """The printed report: one table per measured section, the targets and the notes."""
    out: list[str] = []
    m, s = results["machine"], results["settings"]
    out.append("== ALF collection benchmark ==")
    out.append(f"machine: nproc={m['nproc']} (available: {m['cpus_available']}), "
               f"cpu={m['cpu_model']}")
    out.append(f"         {m['platform']}, python {m['python']}, load average (1/5/15 min) "
               f"at start {m['load_average_1_5_15min']}, at end {m['load_average_at_end']}")
    out.append("versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()))
    out.append(f"mode: {'quick' if s['quick'] else 'full'}; torch threads 1 in every worker")

    raw_ref = raw_envpool_rate(results, RAW_NUM_ENVS)
    env_rows = results.get("env", [])
    if env_rows:
        out.append("")
        out.append(f"1. Raw env steps/s: {CARTPOLE}, {RAW_NUM_ENVS} envs (unless named), "
                   f"constant action, {s['env_seconds']:g}s after {s['env_warmup_s']:g}s "
                   "warm-up")
        rows = []
        for r in env_rows:
            if "skipped" in r or "error" in r:
                rows.append([r["label"], "-", "-", r.get("skipped") or "FAILED"])
                continue
            n = r.get("num_envs", RAW_NUM_ENVS)
            rows.append([r["label"], fmt_num(r["steps_per_s"]),
                         percent(r["steps_per_s"], raw_envpool_rate(results, n)),
                         f"{1e6 * n / r['steps_per_s']:.0f} us/batch step"])
        out.append(format_table(["backend", "steps/s", "vs EnvPool raw (same envs)", "note"],
                                rows))

    samp = results.get("sampler", [])
    if samp:
        out.append("")
        threads = s["sampler_envpool_threads"]
        out.append(f"2. Sampler-only steps/s: {CARTPOLE} via EnvPool (num_threads "
                   f"{'default' if threads is None else threads}), PPO 2x64 tanh policy, "
                   f"unroll_length {s['unroll_length']}, no training, "
                   f"{s['sampler_seconds']:g}s after {s['sampler_warmup_s']:g}s warm-up")
        rows = []
        for r in samp:
            label = ("SyncUnroller.unroll()" if r["mode"] == "sync" else
                     f"AsyncUnroller.collect()+publish(), {r['num_actors']} actors")
            if "error" in r:
                rows.append([label, r["num_envs"], "FAILED", "-", "-", "-"])
                continue
            if r["mode"] == "sync":
                note = (f"per batch step: total {r['per_step_total_us']:.0f} us = env.step "
                        f"{r['per_step_env_us']:.0f}")
                if "per_step_envpool_raw_us" in r:
                    note += (f" (EnvPool {r['per_step_envpool_raw_us']:.0f} + wrapper "
                             f"{r['per_step_env_wrapper_us']:.0f})")
                note += (f" + rollout_step {r['per_step_policy_us']:.0f} + unroller "
                         f"{r['per_step_other_us']:.0f}")
            else:
                lag = r.get("policy_lag_mean")
                wait = r.get("learner_wait_fraction")
                note = (f"startup {r['startup_s']:.1f}s, learner waiting "
                        f"{percent(wait, 1.0) if wait is not None else '-'}, mean policy lag "
                        f"{'-' if lag is None else f'{lag:.2f}'}")
            rows.append([label, r["num_envs"], fmt_num(r["steps_per_s"]),
                         percent(r["steps_per_s"], raw_envpool_rate(results, r["num_envs"])),
                         percent(r["steps_per_s"], raw_ref), note])
        out.append(format_table(["sampler", "envs", "steps/s", "vs EnvPool raw (same envs)",
                                 f"vs EnvPool raw@{RAW_NUM_ENVS}", "note"], rows))
        for r in samp:
            if r.get("profile"):
                out.append("")
                out.append(f"cProfile of SyncUnroller.unroll() ({r['num_envs']} envs), top "
                           "functions by own time:")
                out.append(r["profile"].rstrip())

    double = results.get("double_buffering", [])
    if double:
        out.append("")
        out.append(f"2b. Double buffering, sampler-only: {s['double_buffering_env']} via EnvPool "
                   f"(num_threads 1 per group), {s['double_buffering_envs']} envs, PPO 2x64 "
                   f"tanh policy, unroll_length {s['unroll_length']}, no training")
        rows = []
        for r in double:
            if "error" in r or "skipped" in r:
                rows.append([r["label"], "FAILED", "-"])
                continue
            plain = next((p for p in double if p["label"] == r["label"].split(", double")[0]
                          and "steps_per_s" in p), None)
            rows.append([r["label"], fmt_num(r["steps_per_s"]),
                         "-" if plain is None or plain is r
                         else f"{r['steps_per_s'] / plain['steps_per_s']:.2f}x"])
        out.append(format_table(["sampler", "steps/s", "vs without double buffering"], rows))

    train = results.get("train", [])
    if train:
        hp = s["train"]
        out.append("")
        backend = hp["backend"] + (f", num_threads {hp['envpool_threads']}"
                                   if hp["backend"] == "envpool"
                                   and hp["envpool_threads"] is not None else "")
        out.append(f"3. Training throughput: {hp['hyperparameters']['env_name']} "
                   f"({backend} backend), {hp['envs']} envs, unroll_length "
                   f"{hp['unroll_length']}, {hp['epochs']} epochs x mini-batch "
                   f"{hp['mini_batch']}, 2x64 tanh nets, learner 1 thread, eval off; "
                   f"{s['train_seconds']:g}s measured after {s['train_warmup_s']:g}s warm-up")
        rows = []
        for r in train:
            label = ("sync" + (" (again)" if r.get("repeat") else "") if r["mode"] == "sync"
                     else async_label(r))
            if "error" in r:
                rows.append([label, r.get("algorithm", "-"), "FAILED", *["-"] * 6])
                continue
            lag = r.get("policy_lag_mean")
            collect_name = "collect" if r["mode"] == "sync" else "wait"
            rows.append([
                label, r["algorithm"], fmt_num(r["steps_per_s"]),
                fmt_num(r["steps_per_s_train_time"]),
                f"{collect_name} {100 * r['collect_fraction']:.0f}%",
                f"{100 * r['train_fraction']:.0f}%",
                f"{100 * max(0.0, 1 - r['collect_fraction'] - r['train_fraction']):.0f}%",
                f"{100 * r['train_cpu_share']:.0f}%",
                "-" if lag is None else f"{lag:.2f}",
            ])
        out.append(format_table(["run", "algorithm", "steps/s (wall)", "steps/s (train time)",
                                 "collect/wait", "train", "other", "train CPU share",
                                 "policy lag"], rows))
        out.append("collect/wait: sync: share of wall time in SyncUnroller.unroll (env steps "
                   "+ inference); async: the learner waiting in AsyncUnroller.collect. train: "
                   "share in train_from_unroll. train CPU share: the learner thread's CPU time "
                   "/ wall time in train_from_unroll (below ~90%: the learner was starved of "
                   "CPU, e.g. by an actor or other load on its core).")

    out.append("")
    out.append("targets:")
    for line in results.get("targets", []):
        out.append("  " + line)
    notes = results.get("notes", [])
    if notes:
        out.append("")
        out.extend(notes)
    return "\n".join(out)


def raw_envpool_rate(results: dict[str, Any], num_envs: int) -> float | None:
    """Section 1's raw EnvPool steps/s (default threads) at ``num_envs``, if measured."""
    return next((r.get("steps_per_s") for r in results.get("env", [])
                 if r["backend"] == "raw_envpool"
                 and r.get("num_envs", RAW_NUM_ENVS) == num_envs), None)


def async_ratios(train: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """Each async run with its steps/s over the mean of the nearest sync run before it
    and the nearest after it (either alone where the other is missing): the sync runs
    bracket it against load that drifts during the benchmark."""
    out = []
    for i, r in enumerate(train):
        if r["mode"] != "async":
            continue
        before = next((x for x in reversed(train[:i]) if x["mode"] == "sync"), None)
        after = next((x for x in train[i + 1:] if x["mode"] == "sync"), None)
        around = [x["steps_per_s"] for x in (before, after) if x is not None]
        if around:
            out.append((r, r["steps_per_s"] / (sum(around) / len(around))))
    return out


def async_label(run: dict[str, Any]) -> str:
    """``async, N actor(s)`` plus ``, double buffering`` where it was on."""
    label = f"async, {run['num_actors']} actor(s)"
    return label + (", double buffering" if run.get("double_buffering") else "")


def targets(results: dict[str, Any]) -> list[str]:
    """One line per target: the measured ratio and whether it is met."""
    lines = []
    for r in results.get("sampler", []):
        raw = raw_envpool_rate(results, r["num_envs"])
        if raw and "steps_per_s" in r:
            ratio = r["steps_per_s"] / raw
            lines.append(f"{r['mode']} sampler / raw EnvPool at {r['num_envs']} envs = "
                         f"{ratio:.2f} (target >= 0.50: {'met' if ratio >= 0.5 else 'NOT met'})")
    train = [r for r in results.get("train", []) if "error" not in r]
    syncs = [r for r in train if r["mode"] == "sync"]
    sync = syncs[0] if syncs else None
    ratios: dict[str, list[float]] = {}
    for r, ratio in async_ratios(train):
        ratios.setdefault(f"{async_label(r)} ({r['algorithm']})", []).append(ratio)
    for label, values in ratios.items():
        middle = median(values)
        runs = "" if len(values) == 1 else (
            f", median of {len(values)}: " + ", ".join(f"{v:.2f}x" for v in values))
        lines.append(f"{label} / the sync runs around it ({sync['algorithm']}) training "
                     f"steps/s = {middle:.2f}x{runs} "
                     f"(target >= 1.5x: {'met' if middle >= 1.5 else 'NOT met'})")
    if sync:
        lines.append(f"sync run balance: {100 * sync['collect_fraction']:.0f}% collecting "
                     f"(env + inference), {100 * sync['train_fraction']:.0f}% training "
                     "(aim: about half each; tune --train_epochs / --train_mini_batch)")
    return lines or ["(nothing measured)"]


def autogroup_enabled() -> bool | None:
    """Whether the kernel schedules by session (``kernel.sched_autogroup_enabled``)."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return f.read().strip() == "1"
    except OSError:
        return None


def warnings_about(results: dict[str, Any]) -> list[str]:
    """Warnings about the load on the machine while the benchmark ran."""
    m = results["machine"]
    nproc = m.get("cpus_available") or m.get("nproc") or 1
    loads = [m.get("load_average_1_5_15min"), m.get("load_average_at_end")]
    busiest = max((load[0] for load in loads if load), default=0.0)
    notes = []
    if busiest > 0.5 * nproc:
        notes.append(f"WARNING: the machine was busy (1-min load average up to {busiest:.2f} "
                     f"on {nproc} CPUs): timings are not representative; rerun on an idle "
                     "machine.")
        if m.get("sched_autogroup_enabled"):
            notes.append(
                "WARNING: kernel.sched_autogroup_enabled=1: the scheduler shares the CPUs "
                "fairly between sessions, not processes, so while other sessions are busy "
                "this benchmark's actor processes only split its own session's share with "
                "the learner: async runs then get no more CPU than sync (see 'train CPU "
                "share') and cannot be faster.")
    return notes
