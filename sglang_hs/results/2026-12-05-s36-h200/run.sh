# Thirty-sixth session: short extends whose rows share their block reads a tile at a time (the Triton decode's
# grouped rows, `decode_attention(groups=...)`), and short new prompts as rows. Calls on one machine, each within 30 s
# of the one before; "before" is the tree of a6b7782 (`mkdir -p .dev/before && git archive a6b7782 kernels sglang_hs |
# tar -x -C .dev/before`):
#   call 1, carry [".dev/sgl1", ".dev/before"]: bash sglang_hs/results/2026-12-05-s36-h200/run.sh 1
#     the Triton decode's GPU suite (the grouped rows' cases among them), the one-row Triton decode against the
#     kernel before, the grouped rows against each row alone (kernels/probes/grouped_decode.py)
#   call 2, carry [".dev/sgl2", ".dev/before"]: bash sglang_hs/results/2026-12-05-s36-h200/run.sh 2
#     (SGLang comes in two pieces: on a fresh machine a call carrying ".dev/sgl1" must come first, e.g. call 1 or
#     `source scripts/device_env.sh`, as the thirty-seventh session found: its first call 2 ran without SGLang)
#     the short extends' GPU test (real CUDA graphs against the eager extend: rows alone, grouped, new prompts);
#     probe_host (host and total of a question, the rows grouped or not)
#   call 3: bash sglang_hs/results/2026-12-05-s36-h200/run.sh 3
#     served, a cached 64-token question after a 16K prefix (its rows read too much there for the tree before:
#     eager) and a cold 64-token prompt (eager before): this tree, then the tree before
#   call 4: bash sglang_hs/results/2026-12-05-s36-h200/run.sh 4
#     served: stock, then this tree again
#   (calls 3-4 at a 16K prefix since the thirty-seventh session: at 64K the tiles' bound, MAX_TILE_BLOCKS, now sends
#   the question to the eager extend, as the tree before did)
#   call 6, carry [".dev/sgl2", ".dev/before"] after a call carrying ".dev/sgl1": bash .../run.sh 6
#     served, this tree and the tree before alternating twice (the thirty-ninth session: a machine's first server
#     answered its cached questions slower, so one pair in one order does not compare)
#   call 5, carry [".dev/before"]: bash sglang_hs/results/2026-12-05-s36-h200/run.sh 5
#     the grouped rows with the thirty-seventh session's split rule, at 2 and 3 stages
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
F="--contexts 4096,80 --batches 1 --output-tokens 16 --prefix 16384 --questions 3 --question-tokens 64"
if [ "$1" = 0 ]; then  # the least that checks the kernel change, for a short budget (carry [".dev/before"])
  timeout 150 python -m pytest -q -m gpu tests/test_kernels_gpu_decode.py -k "(grouped or matches_reference) and not cuda" \
    > $OUT/decode-tests.log 2>&1
  echo "decode tests rc $?"; tail -1 $OUT/decode-tests.log; exit 0
fi
if [ "$1" = 1 ]; then
  # the CUDA decode kernel is unchanged: its cases left out (no nvcc build in this call)
  timeout 200 python -m pytest -q -m gpu tests/test_kernels_gpu_decode.py -k "not cuda" > $OUT/decode-tests.log 2>&1
  echo "decode tests rc $?"; tail -1 $OUT/decode-tests.log
  timeout 100 python kernels/results/2026-12-05-s36-grouped-decode/decode_ab.py .dev/before/kernels 2>&1 \
    | tee $OUT/decode-ab.txt | grep "^|"
  timeout 150 python kernels/probes/grouped_decode.py --prefixes 4096,16384,65536 2>&1 \
    | tee $OUT/grouped-decode.txt | grep "^|"
  echo "elapsed $SECONDS s"; exit 0
fi
if [ "$1" = 2 ]; then
  timeout 200 python -m pytest -q -m gpu tests/test_sglang_gpu_short_extends.py > $OUT/short-extends-tests.log 2>&1
  echo "short extends tests rc $?"; tail -1 $OUT/short-extends-tests.log
  # the grouped rows' launch: split, warp and stage counts (thirty-seventh session)
  timeout 100 python kernels/probes/grouped_decode.py --prefixes 4096,65536 --splits 16,64 --warps 8 --stages 3 \
    2>&1 | tee $OUT/grouped-decode-launch.txt | grep "^|"
  for pq in 16384-64-16 16384-64-1 65536-64-16; do
    IFS=- read p q r <<< "$pq"
    timeout 90 python -m sglang_hs.probe_host --repeats 20 --prefix $p --question $q --tile-rows $r \
      --row-blocks 100000 > $OUT/probe-$pq.txt 2>&1
    echo "$pq: $(grep -E '^\| question, hs' $OUT/probe-$pq.txt | tr '\n' ' ')"
  done
  echo "elapsed $SECONDS s"; exit 0
fi
if [ "$1" = 3 ]; then
  RUN_TIMEOUT=220 bash scripts/e2e_ab.sh $OUT/e2e . .dev/before -- $F -- --cuda-graph-max-bs-decode 16
  echo "elapsed $SECONDS s"; exit 0
fi
if [ "$1" = 4 ]; then
  RUN_TIMEOUT=220 bash scripts/e2e_ab.sh $OUT/e2e stock . -- $F -- --cuda-graph-max-bs-decode 16
  echo "elapsed $SECONDS s"; exit 0
fi
if [ "$1" = 6 ]; then
  RUN_TIMEOUT=220 bash scripts/e2e_ab.sh $OUT/e2e . .dev/before . .dev/before -- $F -- --cuda-graph-max-bs-decode 16
  echo "elapsed $SECONDS s"; exit 0
fi
if [ "$1" = 5 ]; then
  timeout 150 python -m pytest -q -m gpu tests/test_kernels_gpu_decode.py -k "grouped and not cuda" > $OUT/grouped-tests.log 2>&1
  echo "grouped tests rc $?"; tail -1 $OUT/grouped-tests.log
  timeout 200 python kernels/probes/grouped_decode.py --prefixes 4096,16384,32768,65536 --stages 3 \
    2>&1 | tee $OUT/grouped-decode-rule.txt | grep "^|"
  echo "elapsed $SECONDS s"; exit 0
fi
