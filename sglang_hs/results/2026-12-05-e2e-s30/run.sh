# Thirtieth session, 2026-12-05, branch s30 (main + breakable prefill graphs, opt-in). The twenty-ninth session's run.sh
# timed hs-breakable out at 170 s with no server log kept; this one gives it 300 s, keeps each server log and samples
# the breakable server's log every 10 s (what the capture is doing), then hs eager and stock as baselines.
# A call carrying .dev/sgl1 first, then this one carrying .dev/sgl2 within 30 s. From the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
F="--contexts 4096 --batches 1 --output-tokens 16 --prefix 4096 --questions 3 --question-tokens 64"
run() {  # name, engine, hs flags
  (cd /tmp && timeout ${RUN_TIMEOUT:-130} python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out /tmp/e-$1 --engines $2 \
    --hs-flags="$3" $F -- --cuda-graph-max-bs-decode 16 > $OUT/$1.log 2>&1); echo "$1 rc $? at ${SECONDS}s"
  cp /tmp/e-$1/results.json $OUT/$1.json 2>/dev/null; cp /tmp/e-$1/$2.log $OUT/$1.server.log 2>/dev/null
}
(while sleep 10; do echo "$SECONDS: $(tail -c 400 /tmp/e-hs-breakable/hs.log 2>/dev/null | tr '\r\n' '||' | tail -c 240)"; done) > $OUT/breakable-progress.log &
RUN_TIMEOUT=300 run hs-breakable hs "--cuda-graph-backend-prefill breakable"
kill %1
run hs-eager hs ""
run stock stock ""
grep -iE "error|Traceback|capture" $OUT/hs-breakable.server.log | tail -8
tail -4 $OUT/breakable-progress.log | cut -c1-200
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
