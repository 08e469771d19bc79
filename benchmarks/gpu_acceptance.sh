#!/usr/bin/env bash
# The CUDA backend's acceptance run, for a machine with a CUDA GPU, in one command:
#   1. check that a GPU is visible (nvidia-smi);
#   2. create a virtual environment and install the project with its test and cuda extras;
#   3. check that CuPy sees the GPU;
#   4. run the GPU tests (python -m pytest -m cuda), log in OUT's stem + -pytest.log;
#   5. run benchmarks/bench_gpu.py, which writes its Markdown table to OUT;
#   6. the same with the runs of generated kernels captured as CUDA graphs (--graphs), its
#      table in OUT's stem + -graphs.md.
# Steps 4 to 6 all run; the exit status is 1 if any failed (or no GPU), 2 for a bad
# command line. --dry-run prints the steps without running anything.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: benchmarks/gpu_acceptance.sh [--dry-run] [--venv DIR] [--out FILE] [--python PY]
                                    [--bench-args "ARGS"]
  --dry-run          print the steps, run nothing
  --venv DIR         virtual environment to create (default: .venv-gpu in the repository)
  --out FILE         the benchmark's Markdown table (default: benchmarks/results-gpu.md)
  --python PY        interpreter that creates the environment (default: python3)
  --bench-args ARGS  extra arguments for bench_gpu.py (e.g. "--steps 5 --repeats 3")
EOF
}

die() { echo "gpu_acceptance: $1" >&2; exit "${2:-1}"; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DRY=0
VENV="$ROOT/.venv-gpu"
OUT="$ROOT/benchmarks/results-gpu.md"
PY=python3
BENCH_ARGS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --venv|--out|--python|--bench-args)
            [ $# -ge 2 ] || { usage >&2; die "$1 needs a value" 2; }
            case "$1" in
                --venv) VENV=$2 ;;
                --out) OUT=$2 ;;
                --python) PY=$2 ;;
                --bench-args) BENCH_ARGS=$2 ;;
            esac
            shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" 2 ;;
    esac
    shift
done
LOG="${OUT%.md}-pytest.log"

# run (or, with --dry-run, print) one step
step() {
    echo "+ $*"
    if [ "$DRY" = 0 ]; then "$@"; fi
}

cd "$ROOT"
echo "== 1. a CUDA GPU"
if [ "$DRY" = 1 ]; then
    echo "+ nvidia-smi -L"
elif ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    die "no CUDA GPU: 'nvidia-smi -L' lists none (this script needs a machine with an NVIDIA GPU and its driver)"
else
    nvidia-smi -L
fi

echo "== 2. environment $VENV with .[test,cuda]"
step "$PY" -m venv "$VENV"
step "$VENV/bin/python" -m pip install -q --upgrade pip
step "$VENV/bin/python" -m pip install -q -e ".[test,cuda]"

echo "== 3. CuPy sees the GPU"
step "$VENV/bin/python" -c "import cupy; n = cupy.cuda.runtime.getDeviceCount(); assert n > 0, 'CuPy finds no GPU'; print('CuPy', cupy.__version__, 'GPUs:', n)"

status=0
echo "== 4. GPU tests (log: $LOG)"
if [ "$DRY" = 1 ]; then
    echo "+ $VENV/bin/python -m pytest -m cuda -q -rs | tee $LOG"
elif ! "$VENV/bin/python" -m pytest -m cuda -q -rs 2>&1 | tee "$LOG"; then
    echo "gpu_acceptance: GPU tests failed (see $LOG)" >&2
    status=1
fi

echo "== 5. benchmark table: $OUT"
# shellcheck disable=SC2086  # BENCH_ARGS is a list of words
if ! step "$VENV/bin/python" benchmarks/bench_gpu.py --out "$OUT" $BENCH_ARGS; then
    echo "gpu_acceptance: the benchmark failed" >&2
    status=1
fi
GRAPHS="${OUT%.md}-graphs.md"
echo "== 6. benchmark table with CUDA graphs: $GRAPHS"
# shellcheck disable=SC2086
if ! step "$VENV/bin/python" benchmarks/bench_gpu.py --graphs --runners adc --out "$GRAPHS" $BENCH_ARGS; then
    echo "gpu_acceptance: the benchmark with CUDA graphs failed" >&2
    status=1
fi
[ "$DRY" = 1 ] || echo "gpu_acceptance: tables written to $OUT and $GRAPHS; test log $LOG; status $status"
exit "$status"
