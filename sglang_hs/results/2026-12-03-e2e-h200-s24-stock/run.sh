# call 2 (SGLang piece 2 carried; piece 1 in call 1): hs (main at c625484: graph-captured decode metadata, no pool work
# on steps that open no page) against stock SGLang (triton backend, its overlap scheduler on, as users run it)
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
cd /tmp; date -u +"start %F %T UTC"
timeout 570 python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out /tmp/s24 --contexts 4096,32768 --batches 1 --output-tokens 64 \
  --prefix 65536 --questions 3 --question-tokens 64 --engines hs,stock -- --cuda-graph-max-bs-decode 16 > $OUT/bench.log 2>&1
echo "rc $? $(date -u +%T)"; cp /tmp/s24/results.json /tmp/s24/results.md $OUT/ 2>/dev/null
python - /tmp/s24/results.json <<'PY'
import hashlib, json, sys
d = json.load(open(sys.argv[1]))
for e in ("hs", "stock"):
    if e not in d: continue
    p = d[e]["prefix"]
    print(e, "cold %.3f cached %.3f" % (p["cold_ttft_s"], p["cached_ttft_s"]), p["cached_tokens"])
    for r in d[e]["runs"]:
        if "error" in r: print(" ", r["context"], r["error"]); continue
        print(" ", r.get("context"), r.get("batch"), "ttft %.3f tpot %.2f decode %.2f ms" % (r["ttft_s"], 1e3 * r["tpot_s"], 1e3 * r["decode_tpot_s"]))
PY
