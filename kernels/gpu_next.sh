#!/usr/bin/env bash
# The device calls that measure branch kernels-next, one stage per call (each under the 600 s limit),
# from the repository root on the H200. Logs go to $OUT/<stage>/; the last lines printed are the tables.
#   decode:  carry nothing (TileLang's cases then skip). GPU tests of the decode, compression and streaming
#            kernels; the decode table (and the previous CUDA decode version's rows, if its copy is there);
#            the streaming kernel at 4 and 8 warps.
#   prefill: carry nothing. GPU tests of the Triton prefill; its table (heads per tile 1 vs 4, 128-key
#            chunk tiles) and the question-after-a-cached-prefix table.
#   tl:      carry .dev/site.tar.xz. TileLang prefill: compile every tested/benchmarked variant, tests, benchmark.
set -o pipefail
stage=${1:?usage: gpu_next.sh decode|prefill|tl}
source scripts/device_env.sh
export HS_KERNELS_CACHE=/tmp/hsk
log="${OUT:-/tmp/hs_out}/$stage"; mkdir -p "$log"
nvidia-smi -L
case "$stage" in
decode)
    python -m pytest -q -p no:cacheprovider tests/test_kernels_gpu_decode.py tests/test_kernels_gpu_triton_stream.py \
        tests/test_kernels_gpu_compress.py 2>&1 | tee "$log/tests.log" | tail -5
    python -m hs_kernels.bench_gpu --decode-only 2>&1 | tee "$log/bench_decode.log" | tail -30
    python -m hs_kernels.bench_stream 2>&1 | tee "$log/bench_stream.log" | tail -7  # 4 vs 8 warps (4 spills at 128 rows)
    # the previous CUDA decode version, if written next to it before the call (untracked files travel):
    #   git show 41439eb:kernels/cuda/decode_sp.cu > kernels/cuda/decode_sp_v2.cu
    if [ -f kernels/cuda/decode_sp_v2.cu ]; then
        HS_CUDA_DECODE_SOURCE=$PWD/kernels/cuda/decode_sp_v2.cu python -m hs_kernels.bench_gpu --decode-only 2>&1 \
            | tee "$log/bench_decode_v2.log" | grep -i cuda | tail -12
    fi
    ;;
prefill)
    python -m pytest -q -p no:cacheprovider tests/test_kernels_gpu_triton_prefill.py 2>&1 | tee "$log/tests.log" | tail -5
    python -m hs_kernels.bench_prefill --no-tilelang --triton-configs 128:8:3:64:1,128:8:3,128:8:3:128,128:8:2:128 2>&1 \
        | tee "$log/bench_prefill.log" | tail -40 ;;
tl)
    python -m hs_kernels.bench_prefill --prebuild 2>&1 | grep -v "TileLang:" | tee "$log/prebuild.log" | grep -c "^built"
    grep FAILED "$log/prebuild.log"
    python -m pytest -q -p no:cacheprovider tests/test_kernels_gpu_prefill.py 2>&1 | tee "$log/tests.log" | tail -8
    python -m hs_kernels.bench_prefill --triton-configs "" --question 0 2>&1 | grep -v "TileLang:" \
        | tee "$log/bench_prefill.log" | tail -30 ;;
*) echo "unknown stage: $stage" >&2; exit 2 ;;
esac
