# Thirtieth session, after the runtime split count and the warm-up ladder: hs (eager prefill, its default) on a fresh
# Triton cache, as on a fresh machine, so the first cached question shows what it compiles (main: 2.044 s and 1.423 s
# on fresh machines, call2-first and call4). A call carrying .dev/sgl1 first, then this one carrying .dev/sgl2.
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk TRITON_CACHE_DIR=/tmp/tc-e2e; mkdir -p $OUT
F="--contexts 4096 --batches 1 --output-tokens 16 --prefix 4096 --questions 3 --question-tokens 64"
(cd /tmp && timeout 200 python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out /tmp/e-new --engines hs $F \
  -- --cuda-graph-max-bs-decode 16 > $OUT/hs.log 2>&1); echo "hs rc $? at ${SECONDS}s"
cp /tmp/e-new/results.json $OUT/hs.json; cp /tmp/e-new/hs.log $OUT/hs.server.log
grep -E "warm-up|Capture target decode CUDA graph end|POST /generate" $OUT/hs.server.log | cut -c1-120 | tail -12
echo "last Triton compiles (UTC):"; find /tmp/tc-e2e -name "*.json" ! -name "__grp__*" -printf "%TT %f\n" | sort | tail -8
python - $OUT <<'PY'
import hashlib, json, os, sys
d = json.load(open(os.path.join(sys.argv[1], "hs.json")))["hs"]; p = d["prefix"]
runs = " ".join(f"ttft {r['ttft_s']:.3f} decode {1e3 * r['decode_tpot_s']:.2f} ms" for r in d["runs"])
print(f"| hs | {runs} | cold {p['cold_ttft_s']:.3f} | cached {' '.join('%.3f' % x for x in p['cached_ttfts_s'])} | "
      f"ids {hashlib.md5(str(p['output_ids']).encode()).hexdigest()[:8]} |")
PY
