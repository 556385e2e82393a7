source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -m pytest -q -m gpu tests/test_kernels_gpu_triton_stream.py tests/test_kernels_gpu_store.py tests/test_kernels_gpu_triton_prefill.py tests/test_kernels_gpu_decode.py tests/test_kernels_gpu_cuda_prefix.py tests/test_kernels_gpu_compress.py > $OUT/gpu-tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/gpu-tests.log
python kernels/probes/stream_decode.py > $OUT/stream-decode.log 2>&1; echo "probe rc $?"; tail -15 $OUT/stream-decode.log
