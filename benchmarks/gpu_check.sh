#!/usr/bin/env bash
# GPU check (issue 32, item 6): PPO and APPO on Atari Pong (alf/examples/ppo_pong.gin,
# alf/examples/appo_pong.gin) with TrainerConfig.compile=True (on a GPU torch.compile's
# mode "reduce-overhead", i.e. CUDA graphs) against eager: env steps/s, the first
# compile's cost and the evaluation returns by env steps, in one folder.
#
#   bash benchmarks/gpu_check.sh prepare        # HERE (PyPI reachable): wheels into .whl/
#   bash benchmarks/gpu_check.sh run            # on the lent GPU machine, writes $OUT/gpu_check
#   bash benchmarks/gpu_check.sh cpu-rehearsal  # HERE: the `run` flow on the CPU, tiny budgets
#
# The GPU machine is bare and offline: `prepare` downloads the cp312 manylinux x86_64
# wheels of what ALF needs there and its image lacks (gin-config, gymnasium and
# farama-notifications, optree, envpool and dm-env, envpool-assets, ale-py), slims the
# two EnvPool wheels to Atari (the full pair is 115 MB, over the 64 MiB that may travel),
# and prints the device command, which carries .whl (ignored by git):
#   run(command="bash benchmarks/gpu_check.sh run", carry=[".whl"], timeout_s=540)
# `run` ends within GPU_CHECK_TOTAL_S = 465 s (7.75 minutes): wheel install and machine
# facts (~30 s), four trainings under `timeout` (PPO eager, PPO compiled, APPO eager, APPO
# compiled; caps of 85/115 s, cut shorter near the end, SIGTERM then a checkpoint, SIGKILL
# 20 s later), then the summary. The run directories
# stay in /tmp; only $OUT/gpu_check/{summary.json,summary.md,gpu_check.log} come back.
#
# Settings (environment variables; defaults for `run`, then for `cpu-rehearsal`):
#   GPU_CHECK_STEPS        env steps per training run           80000 | 2048
#   GPU_CHECK_MODES        which modes, in order                "eager compiled" | "eager"
#   GPU_CHECK_ALGOS        which configs, in order              "ppo appo"
#   GPU_CHECK_EAGER_S      time cap of an eager run (s)         85 | 240
#   GPU_CHECK_COMPILED_S   time cap of a compiled run (s)       115 | 300
#   GPU_CHECK_TOTAL_S      the whole script's time (s)          465 | 900
#   GPU_CHECK_EVAL_INTERVAL / _EVAL_EPISODES / _SUMMARY_INTERVAL  16/4/5 | 1/1/1 (iterations
#       of 1024 env steps / episodes on as many environments / iterations)
#   GPU_CHECK_RUNS_DIR     where the run directories go         /tmp/gpu_check_runs | a temp dir
#   GPU_CHECK_PPO_BINDINGS / GPU_CHECK_APPO_BINDINGS  extra gin bindings, space-separated:
#       "PPOAlgorithm.clip=0.1" | "" (set GPU_CHECK_PPO_BINDINGS= for ppo_pong.gin as is).
#       ppo_pong.gin anneals the clip with a LinearSchedule, a Python float that the
#       compiled loss guards on: on this CPU (torch 2.13) it recompiled at every iteration,
#       so a compiled PPO run would time its recompilations. 0.1 is the schedule's start,
#       and over 80k of the config's 10M steps the schedule moves it by under 1%.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:-}"
script_start=$(date +%s)

# The packages that travel, pinned to the versions this project's venv runs (2026-11-27).
# Not carried because the GPU image has them: torch, numpy, absl-py, cloudpickle,
# tensorboard, threadpoolctl, typing-extensions, opencv-python-headless, matplotlib,
# pillow, packaging. Not carried because nothing imports them for Atari on Linux:
# envpool's glfw (Windows rendering), types-protobuf (stubs), and the two
# envpool-assets-mujoco-* packages.
WHEELS=(
    gin-config==0.5.0
    gymnasium==1.4.0
    farama-notifications==0.0.6
    optree==0.20.0
    ale-py==0.12.1
    envpool==1.2.5
    envpool-assets==0.3.0
    dm-env==1.6
)
WHL_DIR="${GPU_CHECK_WHL_DIR:-$repo/.whl}"
WHL_PY="${GPU_CHECK_WHL_PY:-3.12}"
MAX_TRAVEL_MB=56

die() { echo "gpu_check: $*" >&2; exit 2; }

