#!/usr/bin/env bash
# The forty-third session's device calls, from the repository root: bash kernels/results/2026-12-06-s43/run.sh N
set -o pipefail
source scripts/device_env.sh
export HS_KERNELS_CACHE=/tmp/hsk
nvidia-smi -L
log=$OUT/s43; mkdir -p "$log"
case "$1" in
1)  # the s42 merge (169133c) and review (7a60fa6) with a chunk's keys decompressed from the chunk (gpu.chunk_keys):
    # the CUDA prefix, CUDA prefill and Triton prefill GPU suites; the one shot's key forms at 8K, 16K and 32K
    timeout 360 python -m pytest -q -m gpu tests/test_kernels_gpu_cuda_prefix.py tests/test_kernels_gpu_cuda_prefill.py \
        tests/test_kernels_gpu_triton_prefill.py 2>&1 | tee "$log/tests.log" | tail -3
    timeout 150 python kernels/probes/prefill_dense_keys.py --calls 20 --tokens 8192,16384,32768 2>&1 | grep -v Warn \
        | tee "$log/dense_keys.log" ;;
2)  # the prefill table (its rows alternating with cuDNN); a served prefix's dense keys after 32K; the decode table
    timeout 240 python -m hs_kernels.bench_prefill --no-tilelang --triton-configs '' --question 0 \
        > "$log/bench_prefill.log" 2>&1; echo "bench_prefill rc $?"
    grep -E "^\| (cuDNN|ours|  the same)" "$log/bench_prefill.log"
    timeout 100 python kernels/probes/prefix_dense_keys.py 2>&1 | grep -v Warn | tee "$log/prefix_dense_keys.log"
    timeout 200 python -m hs_kernels.bench_gpu --decode-only > "$log/bench_decode.log" 2>&1; echo "decode rc $?"
    grep -E "cuDNN SDPA|S_K=(0|1) S_V=(0|1) slots=3 splits=8 " "$log/bench_decode.log" | cut -c1-170 ;;
3)  # the key forms at SmolLM2's heads (8K-32K), and at Llama's after 0.5 s idle before each call (a burst's clocks)
    for a in "--heads 9:3:64 --tokens 8192,16384,24576,32768" "--pause 0.5 --tokens 16384,32768"; do
        echo "== $a"; timeout 150 python kernels/probes/prefill_dense_keys.py --calls 20 $a 2>&1 | grep -v Warn
    done | tee "$log/dense_keys_3.log" ;;
4)  # the two prefill probes refactored onto probes/one_shot.py, briefly
    timeout 90 python kernels/probes/prefill_entry_cost.py --calls 10 2>&1 | grep -v Warn | tee "$log/entry_cost.log"
    timeout 120 python kernels/probes/sustained_prefill.py --interleave --calls 10 --settle 2 --rounds 1 2>&1 \
        | grep -v Warn | tee "$log/interleaved.log" ;;
5)  # the entry-cost probe with its launches reading the entry point's key form; on an H200, the tables first
    if nvidia-smi -L | grep -q H200; then
        timeout 240 python -m hs_kernels.bench_prefill --no-tilelang --triton-configs '' --question 0 \
            > "$log/bench_prefill.log" 2>&1; echo "bench_prefill rc $?"
        grep -E "^\| (cuDNN|ours|  the same)" "$log/bench_prefill.log"
        timeout 200 python -m hs_kernels.bench_gpu --decode-only > "$log/bench_decode.log" 2>&1; echo "decode rc $?"
        grep -E "cuDNN SDPA|alternating" "$log/bench_decode.log" | cut -c1-170
    fi
    timeout 120 python kernels/probes/prefill_entry_cost.py --calls 20 2>&1 | grep -v Warn | tee "$log/entry_cost.log" ;;
6)  # written for the next session, not run. A served A/B of a prefix's keys read dense (169133c): an 8K chunk after
    # a cached 32K prefix (bench_e2e's prefix run, its cached questions 8192 tokens long), this tree and the tree
    # before (`mkdir -p .dev/before && git archive 169133c^1 kernels sglang_hs | tar -x -C .dev/before`), dummy
    # Llama-3.1-8B. A fresh machine first needs a call carrying .dev/sgl1 (e.g. `run.sh 5`), then this one carrying
    # [".dev/sgl2", ".dev/before"]; `run.sh 7` on the same machine runs the pair in the other order.
    RUN_TIMEOUT=270 bash scripts/e2e_ab.sh "$log/e2e" . .dev/before -- --contexts 4096 --batches 1 --output-tokens 4 \
        --prefix 32768 --questions 3 --question-tokens 8192 ;;
7)  RUN_TIMEOUT=270 bash scripts/e2e_ab.sh "$log/e2e" .dev/before . -- --contexts 4096 --batches 1 --output-tokens 4 \
        --prefix 32768 --questions 3 --question-tokens 8192 ;;
8)  # the review (aa86756, gpu.compressed_prefill_keys): the compressed prefill's GPU tests and the key-form probe
    timeout 150 python -m pytest -q -m gpu tests/test_kernels_gpu_cuda_prefill.py -k "compressed or chunk_keys" 2>&1 \
        | tee "$log/tests.log" | tail -1
    timeout 60 python kernels/probes/prefill_dense_keys.py --calls 10 --tokens 32768 2>&1 | grep -v Warn \
        | tee "$log/dense_keys.log" ;;
*) echo "usage: run.sh 1..8" >&2; exit 2 ;;
esac
