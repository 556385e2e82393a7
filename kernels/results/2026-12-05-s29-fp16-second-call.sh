# Twenty-ninth session's second device call, on branch fp16-cuda-prefill after 3c93e47 (fp16 V by TMA, rounded in
# place, the only fp16 path): both CUDA prefill suites, the head-dims probe in both dtypes, the prefix probe in fp16.
# It also carries .dev/sgl1 for the next call's SGLang run. Run from the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
python - <<'PY'
import time, torch
from concurrent.futures import ThreadPoolExecutor
from hs_kernels import cuda_prefill
libs = [(g, d, (), t) for g in (1, 2, 3, 4, 5, 6, 7, 8, 16, 48, 64) for d in (64, 128) for t in (torch.bfloat16, torch.float16)]
t0 = time.time()
with ThreadPoolExecutor(16) as ex:
    list(ex.map(lambda p: cuda_prefill.library(*p), libs))
print(f"built {len(libs)} libraries in {time.time() - t0:.0f} s", flush=True)
PY
python -m pytest -q -m gpu tests/test_kernels_gpu_cuda_prefill.py tests/test_kernels_gpu_cuda_prefix.py > $OUT/prefill-tests.log 2>&1; echo "prefill tests rc $?"; tail -2 $OUT/prefill-tests.log
python kernels/probes/cuda_prefill_head_dims.py 2>&1 | tee $OUT/head-dims.log
python kernels/probes/prefix_path_timing.py --dtype float16 --chunks 1024,4096 > $OUT/prefix-float16.log 2>&1; echo "prefix probe rc $?"
grep -E "^\| 0 \| this" $OUT/prefix-float16.log | cut -c1-200
echo "elapsed $SECONDS s"
