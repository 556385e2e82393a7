# Thirty-first session (run in the thirty-second), the one device call that the session's last minutes allowed (after a call carrying .dev/sgl1):
# this one carries .dev/sgl2 and .dev/s31-before (mkdir -p .dev/s31-before && git archive 6a5056e sglang_hs | tar -x
# -C .dev/s31-before && cp sglang_hs/probe_host.py .dev/s31-before/sglang_hs/). (1) hs (the stacked pools, the
# allocator on SGLang's kernels) and stock serving the cached-question benchmark: output ids and TTFTs; (2) probe_host
# on this tree and on the tree before the bookkeeping change, same machine.
# From the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
F="--contexts 4096 --batches 1 --output-tokens 16 --prefix 4096 --questions 3 --question-tokens 64"
RUN_TIMEOUT=200 bash scripts/e2e_ab.sh $OUT/e2e . stock -- $F -- --cuda-graph-max-bs-decode 16
timeout 150 python -m sglang_hs.probe_host --profile 5 > $OUT/probe_host.txt 2>&1
(cd .dev/s31-before && timeout 100 python -m sglang_hs.probe_host > $OUT/probe_host_before.txt 2>&1)  # its own cwd: python -m puts the cwd first
echo "before (6a5056e):"; tail -8 $OUT/probe_host_before.txt
echo "now:"; grep -A8 "^| step" $OUT/probe_host.txt
echo "elapsed $SECONDS s"
