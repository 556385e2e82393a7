#!/usr/bin/env bash
# GPU check on the device machine (H200), from the repository root, with .dev/site.tar.xz carried
# (../shared/tools/device-bundle): compile the kernels, run the GPU tests, print the benchmark tables
# (decode and compression: bench_gpu; prefill, Triton rows: bench_prefill).
set -o pipefail
OUT=${OUT:-/tmp/hs_out}; mkdir -p "$OUT" /tmp/site /tmp/pp
tar -xJf .dev/site.tar.xz -C /tmp/site || exit 1
ln -sfn "$PWD/kernels" /tmp/pp/hs_kernels
export PYTHONPATH=/tmp/site:/tmp/pp:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi -L
python -m hs_kernels.bench_gpu --prebuild 2>&1 | grep -v "TileLang:" | tee "$OUT/prebuild.log"
python -m pytest -q -p no:cacheprovider --maxfail=10 tests/test_kernels_gpu_compress.py tests/test_kernels_gpu_decode.py \
    tests/test_kernels_gpu_triton_prefill.py 2>&1 | tee "$OUT/tests.log" | tail -40
python -m hs_kernels.bench_gpu "$@" 2>&1 | grep -v "TileLang:" | tee "$OUT/bench.log" | tail -30
python -m hs_kernels.bench_prefill --no-tilelang 2>&1 | tee "$OUT/bench_prefill.log" | tail -16