# Rewrites the wheel $1 without the files a Pong run does not need, with a new RECORD:
# envpool keeps its Atari extension only, and its entry.py registers the Atari games only
# (each suite's package imports its extension); envpool-assets keeps atari/ (the ROMs)
# and a placeholder in every other folder.
slim_wheel() {
    python3 - "$1" <<'EOF'
import base64, hashlib, os, sys, zipfile

path = sys.argv[1]
name = os.path.basename(path)
with zipfile.ZipFile(path) as src:
    infos = src.infolist()
    record = next(i.filename for i in infos if i.filename.endswith(".dist-info/RECORD"))

    def keep(f: str) -> bool:
        if f.startswith("envpool/"):
            if f.startswith("envpool/vizdoom/bin/"):
                return False
            return not f.endswith(".so") or f.startswith("envpool/atari/")
        if f.startswith("envpool_assets/"):
            parts = f.split("/")
            return len(parts) == 2 or parts[1] == "atari"
        return True

    kept = [i for i in infos if keep(i.filename) and i.filename != record]
    dropped = [i for i in infos if not keep(i.filename)]
    placeholders = sorted(
        {os.path.dirname(i.filename) + "/.gpu_check_slim" for i in dropped
         if i.filename.startswith("envpool_assets/")}
    )
    rows = []
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in kept:
            data = src.read(info)
            if info.filename == "envpool/entry.py":  # registers every suite: Atari only
                data = b'"""Atari only (benchmarks/gpu_check.sh)."""\n\nimport envpool.atari.registration  # noqa: F401\n'
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            rows.append(f"{info.filename},sha256={digest.decode()},{len(data)}")
        for p in placeholders:
            data = b"removed by benchmarks/gpu_check.sh prepare (Pong needs atari/ only)\n"
            dst.writestr(p, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            rows.append(f"{p},sha256={digest.decode()},{len(data)}")
        rows.append(f"{record},,")
        dst.writestr(record, "\n".join(rows) + "\n")
os.replace(tmp, path)
print(f"slimmed {name}: dropped {len(dropped)} files, {os.path.getsize(path) / 2**20:.1f} MiB")
EOF
}

prepare() {
    cd "$repo" || die "no repo at $repo"
    local exclude
    exclude="$(git rev-parse --git-path info/exclude)"
    mkdir -p "$(dirname "$exclude")"
    grep -qxF "/.whl/" "$exclude" 2>/dev/null || echo "/.whl/" >>"$exclude"
    git check-ignore -q .whl/x.whl || die ".whl is not ignored by git ($exclude)"
    mkdir -p "$WHL_DIR"
    rm -f "$WHL_DIR"/*.whl "$WHL_DIR"/*.tmp
    local platforms=() n
    for n in 2_17 2_24 2_27 2_28 2_31 2_34 2_35; do platforms+=(--platform "manylinux_${n}_x86_64"); done
    platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$WHL_PY" \
        --implementation cp "${platforms[@]}" -d "$WHL_DIR" "${WHEELS[@]}" \
        || die "pip download failed"
    local whl
    for whl in "$WHL_DIR"/envpool-*.whl "$WHL_DIR"/envpool_assets-*.whl; do
        slim_wheel "$whl" || die "could not slim $whl"
    done
    echo "== wheels in ${WHL_DIR#"$repo"/} (one version each):"
    (cd "$WHL_DIR" && stat -c '%s %n' -- *.whl | awk '{printf "  %8.2f MiB  %s\n", $1 / 1048576, $2}')
    local dupes
    dupes="$(cd "$WHL_DIR" && printf '%s\n' *.whl | sed 's/-[0-9].*//' | sort | uniq -d)"
    [[ -z "$dupes" ]] || die "several versions of: $dupes"
    local whl_kb tree_kb total_mb
    whl_kb=$(du -sk "$WHL_DIR" | cut -f1)
    # What travels: tracked and untracked-not-ignored files, shared/, and the carried .whl.
    tree_kb=$(git ls-files -z --cached --others --exclude-standard \
        | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1)
    [[ -d shared ]] && tree_kb=$((tree_kb + $(du -sk shared | cut -f1)))
    total_mb=$(((whl_kb + tree_kb) / 1024))
    echo "== size: .whl $((whl_kb / 1024)) MiB + working tree $((tree_kb / 1024)) MiB" \
        "= ${total_mb} MiB of the 64 MiB that may travel"
    ((total_mb <= MAX_TRAVEL_MB)) || die "over ${MAX_TRAVEL_MB} MiB: slim the wheels further"
    echo "== the device command (one call; the script ends within 465 s):"
    echo '   run(command="bash benchmarks/gpu_check.sh run", carry=[".whl"], timeout_s=540)'
}

# The extra bindings of algorithm $1 (space-separated).
binding_list() {
    if [[ "$1" == ppo ]]; then echo "$PPO_BINDINGS"; else echo "$APPO_BINDINGS"; fi
}

# One training run: $1 algo (ppo|appo), $2 mode (eager|compiled).
train_one() {
    local algo="$1" how="$2" name="$1_$2" cap now left rc start wall
    [[ "$how" == compiled ]] && cap="$COMPILED_S" || cap="$EAGER_S"
    now=$(date +%s)
    # Keep 20 s for the last run's checkpoint and 15 s for the summary.
    left=$((script_start + TOTAL_S - now - 35))
    ((cap > left)) && cap=$left
    if ((cap < 30)); then
        echo "== $name: skipped (${left} s of the script's ${TOTAL_S} s left)"
        printf '%s\t%s\t%s\t%s\tskip\t0\t0\t%s\n' "$name" "$algo" "$how" "$DEVICE" \
            "$RUNS/$name" >>"$RUNS/runs.tsv"
        return
    fi
    local compile=False
    [[ "$how" == compiled ]] && compile=True
    echo "== $name: $algo, compile=$compile, device $DEVICE, $STEPS env steps, cap ${cap} s" \
        "($(date -u +%T) UTC; load: $(cut -d' ' -f1-3 /proc/loadavg))"
    local extra=() binding
    for binding in $(binding_list "$algo"); do extra+=(--conf_param="$binding"); done
    rm -rf "${RUNS:?}/$name"
    start=$(date +%s.%N)
    # TORCH_LOGS=recompiles: a compiled loss that recompiles every iteration (a changing
    # Python float in a guard, say) shows in the log and in the summary's count.
    TORCH_LOGS=recompiles timeout -s TERM -k 20 "$cap" "$PY" -m alf.bin.train --traceback \
        --conf="alf/examples/${algo}_pong.gin" --root_dir="$RUNS/$name" \
        --conf_param="TrainerConfig.device='$DEVICE'" \
        --conf_param="TrainerConfig.compile=$compile" \
        --conf_param="TrainerConfig.num_env_steps=$STEPS" \
        --conf_param="TrainerConfig.summary_interval=$SUMMARY_INTERVAL" \
        --conf_param="TrainerConfig.eval_interval=$EVAL_INTERVAL" \
        --conf_param="TrainerConfig.num_eval_episodes=$EVAL_EPISODES" \
        --conf_param="TrainerConfig.num_eval_environments=$EVAL_EPISODES" \
        --conf_param="TrainerConfig.checkpoint_interval=100000" "${extra[@]}" \
        </dev/null 2>&1 | tee "$RUNS/$name.log"
    rc=${PIPESTATUS[0]}
    wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    echo "== $name: exit $rc after ${wall} s"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$algo" "$how" "$DEVICE" "$rc" \
        "$wall" "$cap" "$RUNS/$name" >>"$RUNS/runs.tsv"
}

# The `run` flow; $1: gpu (install the wheels, device cuda) or cpu (this venv, tiny budgets).
run_flow() {
    local where="$1"
    cd "$repo" || die "no repo at $repo"
    export PYTHONUNBUFFERED=1
    mkdir -p "$RUNS"
    if [[ "$where" == gpu ]]; then
        PY=python3
        local wheels=(.whl/*.whl)
        [[ -f "${wheels[0]}" ]] || die "no wheels in .whl/: run 'prepare' here and carry .whl"
        echo "== installing ${#wheels[@]} wheels into /tmp/site"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl || die "wheel install failed"
        export PYTHONPATH="$repo:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
        export TORCHINDUCTOR_CACHE_DIR=/tmp/gpu_check_inductor
    else
        PY="$repo/.venv/bin/python"
        [[ -x "$PY" ]] || PY=python3
        export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
        export TORCHINDUCTOR_CACHE_DIR="$RUNS/inductor_cache"
    fi
    rm -rf "$TORCHINDUCTOR_CACHE_DIR"  # a cold first compile, so its cost shows
    printf 'name\talgo\tmode\tdevice\trc\twall_s\tcap_s\troot_dir\n' >"$RUNS/runs.tsv"
    {
        echo "mode=$where"
        echo "date=$(date -u +%FT%TZ)"
        echo "git=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
        echo "cpus=$(nproc)"
        echo "uptime_start=$(uptime)"
        if command -v nvidia-smi >/dev/null; then
            echo "gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version \
                --format=csv,noheader 2>&1 | head -1)"
        fi
        "$PY" - <<'EOF'
import platform, torch
print(f"python={platform.python_version()}")
print(f"torch={torch.__version__} (cuda {torch.version.cuda}, available {torch.cuda.is_available()})")
if torch.cuda.is_available():
    print(f"cuda_device={torch.cuda.get_device_name(0)}")
EOF
        echo "steps_per_run=$STEPS"
        echo "ppo_bindings=$PPO_BINDINGS"
        echo "appo_bindings=$APPO_BINDINGS"
    } >"$RUNS/env.txt" 2>&1
    echo "== machine"
    command -v nvidia-smi >/dev/null && nvidia-smi
    uptime
    cat "$RUNS/env.txt"
    echo "== imports"
    "$PY" - <<'EOF' || die "the imports failed: a wheel is missing or does not load"
import alf, envpool, gin, gymnasium, optree
import alf.bin.train
env = envpool.make("Pong-v5", env_type="gymnasium", num_envs=2)
obs, _ = env.reset()
print("envpool", envpool.__version__, envpool.__file__, "Pong-v5 obs", obs.shape)
print("gymnasium", gymnasium.__version__, "gin", gin.__file__, "alf", alf.__file__)
env.close()
EOF
    local algo how
    for algo in $ALGOS; do
        for how in $MODES; do
            train_one "$algo" "$how"
        done
    done
    echo "uptime_end=$(uptime)" >>"$RUNS/env.txt"
    echo "== summary ($(( $(date +%s) - script_start )) s so far)"
    "$PY" benchmarks/tools/gpu_check_summary.py --runs_dir "$RUNS" --out_dir "$OUT_DIR"
    local status=$?
    echo "== done in $(($(date +%s) - script_start)) s; in $OUT_DIR:" \
        "$(find "$OUT_DIR" -type f -printf '%P ')"
    return $status
}

case "$mode" in
prepare)
    prepare
    ;;
run | cpu-rehearsal)
    if [[ "$mode" == run ]]; then
        [[ -n "${OUT:-}" ]] || die "\$OUT is not set (the device machine sets it)"
        where=gpu DEVICE=cuda
        STEPS="${GPU_CHECK_STEPS:-80000}" MODES="${GPU_CHECK_MODES:-eager compiled}"
        EAGER_S="${GPU_CHECK_EAGER_S:-85}" COMPILED_S="${GPU_CHECK_COMPILED_S:-115}"
        TOTAL_S="${GPU_CHECK_TOTAL_S:-465}"
        EVAL_INTERVAL="${GPU_CHECK_EVAL_INTERVAL:-16}"
        EVAL_EPISODES="${GPU_CHECK_EVAL_EPISODES:-4}"
        SUMMARY_INTERVAL="${GPU_CHECK_SUMMARY_INTERVAL:-5}"
        RUNS="${GPU_CHECK_RUNS_DIR:-/tmp/gpu_check_runs}"
    else
        OUT="${OUT:-$(mktemp -d /tmp/gpu_check_out.XXXXXX)}"
        where=cpu DEVICE=cpu
        STEPS="${GPU_CHECK_STEPS:-2048}" MODES="${GPU_CHECK_MODES:-eager}"
        EAGER_S="${GPU_CHECK_EAGER_S:-240}" COMPILED_S="${GPU_CHECK_COMPILED_S:-300}"
        TOTAL_S="${GPU_CHECK_TOTAL_S:-900}"
        EVAL_INTERVAL="${GPU_CHECK_EVAL_INTERVAL:-1}"
        EVAL_EPISODES="${GPU_CHECK_EVAL_EPISODES:-1}"
        SUMMARY_INTERVAL="${GPU_CHECK_SUMMARY_INTERVAL:-1}"
        RUNS="${GPU_CHECK_RUNS_DIR:-$(mktemp -d /tmp/gpu_check_runs.XXXXXX)}"
    fi
    ALGOS="${GPU_CHECK_ALGOS:-ppo appo}"
    PPO_BINDINGS="${GPU_CHECK_PPO_BINDINGS-PPOAlgorithm.clip=0.1}"
    APPO_BINDINGS="${GPU_CHECK_APPO_BINDINGS-}"
    OUT_DIR="$OUT/gpu_check"
    mkdir -p "$OUT_DIR"
    run_flow "$where" 2>&1 | tee "$OUT_DIR/gpu_check.log"
    exit "${PIPESTATUS[0]}"
    ;;
*)
    sed -n '2,9p' "$0" >&2
    exit 2
    ;;
esac
