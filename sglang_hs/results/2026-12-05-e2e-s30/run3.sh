# Written in the thirtieth session for the next (run2.sh's empty Triton cache made SGLang's own kernels compile past
# the device time left). A call carrying .dev/sgl1 first (any kernel work that does not serve), then this one carrying
# .dev/sgl2 within 30 s. (1) hs as the machine's first server: the first cached question after the streaming kernel's
# runtime split count and the 1-128-token warm-up (main before them: 1.423 and 2.044 s on fresh machines, then
# 0.07-0.11); (2) hs and stock profiled on the cached question (r*-profile-*-cached.md: GPU idle, host waits by range).
# From the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk
F="--contexts 4096 --batches 1 --output-tokens 16 --prefix 4096 --questions 3 --question-tokens 64"
RUN_TIMEOUT=170 bash scripts/e2e_ab.sh $OUT/first . -- $F -- --cuda-graph-max-bs-decode 16
grep -h "warm-up done" $OUT/first/*.server.log | cut -c1-160
RUN_TIMEOUT=170 bash scripts/e2e_ab.sh $OUT/profile . stock -- $F --profile-steps 2 -- --cuda-graph-max-bs-decode 16
head -20 $OUT/profile/r1-*-profile-hs-cached.md 2>/dev/null

# (3, added in the thirty-first session) host time without a server, on the kernels the runs above built
# (python -m sglang_hs.probe_host: the pool's bookkeeping, a 64-token question after a 4096-token prefix and a decode
# step, each against a one-launch floor; cProfile's own-time table of the question), then the same probe on the tree
# before the bookkeeping was done for all layers at once, if carried in this call as .dev/s31-before (make it with
# mkdir -p .dev/s31-before && git archive 6a5056e sglang_hs | tar -x -C .dev/s31-before
# && cp sglang_hs/probe_host.py .dev/s31-before/sglang_hs/)
timeout 120 python -m sglang_hs.probe_host --profile 5 > $OUT/probe_host.txt 2>&1
if [ -d .dev/s31-before ]; then
  (cd .dev/s31-before && timeout 120 python -m sglang_hs.probe_host > $OUT/probe_host_before.txt 2>&1)  # python -m puts the cwd first
  echo "before (6a5056e):"; tail -8 $OUT/probe_host_before.txt
fi
echo "now:"; tail -8 $OUT/probe_host.txt
