# call B: SGLang piece 2; end to end, branch graph-metadata (.scratch/graph) against main (this tree), alternated graph, main, graph
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT; R=$PWD
cd /tmp; date -u +"start %F %T UTC"
i=0
for v in graph main graph; do
  i=$((i+1))
  if [ $v = graph ]; then src=$R/.scratch/graph; else src=$R; fi
  ln -sfn $src/sglang_hs /tmp/pp/sglang_hs; ln -sfn $src/kernels /tmp/pp/hs_kernels
  python -c "import sglang_hs.backend as b, inspect; print('$v', '_graph_width' in inspect.getsource(b))"
  prof=""; [ $i -ge 2 ] && prof="--profile-steps 12"
  timeout 240 python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out /tmp/r$i-$v --contexts 4096 --batches 1 --output-tokens 64 \
    --prefix 65536 --questions 3 --question-tokens 64 --engines hs $prof -- --cuda-graph-max-bs-decode 16 > $OUT/r$i-$v.log 2>&1
  echo "$v rc $? $(date -u +%T)"
done
for i in 1 2 3; do python - /tmp/r$i-*/results.json <<'PY'
import hashlib, json, sys
d = json.load(open(sys.argv[1]))["hs"]
r = d["runs"][0]
print(sys.argv[1].split('/')[-2], "cold %.3f cached %.3f" % (d["prefix"]["cold_ttft_s"], d["prefix"]["cached_ttft_s"]),
      "4K ttft %.3f tpot %.2f ms decode %.2f ms" % (r["ttft_s"], 1e3 * r["tpot_s"], 1e3 * r["decode_tpot_s"]),
      d["prefix"]["cached_tokens"], hashlib.md5(str(d["prefix"]["output_ids"]).encode()).hexdigest()[:8])
PY
done | tee $OUT/summary.txt
cp /tmp/r2-main/profile-hs/*.trace.json.gz $OUT/main-decode.trace.json.gz 2>/dev/null
cp /tmp/r3-graph/profile-hs/*.trace.json.gz $OUT/graph-decode.trace.json.gz 2>/dev/null
ls -la $OUT
