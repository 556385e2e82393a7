# Twenty-fifth session, 2026-12-04 14:34-14:53 UTC, one H200 machine (device calls 3-8; call 3 carried .dev/sgl1 and
# ran the decode GPU suite). "overlap" = this checkout's working tree before the SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP
# default was added (hs with SGLang's overlap scheduler: whole-forward WAR barrier, two-chunk reserve, the first
# decode step compresses the prompt); "main" = .scratch/main from `git archive 15edb35 kernels sglang_hs` (code of
# f8b89c1: overlap scheduler forced off); "stock" = stock SGLang, triton backend, its overlap scheduler on.
# call 4 (carry .dev/sgl2 .scratch/main):
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk
RUN_TIMEOUT=300 bash scripts/e2e_ab.sh $OUT .scratch/main . -- --contexts 4096,32768 --batches 1 --output-tokens 64 \
  --prefix 65536 --questions 3 --question-tokens 64 -- --cuda-graph-max-bs-decode 16
# call 5: the same flags, variants . stock .scratch/main
# call 6: RUN_TIMEOUT=200 ... . .scratch/main stock -- --contexts 4096 --batches 8 --output-tokens 128 --prefix 4096 \
#   --questions 2 --question-tokens 64 -- --cuda-graph-max-bs-decode 16   (r1 paid the batch-8 shapes' Triton compile)
# call 7: the same as call 6 with variants .scratch/main .
# call 8: the same as call 6 with variant . only and SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP=1 exported
