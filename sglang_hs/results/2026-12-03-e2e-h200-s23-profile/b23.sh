# call B: SGLang piece 2; hs then stock, 64-token questions after a 64K cached prefix, with profiles
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT; R=$PWD
cd /tmp; date -u +"start %F %T UTC"
timeout 560 python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out /tmp/e --contexts 4096 --batches 1 --output-tokens 8 \
  --prefix 65536 --questions 3 --question-tokens 64 --engines hs,stock --profile-steps 2 -- --cuda-graph-max-bs-decode 16 > $OUT/b.log 2>&1
echo "rc $? $(date -u +%T)"
ls -la /tmp/e
for f in /tmp/e/profile-*.md; do echo "== $f"; head -60 $f; done
python - <<'PY'
import json
d = json.load(open('/tmp/e/results.json'))
for k, v in d.items():
    if isinstance(v, dict) and 'prefix' in v:
        p = v['prefix']; print(k, {x: p[x] for x in p if 'ttft' in x or 'cached' in x and 'ids' not in x})
PY
tar --exclude="*.json.gz" -czf $OUT/e.tgz -C /tmp e; ls -la $OUT
