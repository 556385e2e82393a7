# device call 3 of the twenty-second session: main vs split-maps end to end, alternated (main, branch, main, branch)
# Device calls 3 (this script) and 4 (the same with "for v in branch main", i from 5) of the twenty-second session, on
# machine 1 (SGLang unpacked by scripts/device_env.sh: .dev/sgl1 carried in call 2, .dev/sgl2 here). Main: git archive
# a232dfe kernels sglang_hs under .scratch/main; branch: split-maps at 4eaecb6. Runs 1 and 2 hit the 140 s timeout
# (first start on the machine: compiles); the summary lines of runs 3-6 are in summary.txt (only 8 files come back).
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT; R=$PWD
cd /tmp
date -u +"start %F %T UTC"
i=0
for v in main branch main branch; do
  i=$((i+1))
  if [ $v = main ]; then src=$R/.scratch/main; ln -sfn $src/sglang_hs /tmp/pp/sglang_hs; ln -sfn $src/kernels /tmp/pp/hs_kernels
  else ln -sfn $R/sglang_hs /tmp/pp/sglang_hs; ln -sfn $R/kernels /tmp/pp/hs_kernels; fi
  python -c "import sglang_hs, hs_kernels.gpu as g, inspect; print('$v', sglang_hs.__file__, 'maps' if 'k_rest' in inspect.getsource(g) else 'no maps')"
  timeout 140 python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out $OUT/r$i-$v --contexts 4096 --batches 1 --output-tokens 16 \
    --prefix 65536 --questions 5 --question-tokens 64 --engines hs -- --cuda-graph-max-bs-decode 16 > $OUT/r$i-$v.log 2>&1
  echo "$v rc $? $(date -u +%T)"
done
for i in 1 2 3 4; do python - $OUT/r$i-*/results.json <<'PY'
import hashlib, json, sys
d = json.load(open(sys.argv[1]))["hs"]
print(sys.argv[1].split('/')[-2], "cold %.3f cached %.3f" % (d["prefix"]["cold_ttft_s"], d["prefix"]["cached_ttft_s"]),
      "run ttft %.3f tpot %.4f" % (d["runs"][0]["ttft_s"], d["runs"][0]["tpot_s"]), d["kv"]["hs_stats"].get("code"),
      hashlib.md5(str(d["prefix"]["output_ids"]).encode()).hexdigest()[:8])
PY
done
