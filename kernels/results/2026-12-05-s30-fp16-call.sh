# Thirtieth session's first device call (carries .dev/sgl1 for the SGLang call after it): the kept fp16 CUDA prefill
# path's GPU tests and its head-dims probe in one command (the twenty-ninth session ran them as two commands on one
# warm machine): the fp16 cases of both CUDA prefill suites, the compressed-prefill and auto-rule cases, then
# bf16 and fp16 at d 64 and 128 against cuDNN in the same dtype. Run from the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
python - <<'PY'
import time, torch
from concurrent.futures import ThreadPoolExecutor
from hs_kernels import cuda_prefill
libs = [(g, d, (), t) for g in (1, 3, 4, 6, 8, 16, 64) for d in (64, 128) for t in (torch.bfloat16, torch.float16)]
t0 = time.time()
with ThreadPoolExecutor(16) as ex:
    list(ex.map(lambda p: cuda_prefill.library(*p), libs))
print(f"built {len(libs)} libraries in {time.time() - t0:.0f} s", flush=True)
PY
python -m pytest -q -m gpu tests/test_kernels_gpu_cuda_prefill.py tests/test_kernels_gpu_cuda_prefix.py \
  -k "float16 and not bfloat16 or fp16 or compressed_prefill or auto_takes" > $OUT/prefill-tests.log 2>&1
echo "prefill tests rc $?"; tail -1 $OUT/prefill-tests.log
python kernels/probes/cuda_prefill_head_dims.py 2>&1 | tee $OUT/head-dims.log
echo "elapsed $SECONDS s"
