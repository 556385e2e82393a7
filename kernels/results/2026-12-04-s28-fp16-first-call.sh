# The twenty-eighth session's planned first device call (no machine was lent that session), on branch
# fp16-cuda-prefill (it holds main): the pruning kernel's pending check, then the fp16 CUDA prefill (every library
# built in parallel first, or the suites' builds take minutes). Run from the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
python - <<'PY'
import time, torch
from concurrent.futures import ThreadPoolExecutor
from hs_kernels import cuda_prefill
libs = [(g, d, (), t) for g in (1, 2, 3, 4, 5, 6, 7, 8, 16, 48, 64) for d in (64, 128) for t in (torch.bfloat16, torch.float16)]
libs += [(4, d, ("HS_FP16_V_TMA",), torch.float16) for d in (64, 128)]
t0 = time.time()
with ThreadPoolExecutor(16) as ex:
    list(ex.map(lambda p: cuda_prefill.library(*p), libs))
print(f"built {len(libs)} libraries in {time.time() - t0:.0f} s", flush=True)
PY
python -m pytest -q -m gpu tests/test_kernels_gpu_compress.py > $OUT/compress-tests.log 2>&1; echo "compress tests rc $?"; tail -2 $OUT/compress-tests.log
python kernels/probes/prune_tiles_timing.py 2>&1 | tee $OUT/prune-tiles.log | tail -6
python -m pytest -q -m gpu tests/test_kernels_gpu_cuda_prefill.py tests/test_kernels_gpu_cuda_prefix.py > $OUT/prefill-tests.log 2>&1; echo "prefill tests rc $?"; tail -3 $OUT/prefill-tests.log
echo "elapsed $SECONDS s"
python kernels/probes/cuda_prefill_head_dims.py 2>&1 | tee $OUT/head-dims.log
python kernels/probes/cuda_prefill_head_dims.py --dtype float16 --define HS_FP16_V_TMA 2>&1 | tee -a $OUT/head-dims.log
echo "elapsed $SECONDS s"
# the auto rule takes the CUDA prefix path for fp16 as for bf16: the chunks after a served 32K prefix, both dtypes
for dt in float16 bfloat16; do python kernels/probes/prefix_path_timing.py --dtype $dt --chunks 1024,4096 > $OUT/prefix-$dt.log 2>&1; echo "prefix probe $dt rc $?"; done
grep -E "^\| 0 \| this" $OUT/prefix-*.log | cut -c1-200
echo "elapsed $SECONDS s"
