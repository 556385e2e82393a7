# Thirtieth session's first device call (carries .dev/sgl1 for the SGLang call after it): the kept fp16 CUDA prefill
# path's GPU tests and its head-dims probe in one command (the twenty-ninth session ran them as two commands on one
# warm machine): the twenty-ninth session's second call (fp16 cases of both CUDA prefill suites, the compressed-prefill
# and auto-rule cases), then bf16 and fp16 at d 64 and 128 against cuDNN in the same dtype. From the repository
# root: bash THIS_FILE
source kernels/results/2026-12-05-s29-fp16-second-call.sh
python kernels/probes/cuda_prefill_head_dims.py 2>&1 | tee $OUT/head-dims.log
echo "elapsed $SECONDS s"
