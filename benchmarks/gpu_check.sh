#!/usr/bin/env bash
# One GPU check in one short run: every CUDA path of pitstop, timed, inside a hard budget.
#
#   benchmarks/gpu_check.sh [--budget SECONDS] [--only a,b,...] [--python PY] [--rehearse-on-cpu] [DIR]
#
# --rehearse-on-cpu runs every stage on the CPU at small sizes (a check of this script itself,
# minutes on 2 cores); --only selftest,engine,... runs only those stages.
# Run from the repository root. Everything goes under DIR (default ./gpu_check_out; keep it out of
# $OUT, whose files all come back, at most 8 of them); a command's stdout is its file, its stderr
# that file + .err. At the end
# DIR is packed into ONE file, $OUT/gpu_check.tar.gz (beside DIR when $OUT is unset), and
# DIR/summary.txt (one line per stage: status, exit code, seconds, cap) is copied beside it and
# printed. The first file, 00_machine.txt, names the GPU, the driver, torch and CUDA.
#
# Stages, in this order (each under its own `timeout`, each cap also cut to what is left of the
# whole budget, default 470 s; a stage that fails is logged with its exit code and the script
# goes on; without CUDA the CUDA stages are skipped, each with its reason, and it exits 0):
#   machine       00_machine.txt: nvidia-smi, driver, torch, CUDA, cuDNN, Python, CPU, commit
#   selftest      pitstop selftest --device cuda (doctor + probes on CUDA events, trace of the
#                 live trace, compare, and pitstop bench over every benchmark: bench/gpu.md +
#                 bench/gpu.json, the page docs/bench/gpu.md is filled from)          (b) + (c)
#   bench         pitstop bench --device cuda alone, only when the selftest left no bench JSON (c):
#                 bench/gpu.md, gpu.json, gpu.html; at the end benchmarks/gpu_page.py writes the
#                 docs-ready page from the whole run: docs/gpu.md + docs/gpu.json (copy to docs/bench/)
#   engine        benchmarks/engine_vs_raw.py: pitstop.fit vs a raw loop, bf16 + channels_last +
#                 fused AdamW + torch.compile, ratio printed                              (e)
#   pytest        the tests that take a CUDA path: pytest -k "cuda or gpu" (marker `cuda`,
#                 or cuda/gpu in the test's or its module's name)                         (a)
#   doctor_loops  benchmarks/gpu_doctor_loops.py --out DIR, when the file exists          (f)
#   examples      doctor (+ trace) on pitstop.examples.gpu_cnn and .gpu_transformer, pitstop
#                 trace on both traces, pitstop tune on gpu_cnn                           (d)
#   tune_path     benchmarks/gpu_tune_path.py --out DIR, when the file exists             (f)
#   oom           benchmarks/gpu_oom.py --out DIR: a GPT that runs out of memory, the doctor's
#                 explanation, then the batch it predicts, run (issue 44)                 (f)
#   fsdp          pitstop doctor --nproc-per-node N --trace on benchmarks/gpu_fsdp.py (FSDP2 per block, bf16
#                 all-gathers; N = the GPUs, at most 2), then pitstop trace on its traces: the units, and
#                 with N >= 2 the all-gathers / reduce-scatters classified and their exposed time  (issue 43)
#
# When a .whl folder exists (msgspec, libcst, ... built elsewhere), they are installed first
# into /tmp/site with pip --no-index and put on PYTHONPATH before src/.
set -u
{  # the whole script is one group: bash parses it all before running, so an edit mid-run cannot break it

TOTAL=470
ONLY=""
DEV=cuda
PY=python3
DIR=""
while [ $# -gt 0 ]; do
    case "$1" in
        --budget) TOTAL="$2"; shift 2 ;;
        --only) ONLY=",$2,"; shift 2 ;;
        --python) PY="$2"; shift 2 ;;
        --rehearse-on-cpu) DEV=cpu; shift ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        -*) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
        *) DIR="$1"; shift ;;
    esac
