# Written in the thirty-fourth session, not yet run: the fast Triton launches (kernels/launch.py, patch
# kernels/results/2026-12-05-s34-fast-launch.patch, branch fast-launch). One device call, no carry needed: the patch
# applied to a copy of this tree, then its GPU test and the suites of every kernel it launches (write, streaming,
# prefill, the decode's merges), then the launch-path probe on both trees (this one first). Merge the patch if every
# suite passes and the entry points' host time falls. Then measure it served (sglang_hs/results/2026-12-05-s35-h200/run.sh
# with the patched tree as a variant). From the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
root=$PWD
timeout 60 python kernels/probes/launch_paths.py 2>&1 | tee $OUT/launch-paths-main.log | grep "^|"
rm -rf /tmp/fl && mkdir -p /tmp/fl && tar --exclude=./.dev -cf - . | tar -xf - -C /tmp/fl
(cd /tmp/fl && patch -p1 -s < kernels/results/2026-12-05-s34-fast-launch.patch) || { echo "patch failed"; exit 1; }
cd /tmp/fl && source scripts/device_env.sh  # /tmp/pp now points at the patched tree
timeout 420 python -m pytest -q -m gpu tests/test_kernels_gpu_launch.py tests/test_kernels_gpu_store.py \
  tests/test_kernels_gpu_triton_stream.py tests/test_kernels_gpu_decode.py tests/test_kernels_gpu_triton_prefill.py \
  > $OUT/fast-launch-tests.log 2>&1
echo "tests rc $?"; tail -1 $OUT/fast-launch-tests.log
timeout 60 python kernels/probes/launch_paths.py 2>&1 | tee $OUT/launch-paths-fast.log | grep "^|"
cd "$root" && source scripts/device_env.sh
echo "elapsed $SECONDS s"
