# Twenty-ninth session, 2026-12-05, one H200. The call before carried .dev/sgl1
# (kernels/results/2026-12-05-s29-fp16-second-call.sh); this one carries .dev/sgl2. From the repository root:
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk
# the cached question's gap: trace_summary's GPU idle share and host waits by hs range (profile-*-cached.md)
python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out $OUT/e --contexts 4096 --batches 1 --output-tokens 16 \
  --prefix 4096 --questions 3 --question-tokens 64 --engines hs,stock --profile-steps 2 -- --cuda-graph-max-bs-decode 16 \
  > $OUT/bench.log 2>&1; echo "bench rc $?"
find $OUT -name "*.trace.json.gz" -delete
tail -4 $OUT/e/results.md; echo "elapsed $SECONDS s"
