# Twenty-seventh session, 2026-12-04, one H200 per call group (calls 2-5 one machine, 7-8 another). Source first:
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk
# call 2 carried .dev/sgl1 (kernel suites, kernels/results/2026-12-04-s27-prefill-any-group-h200.log)
# call 3 (carry .dev/sgl2 and a `git archive bfef52d kernels sglang_hs` tree as .scratch/bfef):
F="--contexts 4096,32768 --batches 1 --output-tokens 64 --prefix 65536 --questions 3 --question-tokens 64 -- --cuda-graph-max-bs-decode 16"
RUN_TIMEOUT=200 bash scripts/e2e_ab.sh $OUT/a . .scratch/bfef -- $F
RUN_TIMEOUT=200 bash scripts/e2e_ab.sh $OUT/b stock -- $F
# call 4:
F="--contexts 4096 --batches 8 --output-tokens 128 --prefix 4096 --questions 2 --question-tokens 64 -- --cuda-graph-max-bs-decode 16"
RUN_TIMEOUT=170 bash scripts/e2e_ab.sh $OUT/a . . -- $F
SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP=0 RUN_TIMEOUT=170 bash scripts/e2e_ab.sh $OUT/b . -- $F
# call 5 (from /tmp):
python -m sglang_hs.bench_e2e --shape llama-3.1-8b --out /tmp/e --contexts 4096 --batches 1 --output-tokens 16 \
  --prefix 4096 --questions 1 --question-tokens 64 --engines hs,stock --profile-steps 2 -- --cuda-graph-max-bs-decode 16
# call 7 carried .dev/sgl1 (compress GPU suite and kernels/probes/prune_tiles_timing.py); call 8 (carry .dev/sgl2 and
# a `git archive 64acf28 kernels sglang_hs` tree as .scratch/pre):
F="--contexts 4096 --batches 1 --output-tokens 64 --prefix 4096 --questions 3 --question-tokens 64 -- --cuda-graph-max-bs-decode 16"
RUN_TIMEOUT=170 bash scripts/e2e_ab.sh $OUT . .scratch/pre -- $F
