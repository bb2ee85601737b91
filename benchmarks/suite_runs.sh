#!/usr/bin/env bash
# The README's test command on fresh clones, the way issue 32 measures it: one run from a plain
# shell, one under nohup, one beside a CPU-bound process (a pure-Python spin loop started in
# the same session, killed after the run). Each run gets its own fresh clone of HEAD and, unless
# --warm-inductor, an empty torch.compile cache (Inductor's /tmp/torchinductor_$USER, what a
# new machine has). A line per run goes to stdout: kind, exit status, wall seconds, commit,
# pytest's summary line. Logs stay in the work folder, which defaults to the folder holding this
# checkout, so that a clone finds ../shared (the recorded traces) as the checkout does.
#
#   benchmarks/suite_runs.sh [--venv DIR] [--work DIR] [--warm-inductor] [plain|nohup|hog ...] [-- PYTEST_ARGS]
#
# --venv: a virtual environment with the test extras installed (default: .venv of this checkout;
# it is linked into each clone, not reinstalled, and the clone's src/ comes first on PYTHONPATH).
# Arguments after -- are added to pytest's (a quick check of this script: -- tests/test_catalog.py).
# Name the CPU with the times you report.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv="$repo/.venv"
work=$(dirname "$repo")
warm=0
kinds=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) venv=$(cd "$2" && pwd); shift 2 ;;
    --work) work=$2; shift 2 ;;
    --warm-inductor) warm=1; shift ;;
    plain|nohup|hog) kinds+=("$1"); shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "suite_runs.sh: unknown argument '$1' (plain, nohup, hog, --venv DIR, --work DIR, --warm-inductor)" >&2; exit 2 ;;
  esac
done
[ ${#kinds[@]} -gt 0 ] || kinds=(plain nohup hog)
[ -x "$venv/bin/python" ] || { echo "suite_runs.sh: $venv/bin/python: no such virtual environment" >&2; exit 2; }
mkdir -p "$work"
cmd="python -m pytest -n auto --durations=15 -p no:cacheprovider"
for kind in "${kinds[@]}"; do
  clone="$work/pitstop-run-$kind"
  rm -rf "$clone"
  git clone -q "$repo" "$clone"
  ln -s "$venv" "$clone/.venv"
  [ $warm = 1 ] || rm -rf "/tmp/torchinductor_$(id -un)"
  log="$work/pitstop-run-$kind.log"
  start=$(date +%s)
  run=(env PATH="$clone/.venv/bin:$PATH" PYTHONPATH="$clone/src" $cmd "${extra[@]}")
  set +e
  case $kind in
    plain) (cd "$clone" && "${run[@]}") >"$log" 2>&1; rc=$? ;;
    nohup) (cd "$clone" && nohup "${run[@]}") >"$log" 2>&1; rc=$? ;;
    hog)
      python3 -c "while True: pass" &
      hog=$!
      (cd "$clone" && "${run[@]}") >"$log" 2>&1; rc=$?
      kill "$hog"; wait "$hog" 2>/dev/null ;;
  esac
  set -e
  echo "$kind rc=$rc wall=$(( $(date +%s) - start ))s commit=$(git -C "$clone" rev-parse --short HEAD)" \
       "inductor-cache=$([ $warm = 1 ] && echo warm || echo cold) $(tail -1 "$log")"
done