done
START=$(date +%s)
RESERVE=15  # seconds kept for packing

WHEELS="no .whl folder: nothing installed"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
            > /tmp/gpu_check_pip.log 2>&1; then
        export PYTHONPATH=/tmp/site:$PWD/src
        WHEELS="installed into /tmp/site: $(cd .whl && ls *.whl | tr '\n' ' ')"
    else
        export PYTHONPATH=$PWD/src
        WHEELS="pip install of .whl/*.whl FAILED: $(tail -3 /tmp/gpu_check_pip.log | tr '\n' ' ')"
    fi
else
    export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
fi

DIR=${DIR:-./gpu_check_out}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
SUMMARY="$DIR/summary.txt"
: > "$SUMMARY"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
note() { echo "$*" | tee -a "$SUMMARY"; }
wanted() { [ -z "$ONLY" ] || [[ "$ONLY" == *",$1,"* ]]; }

# run NAME CAP OUT CMD... : CMD under `timeout` (cap cut to the budget left), stdout to OUT, stderr to OUT.err
run() {
    local name=$1 cap=$2 log=$3; shift 3
    local left=$(( START + TOTAL - RESERVE - $(date +%s) ))
    local t=$cap
    [ "$left" -lt "$t" ] && t=$left
    if [ "$t" -lt 10 ]; then
        note "$(printf '%-26s skipped  no time left in the %ss budget' "$name" "$TOTAL")"
        return 0
    fi
    local s rc
    s=$(now)
    mkdir -p "$(dirname "$log")"
    timeout -k 10 "$t" "$@" > "$log" 2> "$log.err"
    rc=$?
    local status=ok
    [ $rc -ne 0 ] && status=failed
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && status=timeout
    note "$(printf '%-26s %-8s exit %-3s %7s s  (cap %ss)  %s' "$name" "$status" "$rc" "$(elapsed "$s")" "$t" "${log#"$DIR"/}")"
    return $rc
}
skip() { note "$(printf '%-26s skipped  %s' "$1" "$2")"; }

# -- machine ------------------------------------------------------------------------------
{
    echo "gpu_check.sh started $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo 'not a git checkout')"
    echo "wheels: $WHEELS"
    if command -v nvidia-smi >/dev/null 2>&1; then
        timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1
        timeout 30 nvidia-smi 2>&1
    else
        echo "nvidia-smi: not found"
    fi
    timeout 60 "$PY" - <<'EOF' 2>&1
import os, platform, sys
import torch
print(f"python {sys.version.split()[0]} on {platform.platform()}")
print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
print(f"CUDA available: {torch.cuda.is_available()}")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"GPU {i}: {p.name}, capability {p.major}.{p.minor}, {p.total_memory / 2**30:.1f} GiB")
print(f"CPU: {os.cpu_count()} logical cores; load average {os.getloadavg()}")
from importlib.metadata import PackageNotFoundError, version
for mod in ("msgspec", "libcst", "jsonschema", "hypothesis", "rich", "numpy", "pytest", "pytest-xdist"):
    try:
        print(f"{mod} {version(mod)}")
    except PackageNotFoundError:
        print(f"{mod}: not installed")
EOF
} > "$DIR/00_machine.txt" 2>&1
note "$(printf '%-26s ok       %7s s  00_machine.txt' machine "$(( $(date +%s) - START ))")"

CUDA_WHY=$(timeout 60 "$PY" -c "import torch; print('' if torch.cuda.is_available() else
    f'no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda})')" 2>&1 | tail -1)
