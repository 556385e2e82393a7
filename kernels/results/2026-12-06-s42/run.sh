#!/usr/bin/env bash
# The forty-second session's device calls, from the repository root: bash kernels/results/2026-12-06-s42/run.sh N
set -o pipefail
source scripts/device_env.sh
export HS_KERNELS_CACHE=/tmp/hsk
nvidia-smi -L
log=$OUT/s42; mkdir -p "$log"
suites() { timeout 330 python -m pytest -q -m gpu "$@" 2>&1 | tee "$log/tests.log" | tail -3; }
prefill_table() {
    timeout 240 python -m hs_kernels.bench_prefill --no-tilelang --triton-configs '' --question 0 \
        > "$log/bench_prefill.log" 2>&1; echo "bench_prefill rc $?"
    grep -E "^\| (cuDNN|ours|  the same)" "$log/bench_prefill.log"
}
decode_table() {
    timeout 200 python -m hs_kernels.bench_gpu --decode-only > "$log/bench_decode.log" 2>&1; echo "decode rc $?"
    grep -E "cuDNN SDPA|S_K=(0|1) S_V=(0|1) slots=3 splits=8 " "$log/bench_decode.log" | cut -c1-170
}
case "$1" in
1)  # the s41 review (6012dc0) on a GPU: the CUDA prefill suite (the rescue's head tile), the compression and timing suites;
    # the prefill table with its rows alternating with cuDNN (never run before)
    suites tests/test_kernels_gpu_cuda_prefill.py tests/test_kernels_gpu_compress.py tests/test_kernels_gpu_timing.py
    prefill_table ;;
2)  # the decode table with its rows alternating with cuDNN at the default launch (never run before); where the
    # prefill's entry point spends its 0.4 ms over the launch
    decode_table
    timeout 150 python kernels/probes/prefill_entry_cost.py 2>&1 | tee "$log/entry_cost.log" | grep "^|" ;;
3)  # the 2:4 prefill with its keys 2:4 or pruned and stored dense, alternating with cuDNN: at the cap and at a
    # burst's clocks (Llama-3.1-8B's heads), then SmolLM2's (9 / 3, d 64) and a shorter sequence
    for a in "--pause 0" "--pause 0.5" "--heads 9:3:64" "--tokens 8192"; do
        echo "== $a"; timeout 120 python kernels/probes/prefill_dense_keys.py $a 2>&1 | grep -v Warn
    done 2>&1 | tee "$log/dense_keys.log" ;;
4)  # branch s42-dense-keys (the compressed prefill reads 2:4 keys pruned and stored dense): the probe at the cap
    # (Llama's heads, SmolLM2's), the CUDA prefill GPU suite, the prefill table
    for a in "--pause 0" "--heads 9:3:64"; do
        echo "== $a"; timeout 100 python kernels/probes/prefill_dense_keys.py --calls 20 $a 2>&1 | grep -v Warn
    done 2>&1 | tee "$log/dense_keys.log"
    suites tests/test_kernels_gpu_cuda_prefill.py
    prefill_table ;;
6)  # the merge (a00e9ed): on an H200, the prefill and decode tables first; then the three prefill probes as
    # refactored onto probes/one_shot.py, briefly
    if nvidia-smi -L | grep -q H200; then prefill_table; decode_table; fi
    timeout 60 python kernels/probes/prefill_entry_cost.py --calls 10 2>&1 | grep -v Warn | tee "$log/entry_cost.log"
    timeout 60 python kernels/probes/prefill_dense_keys.py --calls 10 --tokens 8192 2>&1 | grep -v Warn \
        | tee "$log/dense_keys.log"
    timeout 60 python kernels/probes/sustained_prefill.py --interleave --calls 10 --settle 2 --rounds 1 2>&1 \
        | grep -v Warn | tee "$log/interleaved.log" ;;
7)  # branch s42-prefix-dense-keys (a served prefix's 2:4 keys read from a dense copy, gpu.prefix_keys; densify_kernel
    # with output strides): its GPU tests, the probe, and one refactored prefill probe, briefly
    timeout 150 python -m pytest -q -m gpu tests/test_kernels_gpu_cuda_prefix.py -k "dense_keys or underflow" 2>&1 \
        | tee "$log/tests.log" | tail -3
    timeout 60 python kernels/probes/prefix_dense_keys.py --chunks 4096,8192 2>&1 | grep -v Warn \
        | tee "$log/prefix_dense_keys.log"
    timeout 40 python kernels/probes/prefill_dense_keys.py --calls 10 --tokens 8192 2>&1 | grep -v Warn \
        | tee "$log/dense_keys.log" ;;
8)  # for the next session (not run here): the merge 169133c's GPU suites with both default rules (a prefix's keys
    # dense from 2^14 rows per KV head in one part; a chunk's from 2^16), densify_kernel's output strides
    timeout 500 python -m pytest -q -m gpu tests/test_kernels_gpu_cuda_prefix.py tests/test_kernels_gpu_cuda_prefill.py \
        tests/test_kernels_gpu_triton_prefill.py 2>&1 | tee "$log/tests.log" | tail -3 ;;
*) echo "usage: run.sh 1..8" >&2; exit 2 ;;
esac
