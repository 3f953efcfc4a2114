#!/usr/bin/env bash
# Rehearses the README's two set-up commands in fresh virtual environments made from a
# fresh clone of this checkout's HEAD, and prints the time and size of each.
#   bash benchmarks/reliability/install_rehearsal.sh [WORKDIR]
# Uses the CPU wheel of torch that this machine has on disk (torch==2.13.0); elsewhere the
# README's command takes it from download.pytorch.org/whl/cpu.
set -euo pipefail
# The checkout this script lies in (it is two levels below the root: benchmarks/reliability/).
repo="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
work="${1:-/tmp/alf_install_rehearsal}"
rm -rf "$work" && mkdir -p "$work"
uptime
git clone -q "$repo" "$work/alf"
cd "$work/alf"
size() { du -sm "$1" | cut -f1; }

echo "== 1. Quickstart: install (torch CPU wheel + ALF) and train ppo_cart_pole.gin"
start=$(date +%s)
python3 -m venv .venv-quick
. .venv-quick/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0
python -m pip install -q -e .
installed=$(date +%s)
echo "install: $((installed - start)) s, venv $(size .venv-quick) MB"
python -m alf.bin.train --conf=alf/examples/ppo_cart_pole.gin --root_dir="$work/ppo_cart_pole" \
    2>&1 | tail -1
echo "train: $(( $(date +%s) - installed )) s"
deactivate

echo "== 2. Tests: install the test extra (every optional simulator) into a fresh venv"
start=$(date +%s)
python3 -m venv .venv-test
. .venv-test/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[test]'
echo "install: $(( $(date +%s) - start )) s, venv $(size .venv-test) MB"
if [[ "${RUN_TESTS:-0}" == 1 ]]; then
    start=$(date +%s)
    python -m pytest -q -n 2 --dist loadfile tests | tail -1
    echo "tests: $(( $(date +%s) - start )) s"
fi
