#!/usr/bin/env bash
# The CUDA backend's acceptance run, for a machine with a CUDA GPU, in one command (under
# nine minutes: each measuring step has a time limit, below):
#   1. check that a GPU is visible (nvidia-smi);
#   2. create a virtual environment and install the project with its test and cuda extras
#      (--no-install: use --python as it is, for a machine without network access);
#   3. check that CuPy sees the GPU;
#   4. run the GPU tests (python -m pytest -m cuda), log in OUT's stem + -pytest.log;
#   5. run benchmarks/bench_gpu.py on its default models (MLP, transformer block, deep MLP),
#      which writes its Markdown table to OUT;
#   6. the same with the runs of generated kernels captured as CUDA graphs (--graphs, adc
#      only), its table in OUT's stem + -graphs.md;
#   7. the 12-block GPT and the CNN (PyTorch with and without cuDNN), in OUT's stem +
#      -models.md, and adc's GPT with attention by the library rather than its fused
#      kernel, in OUT's stem + -attention.md;
#   8. the transformer block and the GPT in bf16 (adc's row says why it does not run), in
#      OUT's stem + -bf16.md;
#   9. the GPT's gradient under a sweep of memory budgets, predicted against measured peak
#      (benchmarks/memory_budget_sweep.py), in OUT's stem + -memory-budget.md and .png;
#  10. training steps (forward, backward, clipping, Adam) of the MLP, the transformer block
#      and the GPT with adc.train_step(device="cuda"), PyTorch and JAX
#      (benchmarks/bench_train.py --gpu), in OUT's stem + -train.md.
# Steps 4 to 10 all run; the exit status is 1 if any failed or ran past its limit (or no
# GPU), 2 for a bad command line. --dry-run prints the steps without running anything.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: benchmarks/gpu_acceptance.sh [--dry-run] [--no-install] [--venv DIR] [--out FILE]
                                    [--python PY] [--bench-args "ARGS"]
  --dry-run          print the steps, run nothing
  --no-install       run with --python as it is (CuPy and the project already installed)
  --venv DIR         virtual environment to create (default: .venv-gpu in the repository)
  --out FILE         the benchmark's Markdown table (default: benchmarks/results-gpu.md)
  --python PY        interpreter that creates the environment (default: python3)
  --bench-args ARGS  arguments for every bench_gpu.py run
                     (default: "--steps 5 --repeats 3 --warmup 2")
EOF
}

die() { echo "gpu_acceptance: $1" >&2; exit "${2:-1}"; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DRY=0
INSTALL=1
VENV="$ROOT/.venv-gpu"
OUT="$ROOT/benchmarks/results-gpu.md"
PY=python3
BENCH_ARGS="--steps 5 --repeats 3 --warmup 2"
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --no-install) INSTALL=0 ;;
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
STEM="${OUT%.md}"
LOG="$STEM-pytest.log"
# seconds each measuring step may take (the whole run stays under nine minutes)
LIMIT_TESTS=90 LIMIT_BENCH=125 LIMIT_GRAPHS=35 LIMIT_MODELS=95 LIMIT_ATTENTION=30
LIMIT_BF16=35 LIMIT_SWEEP=65 LIMIT_TRAIN=60

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

if [ "$INSTALL" = 1 ]; then
    echo "== 2. environment $VENV with .[test,cuda]"
    step "$PY" -m venv "$VENV"
    step "$VENV/bin/python" -m pip install -q --upgrade pip
    step "$VENV/bin/python" -m pip install -q -e ".[test,cuda]"
    RUN="$VENV/bin/python"
else
    echo "== 2. environment: $PY as it is (--no-install)"
    RUN="$PY"
fi

echo "== 3. CuPy sees the GPU"
step "$RUN" -c "import cupy; n = cupy.cuda.runtime.getDeviceCount(); assert n > 0, 'CuPy finds no GPU'; print('CuPy', cupy.__version__, 'GPUs:', n)"

status=0
# one measuring step under its time limit: "timed NAME LIMIT command..."; a failure or an
# overrun is reported and the run goes on
timed() {
    local name=$1 limit=$2
    shift 2
    echo "+ timeout $limit $*"
    [ "$DRY" = 1 ] && return 0
    local rc=0
    timeout -k 10 "$limit" "$@" || rc=$?
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        echo "gpu_acceptance: $name ran past its limit of $limit s" >&2
        status=1
    elif [ "$rc" != 0 ]; then
        echo "gpu_acceptance: $name failed (exit $rc)" >&2
        status=1
    fi
}

echo "== 4. GPU tests (log: $LOG)"
if [ "$DRY" = 1 ]; then
    echo "+ timeout $LIMIT_TESTS $RUN -m pytest -m cuda -q -rs | tee $LOG"
elif ! timeout -k 10 "$LIMIT_TESTS" "$RUN" -m pytest -m cuda -q -rs 2>&1 | tee "$LOG"; then
    echo "gpu_acceptance: GPU tests failed or ran past $LIMIT_TESTS s (see $LOG)" >&2
    status=1
fi

# shellcheck disable=SC2086  # BENCH_ARGS is a list of words
{
echo "== 5. benchmark table: $OUT"
timed "the benchmark" "$LIMIT_BENCH" "$RUN" benchmarks/bench_gpu.py --out "$OUT" $BENCH_ARGS
echo "== 6. benchmark table with CUDA graphs: $STEM-graphs.md"
timed "the benchmark with CUDA graphs" "$LIMIT_GRAPHS" "$RUN" benchmarks/bench_gpu.py --graphs \
    --runners adc --out "$STEM-graphs.md" $BENCH_ARGS
echo "== 7. the GPT and the CNN: $STEM-models.md"
timed "the GPT and CNN benchmark" "$LIMIT_MODELS" "$RUN" benchmarks/bench_gpu.py --models gpt,cnn \
    --out "$STEM-models.md" $BENCH_ARGS
timed "the GPT with library attention" "$LIMIT_ATTENTION" "$RUN" benchmarks/bench_gpu.py \
    --models gpt --runners adc --attention library --out "$STEM-attention.md" $BENCH_ARGS
echo "== 8. bf16: $STEM-bf16.md"
timed "the bf16 benchmark" "$LIMIT_BF16" "$RUN" benchmarks/bench_gpu.py --dtype bf16 \
    --models transformer_block,gpt --out "$STEM-bf16.md" $BENCH_ARGS
}
echo "== 9. memory budgets of the GPT: $STEM-memory-budget.md"
timed "the memory-budget sweep" "$LIMIT_SWEEP" "$RUN" benchmarks/memory_budget_sweep.py \
    --out "$STEM-memory-budget.md"
echo "== 10. training steps: $STEM-train.md"
# shellcheck disable=SC2086
timed "the training-step benchmark" "$LIMIT_TRAIN" "$RUN" benchmarks/bench_train.py --gpu \
    --size full --models mlp,transformer_block,gpt --runners adc,torch,jax \
    --out "$STEM-train.md" $BENCH_ARGS
[ "$DRY" = 1 ] || echo "gpu_acceptance: tables written to $OUT and $STEM-*.md; test log $LOG; status $status"
exit "$status"