# sizes: the GPU run, or the CPU rehearsal (small)
ENGINE_ARGS=(); PYTEST_PATHS=(tests); DOCTOR_STEPS=(--steps 10 --warmup 3); SCRIPT_STEPS=40; TUNE_BUDGET=75
CNN_ARGS=(); GPT_ARGS=()
if [ "$DEV" = cpu ]; then
    CUDA_WHY=""
    ENGINE_ARGS=(--steps 10 --warmup 3 --repeats 1); PYTEST_PATHS=(tests/test_gpu_paths.py)
    DOCTOR_STEPS=(--steps 4 --warmup 2 --no-probes); SCRIPT_STEPS=10; TUNE_BUDGET=60
    CNN_ARGS=(--width 8 --workers 1 --batch-size 16); GPT_ARGS=(--layers 1 --width 64 --block-size 32 --batch-size 8)
    note "rehearsal on the CPU: every stage with --device cpu at small sizes (not a GPU result)"
fi
PITSTOP=("$PY" -m pitstop)

# -- (f) other GPU checks, when their scripts exist --------------------------------------------
extra() {  # extra NAME CAP SCRIPT
    if ! wanted "$1"; then return 0; fi
    if [ ! -f "$3" ]; then skip "$1" "$3 is not in this checkout"
    elif [ -n "$CUDA_WHY" ]; then skip "$1" "$CUDA_WHY"
    elif [ "$DEV" = cpu ]; then skip "$1" "not rehearsed on the CPU (another engineer's GPU check)"
    else run "$1" "$2" "$DIR/$1/$1.log" "$PY" "$3" --out "$DIR/$1"; fi
}

extra doctor_loops 300 benchmarks/gpu_doctor_loops.py  # six loops; the two compiled ones compile first
if wanted bench; then
    if [ -n "$CUDA_WHY" ]; then skip bench "$CUDA_WHY"
    elif [ -s "$DIR/bench/gpu.json" ]; then
        note "$(printf '%-26s ok       done inside the selftest: bench/gpu.md, bench/gpu.json' bench)"
    else
        mkdir -p "$DIR/bench"
        run bench 120 "$DIR/bench/gpu.md" "${PITSTOP[@]}" bench --device "$DEV" --format markdown \
            --json "$DIR/bench/gpu.json" --html "$DIR/bench/gpu.html"
    fi
fi

# -- (e) the engine against a raw loop ------------------------------------------------------
if wanted engine; then
    if [ -n "$CUDA_WHY" ]; then skip engine "$CUDA_WHY"; else
        run engine 120 "$DIR/engine/engine_vs_raw.log" "$PY" benchmarks/engine_vs_raw.py --device "$DEV" \
            --out "$DIR/engine" ${ENGINE_ARGS[@]+"${ENGINE_ARGS[@]}"}
    fi
fi

# -- (a) the tests that take a CUDA path ---------------------------------------------------
if wanted pytest; then
    if [ -n "$CUDA_WHY" ]; then skip pytest "$CUDA_WHY (the same tests skip here, each with its reason)"; else
        run pytest 120 "$DIR/pytest/pytest.log" "$PY" -m pytest -q -k "cuda or gpu" -p no:cacheprovider \
            --continue-on-collection-errors --junitxml "$DIR/pytest/junit.xml" "${PYTEST_PATHS[@]}"
    fi
fi

