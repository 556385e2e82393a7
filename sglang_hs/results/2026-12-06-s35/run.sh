# For the thirty-fifth session: the thirty-fourth session's extend changes served on a GPU (unsplit streaming on keys
# read in place, ranges only while profiling), against the tree the thirty-fourth session began from and stock SGLang.
# Calls on one machine, each within 30 s of the one before (a first server start builds the CUDA kernels: about
# 150 s for the first run, about 95 s for the others):
#   call 1, carry [".dev/sgl1"]:                    bash sglang_hs/results/2026-12-06-s35/run.sh 1
#   call 2, carry [".dev/sgl2", ".dev/s34-start"]:   bash sglang_hs/results/2026-12-06-s35/run.sh 2
#   call 3 (optional), carry [".dev/s34-start"]:     bash sglang_hs/results/2026-12-06-s35/run.sh 3
#   call 4 (optional):                               bash sglang_hs/results/2026-12-06-s35/run.sh 4
# Call 4 profiles hs and stock serving a cached question (bench_e2e --profile-steps: profile-*-cached.md), to say where
# the cached question's time outside hs's attention goes (the thirty-fourth session: e2e 0.077-0.094 s, attention
# host time 22-40 ms, stock's whole question 0.027 s).
# where .dev/s34-start is `mkdir -p .dev/s34-start && git archive b5e36cd kernels sglang_hs | tar -x -C .dev/s34-start`
# (kernels/results excluded by hand if the carry is tight: rm -rf .dev/s34-start/kernels/results).
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
if [ "$1" = 1 ]; then  # the streaming and store kernels' GPU suites (the extend's k_rows, unsplit paths), launch costs
  timeout 400 python -m pytest -q -m gpu tests/test_kernels_gpu_triton_stream.py tests/test_kernels_gpu_store.py \
    > $OUT/gpu-tests.log 2>&1
  echo "gpu tests rc $?"; tail -1 $OUT/gpu-tests.log
  timeout 60 python kernels/probes/launch_paths.py 2>&1 | tee $OUT/launch-paths.log | grep "^|"
  exit 0
fi
if [ "$1" = 3 ]; then  # host time of the question, two processes of each tree alternated
  for r in 1 2; do
    timeout 60 python -m sglang_hs.probe_host --repeats 30 > $OUT/probe_now$r.txt 2>&1
    (cd .dev/s34-start && timeout 60 python -m sglang_hs.probe_host --repeats 30 > $OUT/probe_start$r.txt 2>&1)
  done
  for f in $OUT/probe_*.txt; do echo "$(basename $f): $(grep -E '^\| question, (hs|floor)' $f | tr '\n' ' ')"; done
  exit 0
fi
if [ "$1" = 4 ]; then
  F="--contexts 4096 --batches 1 --output-tokens 16 --prefix 4096 --questions 3 --question-tokens 64 --profile-steps 4"
  RUN_TIMEOUT=280 bash scripts/e2e_ab.sh $OUT/prof . stock -- $F -- --cuda-graph-max-bs-decode 16
  for f in $OUT/prof/*cached.md; do echo "== $f"; head -40 "$f"; done
  exit 0
fi
F="--contexts 4096 --batches 1 --output-tokens 16 --prefix 4096 --questions 3 --question-tokens 64"
RUN_TIMEOUT=200 bash scripts/e2e_ab.sh $OUT/e2e . .dev/s34-start stock -- $F -- --cuda-graph-max-bs-decode 16
echo "elapsed $SECONDS s"
