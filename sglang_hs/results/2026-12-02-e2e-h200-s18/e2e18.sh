source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date
for v in new old; do
  if [ $v = old ]; then ln -sfn $PWD/.scratch/old/kernels /tmp/pp/hs_kernels; else ln -sfn $PWD/kernels /tmp/pp/hs_kernels; fi
  python -c "import hs_kernels.gpu as g, inspect; print('$v', 'pool kinds' if 'kinds or (_pool_kinds' in inspect.getsource(g) else 'entry kinds')"
  python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out $OUT/e2e_$v --contexts 32768 --batches 1 --output-tokens 16 --prefix 32768 --questions 8 --engines hs -- --cuda-graph-max-bs-decode 16 > $OUT/e2e_$v.log 2>&1
  rm -rf $OUT/e2e_$v/model
  python -c "import json; r=json.load(open('$OUT/e2e_$v/results.json'))['hs']; print('$v first', r.get('first_ttft_s'), 'runs', r.get('runs'), 'prefix', r.get('prefix'), r.get('error'))"
  date
done