# -- (d) doctor, trace and tune on the bundled GPU examples ---------------------------------------
if wanted examples; then
    if [ -n "$CUDA_WHY" ]; then skip examples "$CUDA_WHY"; else
        for ex in gpu_cnn gpu_transformer; do
            d="$DIR/examples/$ex"
            mkdir -p "$d"
            if [ $ex = gpu_cnn ]; then size=(${CNN_ARGS[@]+"${CNN_ARGS[@]}"}); else size=(${GPT_ARGS[@]+"${GPT_ARGS[@]}"}); fi
            run "doctor $ex" 90 "$d/doctor.json" "${PITSTOP[@]}" doctor -m "pitstop.examples.$ex" "${DOCTOR_STEPS[@]}" \
                --format json --trace "$d/trace" --html "$d/doctor.html" -- --device "$DEV" --steps "$SCRIPT_STEPS" \
                ${size[@]+"${size[@]}"}
            if ls "$d"/trace/*.json* >/dev/null 2>&1; then
                run "trace $ex" 40 "$d/trace.txt" "${PITSTOP[@]}" trace "$d/trace"
            else skip "trace $ex" "the doctor wrote no trace"; fi
        done
        run "tune gpu_cnn" 100 "$DIR/examples/gpu_cnn/tune.json" "${PITSTOP[@]}" tune -m pitstop.examples.gpu_cnn \
            --steps 8 --warmup 3 --budget "$TUNE_BUDGET" --format json --save-recipe "$DIR/examples/gpu_cnn/recipe.toml" \
            -- --device "$DEV" --steps 200 ${CNN_ARGS[@]+"${CNN_ARGS[@]}"}
    fi
fi


extra tune_path 150 benchmarks/gpu_tune_path.py
extra oom 150 benchmarks/gpu_oom.py

# -- FSDP2 through doctor and trace (issue 43) -----------------------------------------------------
if wanted fsdp; then
    if [ -n "$CUDA_WHY" ]; then skip fsdp "$CUDA_WHY"; else
        d="$DIR/fsdp"
        mkdir -p "$d"
        NGPU=$(timeout 60 "$PY" -c "import torch; print(min(2, max(1, torch.cuda.device_count())))" 2>/dev/null || echo 1)
        [ "$DEV" = cpu ] && NGPU=2
        run "doctor fsdp2 x$NGPU" 120 "$d/doctor.json" "${PITSTOP[@]}" doctor --nproc-per-node "$NGPU" "${DOCTOR_STEPS[@]}" \
            --format json --trace "$d/trace" benchmarks/gpu_fsdp.py -- --device "$DEV" --steps "$SCRIPT_STEPS"
        if ls "$d"/trace/*.json* >/dev/null 2>&1; then
            run "trace fsdp2" 60 "$d/trace.json" "${PITSTOP[@]}" trace --format json "$d/trace"
            run "trace fsdp2 (text)" 40 "$d/trace.txt" "${PITSTOP[@]}" trace "$d/trace"
        else skip "trace fsdp2" "the doctor wrote no trace"; fi
    fi
fi

# -- (b) + (c) selftest, bench over every benchmark inside it --------------------------------
if wanted selftest; then
    if [ -n "$CUDA_WHY" ]; then skip selftest "$CUDA_WHY"; else
        mkdir -p "$DIR/bench"
        run selftest 230 "$DIR/selftest.json" "${PITSTOP[@]}" selftest --device "$DEV" --out "$DIR/selftest" \
            --bench-out "$DIR/selftest_bench.md" --format json
    fi
fi

# -- pack ------------------------------------------------------------------------------------
note "$(printf '%-26s %s s of a %s s budget' total "$(( $(date +%s) - START ))" "$TOTAL")"
# docs-ready: DIR/docs/gpu.md + gpu.json, the page docs/bench/gpu.md is (copy both to docs/bench/)
if [ -s "$DIR/bench/gpu.json" ] || [ -s "$DIR/engine/engine_vs_raw.md" ]; then
    timeout 60 "$PY" benchmarks/gpu_page.py "$DIR" --page "$DIR/docs/gpu.md" --json "$DIR/docs/gpu.json" \
        > "$DIR/docs_page.log" 2>&1 || echo "gpu_page.py failed: see docs_page.log" >> "$DIR/docs_page.log"
fi
DEST=${OUT:-$(dirname "$DIR")}
mkdir -p "$DEST"
tar -czf "$DEST/gpu_check.tar.gz" -C "$(dirname "$DIR")" "$(basename "$DIR")" && cp "$SUMMARY" "$DEST/gpu_check_summary.txt" 2>/dev/null
echo "packed: $DEST/gpu_check.tar.gz ($(du -h "$DEST/gpu_check.tar.gz" | cut -f1))"
echo "----- summary -----"
cat "$SUMMARY"
[ -s "$DIR/engine/engine_vs_raw.md" ] && tail -1 "$DIR/engine/engine_vs_raw.md"
exit 0
}
