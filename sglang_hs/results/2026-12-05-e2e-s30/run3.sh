# Written in the thirtieth session for the next (run2.sh's empty Triton cache made SGLang's own kernels compile past
# the device time left). A call carrying .dev/sgl1 first (any kernel work that does not serve), then this one carrying
# .dev/sgl2 within 30 s. (1) hs as the machine's first server: the first cached question after the streaming kernel's
# runtime split count and the 1-128-token warm-up (main before them: 1.423 and 2.044 s on fresh machines, then
# 0.07-0.11); (2) hs and stock profiled on the cached question (profile-*-cached.md: GPU idle, host waits by range).
# From the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
F="--contexts 4096 --batches 1 --output-tokens 16 --prefix 4096 --questions 3 --question-tokens 64"
(cd /tmp && timeout 170 python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out /tmp/e-first --engines hs $F \
  -- --cuda-graph-max-bs-decode 16 > $OUT/first.log 2>&1); echo "first hs rc $? at ${SECONDS}s"
cp /tmp/e-first/results.json $OUT/first.json; cp /tmp/e-first/hs.log $OUT/first.server.log
grep -E "warm-up done" $OUT/first.server.log | cut -c1-160
(cd /tmp && timeout 330 python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out /tmp/e-prof --engines hs,stock $F \
  --profile-steps 2 -- --cuda-graph-max-bs-decode 16 > $OUT/profile.log 2>&1); echo "profile rc $? at ${SECONDS}s"
cp /tmp/e-prof/results.json /tmp/e-prof/results.md /tmp/e-prof/profile-*.md $OUT/ 2>/dev/null
python - $OUT <<'PY'
import json, os, sys
d = json.load(open(os.path.join(sys.argv[1], "first.json")))["hs"]["prefix"]
print(f"first server: cold {d['cold_ttft_s']:.3f} s, cached questions {' '.join('%.3f' % x for x in d['cached_ttfts_s'])} s")
PY
head -20 $OUT/profile-hs-cached.md 2>/dev/null
