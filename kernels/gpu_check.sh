#!/usr/bin/env bash
# The GPU check on the device machine (H200), from the repository root, one stage per call (each under the
# 600 s limit). Logs go to $OUT/<stage>/; the last lines printed are the tables.
#   decode:  carry nothing (TileLang's cases then skip). GPU tests of the decode, compression and streaming
#            kernels; the decode table; the streaming table; the kernel choice across shapes (CUDA graph replays);
#            the CUDA rows again for each kernels/cuda/decode_sp_v*.cu.
#   prefill: carry nothing. GPU tests of the Triton prefill; its table, the question-after-a-cached-prefix
#            table and where copying a 2:4 prefix dense first pays.
#   tl:      carry .dev/site.tar.xz. TileLang prefill: compile every tested/benchmarked variant, tests, benchmark.
#   probes:  carry nothing. The instruction-rate and layout probes (kernels/probes), then the wgmma.sp Trans-Both
#            loop against the oracle and its timing (about a minute).
set -o pipefail
stage=${1:?usage: gpu_check.sh decode|prefill|tl|probes}
source scripts/device_env.sh
export HS_KERNELS_CACHE=/tmp/hsk
log="${OUT:-/tmp/hs_out}/$stage"; mkdir -p "$log"
nvidia-smi -L
case "$stage" in
decode)
    python -m pytest -q -p no:cacheprovider tests/test_kernels_gpu_decode.py tests/test_kernels_gpu_triton_stream.py \
        tests/test_kernels_gpu_compress.py 2>&1 | tee "$log/tests.log" | tail -5
    python -m hs_kernels.bench_gpu --decode-only 2>&1 | tee "$log/bench_decode.log" | tail -30
    python -m hs_kernels.bench_stream 2>&1 | tee "$log/bench_stream.log" | tail -7
    python -m hs_kernels.bench_gpu --kernel-choice --cuda-graphs 2>&1 | tee "$log/kernel_choice.log" | tail -32
    # a candidate CUDA decode source written next to the shipped one before the call (untracked files travel)
    for alt in kernels/cuda/decode_sp_v*.cu; do
        [ -f "$alt" ] || continue
        HS_CUDA_DECODE_SOURCE=$PWD/$alt python -m hs_kernels.bench_gpu --decode-only 2>&1 \
            | tee "$log/bench_decode_$(basename "$alt" .cu).log" | grep CUDA | tail -40
    done ;;
prefill)
    python -m pytest -q -p no:cacheprovider tests/test_kernels_gpu_triton_prefill.py 2>&1 | tee "$log/tests.log" | tail -5
    python -m hs_kernels.bench_prefill --no-tilelang --triton-configs 128:8:3 --densify-chunks 64,128,256,512,1024,4096 \
        2>&1 | tee "$log/bench_prefill.log" | tail -40 ;;
tl)
    python -m hs_kernels.bench_prefill --prebuild 2>&1 | grep -v "TileLang:" | tee "$log/prebuild.log" | grep -c "^built"
    grep FAILED "$log/prebuild.log"
    python -m pytest -q -p no:cacheprovider tests/test_kernels_gpu_prefill.py 2>&1 | tee "$log/tests.log" | tail -8
    python -m hs_kernels.bench_prefill --triton-configs "" --question 0 2>&1 | grep -v "TileLang:" \
        | tee "$log/bench_prefill.log" | tail -30 ;;
probes)
    for probe in mma_rate mma_sp_layout wgmma_rate wgmma_sp_layout wgmma_tile_layout; do
        nvcc -gencode arch=compute_90a,code=sm_90a -O3 -o "/tmp/$probe" "kernels/probes/$probe.cu" 2>/dev/null \
            && "/tmp/$probe" 2>&1 | tee "$log/$probe.log"
    done
    python kernels/probes/trans_both_sp.py 2>&1 | tee "$log/trans_both_sp.log" | tail -14 ;;
*) echo "unknown stage: $stage" >&2; exit 2 ;;
esac
