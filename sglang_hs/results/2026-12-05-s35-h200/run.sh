# Written in the thirty-fourth and thirty-fifth sessions; calls 1-3 ran on one H200 on 2026-12-05 21:53-22:02 UTC (their
# outputs beside this file, call N in callN/; sglang_hs/BENCHMARKS.md, thirty-fifth session).
# Calls on one machine, each within 30 s of the one before (a first server start builds the CUDA kernels: about
# 150 s for the first run, about 95 s for the others):
#   call 1, carry [".dev/sgl1"]:   bash sglang_hs/results/2026-12-05-s35-h200/run.sh 1
#     the streaming and store kernels' GPU suites (the extend's unsplit streaming call on keys read in place, the
#     thirty-fourth session's), the launch-path probe
#   call 2, carry [".dev/sgl2"]:   bash sglang_hs/results/2026-12-05-s35-h200/run.sh 2
#     short extends (sglang_hs/short_extends.py, thirty-fifth session): their GPU test (real CUDA graphs against the
#     eager extend), the host probe with the question both ways, then served: hs with --hs-extend-graph-tokens 64,
#     hs without it
#   call 3:                        bash sglang_hs/results/2026-12-05-s35-h200/run.sh 3
#     served: stock, then hs with the flag again (alternation)
#   call 4 (optional):             bash sglang_hs/results/2026-12-05-s35-h200/run.sh 4
#     where a cached question's time goes, hs (with the flag) and stock: bench_e2e --profile-steps, profile-*-cached.md
# Then bash kernels/results/2026-12-05-s34-fast-launch-call.sh (no carry).
# If the flag's GPU test passes and its cached questions are faster at the same output ids, make 64 the default
# (settings.py) and record the figures in sglang_hs/BENCHMARKS.md.
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
F="--contexts 4096 --batches 1 --output-tokens 16 --prefix 4096 --questions 3 --question-tokens 64"
ROWS=".@--hs-extend-graph-tokens=64"
if [ "$1" = 1 ]; then
  timeout 400 python -m pytest -q -m gpu tests/test_kernels_gpu_triton_stream.py tests/test_kernels_gpu_store.py \
    > $OUT/gpu-tests.log 2>&1
  echo "gpu tests rc $?"; tail -1 $OUT/gpu-tests.log
  timeout 60 python kernels/probes/launch_paths.py 2>&1 | tee $OUT/launch-paths.log | grep "^|"
  exit 0
fi
if [ "$1" = 2 ]; then
  timeout 300 python -m pytest -q -m gpu tests/test_sglang_gpu_short_extends.py > $OUT/short-extends-tests.log 2>&1
  echo "short extends tests rc $?"; tail -1 $OUT/short-extends-tests.log
  # where rows stop paying (MAX_ROW_BLOCKS, 8192 blocks read: 64 tokens on 8K): the bound lifted, GPU total both ways
  for pq in 4096-64 16384-64 32768-16; do
    timeout 60 python -m sglang_hs.probe_host --repeats 20 --prefix ${pq%-*} --question ${pq#*-} --row-blocks 100000 \
      > $OUT/probe-$pq.txt 2>&1
    echo "$pq: $(grep -E '^\| question, hs' $OUT/probe-$pq.txt | tr '\n' ' ')"
  done
  RUN_TIMEOUT=200 bash scripts/e2e_ab.sh $OUT/e2e $ROWS . -- $F -- --cuda-graph-max-bs-decode 16
  echo "elapsed $SECONDS s"; exit 0
fi
if [ "$1" = 3 ]; then
  RUN_TIMEOUT=200 bash scripts/e2e_ab.sh $OUT/e2e stock $ROWS -- $F -- --cuda-graph-max-bs-decode 16
  echo "elapsed $SECONDS s"; exit 0
fi
if [ "$1" = 4 ]; then
  RUN_TIMEOUT=280 bash scripts/e2e_ab.sh $OUT/prof $ROWS stock -- $F --profile-steps 4 -- --cuda-graph-max-bs-decode 16
  for f in $OUT/prof/*cached.md; do echo "== $f"; head -40 "$f"; done
  exit 0
fi
