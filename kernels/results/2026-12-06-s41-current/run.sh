#!/usr/bin/env bash
# The forty-first session's device calls, from the repository root (README.md beside this maps them):
#   here, for calls 3 and later:  rm -rf .scratch/s41 && mkdir -p .scratch/s41/head &&
#                                 git archive 2c1980c kernels | tar -x -C .scratch/s41/head   (the tree before)
#   on the device:                bash kernels/results/2026-12-06-s41-current/run.sh N   (carry [".scratch/s41"])
set -o pipefail
source scripts/device_env.sh
export HS_KERNELS_CACHE=/tmp/hsk
nvidia-smi -L
log=$OUT/s41; mkdir -p "$log"
suites() { timeout 330 python -m pytest -q -m gpu "$@" 2>&1 | tee "$log/tests.log" | tail -3; }
# run "$2" (a python command line) on each tree in "$1" ("before": 2c1980c's kernels from .scratch/s41/head)
trees() {
    mkdir -p /tmp/old && ln -sfn "$PWD/.scratch/s41/head/kernels" /tmp/old/hs_kernels
    for tree in $1; do
        echo "== $tree"; pp=$PYTHONPATH; [ $tree = before ] && pp=/tmp/old:$PYTHONPATH
        PYTHONPATH=$pp eval "$2" 2>&1 | tee -a "$log/$3_$tree.log" | grep -E "$4" | cut -c1-60,150-200
    done
}
probe() { trees "$1" "timeout 100 python kernels/probes/compress_chunk_timing.py" probe "$2"; }
PREFILL="timeout 240 python -m hs_kernels.bench_prefill --no-tilelang --triton-configs '' --question 0"
prefill_table() {
    eval "$PREFILL" > "$log/bench_prefill.log" 2>&1; echo "bench_prefill rc $?"
    grep -E "^\| (cuDNN|ours|  the same)" "$log/bench_prefill.log"
}
decode_table() {
    timeout 200 python -m hs_kernels.bench_gpu --decode-only > "$log/bench_decode.log" 2>&1; echo "decode rc $?"
    grep -E "cuDNN SDPA|S_K=(0|1) S_V=(0|1) slots=3 splits=8 " "$log/bench_decode.log" | cut -c1-150
}
case "$1" in
1)  # every kernel target on the current tree, one machine: the 32K prefill table, compression, the decode table
    prefill_table
    timeout 120 python -m hs_kernels.bench_gpu --compress-only > "$log/bench_compress.log" 2>&1; echo "compress rc $?"
    grep -E "compress|cuDNN" "$log/bench_compress.log" | cut -c1-150
    decode_table ;;
2)  # where compress_chunk's time goes (the one-shot row "with compress_chunk" ran 1.4-1.8 ms over the attention)
    timeout 200 python kernels/probes/compress_chunk_timing.py 2>&1 | tee "$log/compress_chunk.log" | cut -c1-160 ;;
3)  # compress_chunk from the tiles in place (one launch per operand, no copy, no sort at S = 1): the compression and
    # CUDA prefill GPU suites, then the probe on the tree before and after, alternated, then the prefill table
    suites tests/test_kernels_gpu_compress.py tests/test_kernels_gpu_cuda_prefill.py
    probe "before after before after" "^\| [01] \|"
    prefill_table ;;
4)  # the tile-compression test's fix; the rescue kernel a program per KV head (its G query heads in turn): the
    # compression, CUDA prefill and prefix GPU suites; the probe before / after; the prefill and decode tables
    suites tests/test_kernels_gpu_compress.py tests/test_kernels_gpu_cuda_prefill.py tests/test_kernels_gpu_cuda_prefix.py
    probe "before after" "^\| [01] \||rescue_kernel|compress_kernel"
    prefill_table; decode_table ;;
5)  # the rescue reads a tile's G heads' marks in one load and walks the heads only where one is marked: the CUDA
    # prefill and prefix GPU suites; the probe before / after; the prefill table (and, on an H200, the decode table)
    suites tests/test_kernels_gpu_cuda_prefill.py tests/test_kernels_gpu_cuda_prefix.py
    probe "before after" "^\| [01] \||rescue_kernel|compress_kernel"
    prefill_table
    if nvidia-smi -L | grep -q H200; then decode_table; fi ;;
6)  # the prefill table, its one-shot rows at 20 timings each (5 gave medians 0.5 ms apart, "with compression" below
    # "without"), on the tree before (with this bench_prefill.py copied in: cp kernels/bench_prefill.py
    # .scratch/s41/head/kernels/) and after, alternated
    trees "before after before after" "$PREFILL" bench_prefill "^\| (cuDNN|ours|  the same)" ;;
7)  # sustained one-shot prefill: 60 calls each of cuDNN and ours, twice, each call timed, with clock and power
    pip list 2>/dev/null | grep -i nvidia-ml
    timeout 200 python kernels/probes/sustained_prefill.py 2>&1 | tee "$log/sustained.log" | grep -v Warn ;;
8)  # the same, 200 calls each, three rounds, and the card's power limit
    nvidia-smi --query-gpu=power.limit,clocks.max.sm --format=csv
    timeout 200 python kernels/probes/sustained_prefill.py --calls 200 --rounds 3 2>&1 | grep -v Warn \
        | tee "$log/sustained_200.log" ;;
9)  # the pool's compressor back on its constant strides (IN_PLACE only for a chunk's tiles): the compression GPU
    # suite, the compressor's table, the probe
    suites tests/test_kernels_gpu_compress.py
    timeout 120 python -m hs_kernels.bench_gpu --compress-only > "$log/bench_compress.log" 2>&1; echo "compress rc $?"
    grep -E "compress|cuDNN" "$log/bench_compress.log" | cut -c1-150
    probe after "^\| [01] \||rescue_kernel|compress_kernel" ;;
10) # cuDNN and ours alternating call by call (the same power state): back to back, then with 0.5 s idle before each
    timeout 100 python kernels/probes/sustained_prefill.py --interleave --calls 120 2>&1 | grep -v Warn \
        | tee "$log/interleaved.log"
    timeout 100 python kernels/probes/sustained_prefill.py --interleave --calls 24 --settle 4 --pause 0.5 --rounds 1 \
        2>&1 | grep -v Warn | tee "$log/interleaved_paused.log" ;;
11) # the same, ours as the launch alone (no entry point, rescue or sync)
    for pause in 0 0.5; do
        timeout 100 python kernels/probes/sustained_prefill.py --interleave --kernel-only --calls 40 --settle 8 \
            --pause $pause --rounds 1 2>&1 | grep -v Warn | tee -a "$log/interleaved_kernel.log"
    done ;;
12) # the entry point at the cap (more calls), and both at 0.1 s pauses (written after it ran as a literal command)
    for a in "--calls 120 --settle 30" "--calls 40 --settle 8 --pause 0.1" "--calls 40 --settle 8 --pause 0.1 --kernel-only"
    do
        echo "== $a"; timeout 60 python kernels/probes/sustained_prefill.py --interleave --rounds 1 $a 2>&1 | grep "^| 0"
    done 2>&1 | tee "$log/call12.log" ;;
13) # the review (6012dc0): the CUDA prefill suite (the rescue's head tile), the compression suite, the prefill table
    suites tests/test_kernels_gpu_cuda_prefill.py tests/test_kernels_gpu_compress.py
    prefill_table ;;
*) echo "usage: run.sh 1..13" >&2; exit 2 ;;
esac
