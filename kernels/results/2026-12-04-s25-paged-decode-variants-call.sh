source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk2; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
for v in old A B C old A B C; do
  export HS_CUDA_DECODE_SOURCE=$PWD/.scratch/d$v.cu; [ $v = old ] && export HS_CUDA_DECODE_SOURCE=$PWD/.scratch/decode_sp_old.cu
  echo "## $v" >> $OUT/probe.log; python kernels/probes/paged_decode.py >> $OUT/probe.log 2>&1; echo "probe $v rc $?"
done
CUOBJ=$(ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1); echo "cuobjdump: $CUOBJ"
for so in /tmp/hsk2/*.so; do $CUOBJ -sass $so > $OUT/$(basename $so .so).sass 2>&1; done; ls -la $OUT
grep -E "^## |^\| [0-9]" $OUT/probe.log
