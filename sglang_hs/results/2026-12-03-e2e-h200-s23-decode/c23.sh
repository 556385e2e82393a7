# decode-step profiles at 4K: hs, stock without the overlap scheduler (hs turns it off), traces back
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
cd /tmp; date -u +"start %F %T UTC"
run() { name=$1; shift; timeout 300 python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out /tmp/$name --contexts 4096 --batches 1 \
  --output-tokens 64 --prefix 4096 --questions 1 --question-tokens 64 --profile-steps 12 "$@" > $OUT/$name.log 2>&1; echo "$name rc $? $(date -u +%T)"; }
run h --engines hs -- --cuda-graph-max-bs-decode 16
run s --engines stock -- --cuda-graph-max-bs-decode 16 --disable-overlap-schedule
for n in h s; do
  for d in /tmp/$n/profile-*; do [ -d $d ] && cp $d/*.trace.json.gz $OUT/$n-$(basename $d).trace.json.gz; done
  python - /tmp/$n/results.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("hs", "stock"):
    if k in d: print(k, [{x: r.get(x) for x in ("ttft_s", "tpot_s", "decode_tpot_s")} for r in d[k]["runs"]])
PY
done
ls -la $OUT
