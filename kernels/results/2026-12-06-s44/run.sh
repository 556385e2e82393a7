#!/usr/bin/env bash
# The forty-fourth session's device calls, from the repository root: bash kernels/results/2026-12-06-s44/run.sh N
set -o pipefail
source scripts/device_env.sh
export HS_KERNELS_CACHE=/tmp/hsk
nvidia-smi -L
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
log=$OUT/s44; mkdir -p "$log"
# the served A/B of a prefix's keys read dense (169133c): 8192-token questions on a cached 32K prefix (bench_e2e's
# prefix run), dummy Llama-3.1-8B; ab OUT QUESTIONS TREE...: the trees in that order, "." this one, .dev/before the
# one before (`mkdir -p .dev/before && git archive 169133c^1 kernels sglang_hs | tar -x -C .dev/before`)
ab() {
    local out=$1 questions=$2; shift 2
    RUN_TIMEOUT=280 bash scripts/e2e_ab.sh "$out" "$@" -- --contexts 4096 --batches 1 --output-tokens 4 \
        --prefix 32768 --questions "$questions" --question-tokens 8192
}
case "$1" in
1)  # carrying .dev/sgl1 (the first piece of SGLang, for call 2): the CUDA prefill GPU suite after the review aa86756,
    # then the entry-cost probe with its launches reading the entry point's key form (not run since that fix). (As
    # run, an H200 would have run the tables first: `run.sh 4` runs them.)
    timeout 300 python -m pytest -q -m gpu tests/test_kernels_gpu_cuda_prefill.py 2>&1 | tee "$log/tests.log" | tail -2
    timeout 100 python kernels/probes/prefill_entry_cost.py --calls 20 2>&1 | grep -v Warn \
        | tee "$log/entry_cost.log" ;;
2)  # carrying [".dev/sgl2", ".dev/before"]: this tree, then the one before
    ab "$log/e2e" 3 . .dev/before ;;
3)  # on the same warm machine, carrying .dev/before: the other order, twice, 5 questions
    ab "$log/e2e3" 5 .dev/before . .dev/before . ;;
4)  # every prefill row the issue names on today's tree (the Triton dense and S = 0 / 0.5 / 1 rows too, which the last
    # sessions left out), then the decode table; rows print as they finish, so a timeout keeps them
    timeout 330 python -m hs_kernels.bench_prefill --no-tilelang --triton-configs 128:8:3 --question 0 \
        > "$log/bench_prefill_full.log" 2>&1
    echo "bench_prefill rc $?"
    timeout 180 python -m hs_kernels.bench_gpu --decode-only > "$log/bench_decode.log" 2>&1; echo "decode rc $?"
    grep -E "cuDNN SDPA|S_K=(0|1) S_V=(0|1) slots=3 splits=8 " "$log/bench_decode.log" | cut -c1-170
    grep -E "^\| " "$log/bench_prefill_full.log" | cut -c1-150 ;;
*) echo "usage: run.sh 1..4" >&2; exit 2 ;;
esac
