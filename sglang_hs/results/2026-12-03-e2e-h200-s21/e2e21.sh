# Device call 3 of the twenty-first session (09:05-09:09 UTC), on the machine of call 2 (SGLang unpacked there by
# scripts/device_env.sh with .dev/sgl1, then .dev/sgl2 carried). Main's plugin: `git archive main sglang_hs` under
# .scratch/main. Run from /tmp: from the repository root, `python -m` puts the checkout's own sglang_hs first on
# sys.path, so the symlink in /tmp/pp is not what loads (call 2's "main" runs all ran the branch's plugin).
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT; R=$PWD
cd /tmp
for v in main branch; do
  if [ $v = main ]; then ln -sfn $R/.scratch/main/sglang_hs /tmp/pp/sglang_hs; else ln -sfn $R/sglang_hs /tmp/pp/sglang_hs; fi
  python -c "import sglang_hs.backend as b, inspect; print('$v', b.__file__, 'splits' if '_prefix_reads' in inspect.getsource(b) else 'per layer')"
  timeout 200 python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out $OUT/r-$v --contexts 8192 --batches 1 --output-tokens 16 \
    --prefix 65536 --questions 5 --question-tokens 512 --engines hs -- --cuda-graph-max-bs-decode 16 > $OUT/r-$v.log 2>&1
done
