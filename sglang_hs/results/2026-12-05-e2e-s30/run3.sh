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

# (3, added in the thirty-first session) the attention backend's host time per layer without a server, on the
# kernels the runs above built: a 64-token question after a 4096-token prefix, a decode step, each against a
# one-launch floor, and cProfile's own-time table of the question (whose Python the host time is)
python -m sglang_hs.probe_host --profile 5 > $OUT/probe_host.txt 2>&1; tail -8 $OUT/probe_host.txt
