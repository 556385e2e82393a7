#!/usr/bin/env bash
# The forty-fourth session's device calls, from the repository root: bash kernels/results/2026-12-06-s44/run.sh N
set -o pipefail
source scripts/device_env.sh
export HS_KERNELS_CACHE=/tmp/hsk
nvidia-smi -L
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
log=$OUT/s44; mkdir -p "$log"
case "$1" in
1)  # carrying .dev/sgl1 (the first piece of SGLang, for call 2). On an H200 the prefill and decode tables; on an
    # H100 (whose tables the forty-third session has) the CUDA prefill GPU suite after the review aa86756. Then the
    # entry-cost probe with its launches reading the entry point's key form (not run since that fix).
    if nvidia-smi -L | grep -q H200; then
        timeout 240 python -m hs_kernels.bench_prefill --no-tilelang --triton-configs '' --question 0 \
            > "$log/bench_prefill.log" 2>&1; echo "bench_prefill rc $?"
        grep -E "^\| (cuDNN|ours|  the same)" "$log/bench_prefill.log"
        timeout 200 python -m hs_kernels.bench_gpu --decode-only > "$log/bench_decode.log" 2>&1; echo "decode rc $?"
        grep -E "cuDNN SDPA|S_K=(0|1) S_V=(0|1) slots=3 splits=8 " "$log/bench_decode.log" | cut -c1-170
    else
        timeout 300 python -m pytest -q -m gpu tests/test_kernels_gpu_cuda_prefill.py 2>&1 | tee "$log/tests.log" \
            | tail -2
    fi
    timeout 100 python kernels/probes/prefill_entry_cost.py --calls 20 2>&1 | grep -v Warn | tee "$log/entry_cost.log" ;;
2)  # carrying [".dev/sgl2", ".dev/before"]: a served A/B of a prefix's keys read dense (169133c): 8192-token questions
    # on a cached 32K prefix (bench_e2e's prefix run), this tree then the tree before it
    # (`mkdir -p .dev/before && git archive 169133c^1 kernels sglang_hs | tar -x -C .dev/before`), dummy Llama-3.1-8B
    RUN_TIMEOUT=280 bash scripts/e2e_ab.sh "$log/e2e" . .dev/before -- --contexts 4096 --batches 1 --output-tokens 4 \
        --prefix 32768 --questions 3 --question-tokens 8192 ;;
3)  # the same pair in the other order, on the same warm machine (carrying .dev/before)
    RUN_TIMEOUT=280 bash scripts/e2e_ab.sh "$log/e2e" .dev/before . -- --contexts 4096 --batches 1 --output-tokens 4 \
        --prefix 32768 --questions 3 --question-tokens 8192 ;;
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
