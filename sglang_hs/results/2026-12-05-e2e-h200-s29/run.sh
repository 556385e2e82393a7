# Twenty-ninth session, 2026-12-05: written, never run (no machine lent for it). On main with the breakable
# prefill patch applied (git apply sglang_hs/results/2026-12-05-s29-breakable-prefill.patch). One H200: a call carrying
# .dev/sgl1 first (any kernel run), then this one carrying .dev/sgl2 within 30 s. hs with SGLang's breakable prefill
# graphs, hs eager (its default), stock; one server at a time. From the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
F="--contexts 4096 --batches 1 --output-tokens 16 --prefix 4096 --questions 3 --question-tokens 64"
run() {  # name, engine, hs flags
  (cd /tmp && timeout ${RUN_TIMEOUT:-130} python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out /tmp/e-$1 --engines $2 \
    --hs-flags="$3" $F -- --cuda-graph-max-bs-decode 16 > $OUT/$1.log 2>&1); echo "$1 rc $? at ${SECONDS}s"
  cp /tmp/e-$1/results.json $OUT/$1.json 2>/dev/null; tail -3 /tmp/e-$1/results.md 2>/dev/null | head -1
}
RUN_TIMEOUT=170 run hs-breakable hs "--cuda-graph-backend-prefill breakable"
run hs-eager hs ""
run stock stock ""
python - $OUT <<'PY'
import glob, hashlib, json, os, sys
for name in ("hs-breakable", "hs-eager", "stock"):
    path = os.path.join(sys.argv[1], name + ".json")
    if not os.path.exists(path):
        print(name, "no result"); continue
    res = json.load(open(path)); d = res["stock" if "stock" in res else "hs"]; p = d.get("prefix", {})
    runs = " ".join(f"ttft {r['ttft_s']:.3f} decode {1e3 * r['decode_tpot_s']:.2f} ms" for r in d.get("runs", []) if "error" not in r)
    ids = hashlib.md5(str(p.get("output_ids")).encode()).hexdigest()[:8] if p else "-"
    print(f"| {name} | {runs} | cold {p.get('cold_ttft_s', float('nan')):.3f} | cached "
          f"{' '.join('%.3f' % x for x in p.get('cached_ttfts_s', []))} | ids {ids} |")
PY
