# Thirtieth session: the streaming kernel's split count and lengths as runtime values (one compile per tile shape),
# densify's lengths likewise. Carries .dev/sgl1 (for the SGLang call after it) and .scratch/mainsrc (`git archive main
# kernels sglang_hs`, the baseline). The GPU suites of both kernels, then per tree (this one, main) the compile count
# of a serving mix and the streaming benchmarks. From the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
python -m pytest -q -m gpu tests/test_kernels_gpu_triton_stream.py tests/test_kernels_gpu_triton_prefill.py > $OUT/gpu-tests.log 2>&1
echo "tests rc $? at ${SECONDS}s"; tail -1 $OUT/gpu-tests.log
for tree in . .scratch/mainsrc; do
  ln -sfn "$(cd $tree && pwd)/kernels" /tmp/pp/hs_kernels
  echo "== $tree"
  TRITON_CACHE_DIR=/tmp/tc-$RANDOM python kernels/probes/stream_compiles.py 2>&1 | tail -2
  python -m hs_kernels.bench_stream 2>&1 | grep triton
done > $OUT/ab.log 2>&1
ln -sfn "$PWD/kernels" /tmp/pp/hs_kernels
cat $OUT/ab.log; echo "elapsed $SECONDS s"
