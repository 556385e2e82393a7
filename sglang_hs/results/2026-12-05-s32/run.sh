# Thirty-second session, for a device budget of under ten minutes (after a call carrying .dev/sgl1): this call carries
# .dev/sgl2 and .dev/s31-before (mkdir -p .dev/s31-before && git archive 6a5056e sglang_hs | tar -x -C .dev/s31-before
# && cp sglang_hs/probe_host.py .dev/s31-before/sglang_hs/). The probes first (host time of the pool's bookkeeping,
# the stats snapshot, a cached question and a decode step, this tree and the tree before the stacked bookkeeping), then
# hs and stock serving the cached-question benchmark (output ids, TTFTs), as far as the time allows.
# From the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python -m sglang_hs.probe_host --profile 5 > $OUT/probe_host.txt 2>&1
echo "now:"; grep -A9 "^| step" $OUT/probe_host.txt
(cd .dev/s31-before && timeout 100 python -m sglang_hs.probe_host > $OUT/probe_host_before.txt 2>&1)  # python -m puts the cwd first
echo "before (6a5056e):"; grep -A9 "^| step" $OUT/probe_host_before.txt
F="--contexts 4096 --batches 1 --output-tokens 16 --prefix 4096 --questions 3 --question-tokens 64"
RUN_TIMEOUT=200 bash scripts/e2e_ab.sh $OUT/e2e . stock -- $F -- --cuda-graph-max-bs-decode 16
echo "elapsed $SECONDS s"
