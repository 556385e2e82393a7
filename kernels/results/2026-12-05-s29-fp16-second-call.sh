# Twenty-ninth session's second device call (device time short after four refusals), on branch s29-device (the fp16 branch
# plus breakable prefill graphs; only the former is exercised here): the
# fp16 CUDA prefill after 3c93e47 (V by TMA, rounded in place, the only fp16 path; the bf16 SASS is byte-identical
# to main's, so the bf16 cases are not re-run): the fp16 cases of both CUDA prefill suites, the compressed-prefill
# and auto-rule cases. 
# Run from the repository root: bash THIS_FILE
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
echo "prefill tests rc $?"; tail -2 $OUT/prefill-tests.log
# the head-dims probe ran as a second command on the warm machine:
#   python kernels/probes/cuda_prefill_head_dims.py 2>&1 | tee $OUT/head-dims.log
echo "elapsed $SECONDS s"
