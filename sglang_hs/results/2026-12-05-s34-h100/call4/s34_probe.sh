source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
for r in 1 2; do
  timeout 50 python -m sglang_hs.probe_host --repeats 20 > $OUT/probe_now$r.txt 2>&1
  echo "now$r: $(grep -E '^\| (question|decode step), (hs|floor)' $OUT/probe_now$r.txt | tr '\n' ' ')"
  (cd .dev/s34-start && timeout 50 python -m sglang_hs.probe_host --repeats 20 > $OUT/probe_start$r.txt 2>&1)
  echo "start$r: $(grep -E '^\| (question|decode step), (hs|floor)' $OUT/probe_start$r.txt | tr '\n' ' ')"
done
echo "elapsed $SECONDS s"
