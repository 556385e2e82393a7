# Written in the thirtieth session, run on an H100 in the thirty-fourth (logs: kernels/results/2026-12-05-s34-auto-given-bar-h100/;
# merged then, from kernels/results/2026-12-05-s30-auto-given-bar.patch): the CUDA prefix path's lower bar with the split given
# (CUDA_PREFIX_GIVEN_PAIRS = 3 x 2^23 pairs from 2^14 2:4 keys). One H200 call: the CUDA prefix suite (its auto-rule
# cases now include the new bar), then "auto, split given" against both paths after served 24586-, 28682- and
# 32778-token prefixes (the rule should take Triton at 1024 after 24586, CUDA at 1024 after 28682 and 32778).
# From the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
python -m pytest -q -m gpu tests/test_kernels_gpu_cuda_prefix.py > $OUT/prefix-tests.log 2>&1
echo "tests rc $?"; tail -1 $OUT/prefix-tests.log
for p in 24586 28682 32778; do
  python kernels/probes/prefix_path_timing.py --prefix $p --chunks 512,1024,2048,4096 2>&1 | grep -v Warn | tee -a $OUT/prefix-path.log
done
echo "elapsed $SECONDS s"
