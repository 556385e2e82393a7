# s34 call B (after a call carrying .dev/sgl1): ranges A/B, split sweep, question profile, e2e hs / hs-candidate / stock
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
for r in 1 2; do
  timeout 80 python -m sglang_hs.probe_host --repeats 30 > $OUT/probe_now$r.txt 2>&1
  (cd .dev/s34-before && timeout 80 python -m sglang_hs.probe_host --repeats 30 > $OUT/probe_before$r.txt 2>&1)
done
for f in $OUT/probe_now1.txt $OUT/probe_before1.txt $OUT/probe_now2.txt $OUT/probe_before2.txt; do echo "$(basename $f): $(grep -E '^\| (question|decode step), hs' $f | tr '\n' ' ')"; done
echo "elapsed $SECONDS s"
echo "| prefix | question | splits | round | host ms | total ms | aten ops |"
for shape in "4096 64" "16384 64" "4096 256" "16384 256"; do
  set -- $shape; timeout 60 python .dev/probe_splits.py --prefix $1 --question $2 --layers 16 --repeats 15 2>&1 | grep "^| [0-9]" | tee -a $OUT/splits.txt
done
echo "elapsed $SECONDS s"
timeout 60 python .dev/probe_prof.py > $OUT/prof.txt 2>&1
echo "elapsed $SECONDS s"
F="--contexts 4096 --batches 1 --output-tokens 16 --prefix 4096 --questions 3 --question-tokens 64"
RUN_TIMEOUT=150 bash scripts/e2e_ab.sh $OUT/e2e . .dev/cand stock -- $F -- --cuda-graph-max-bs-decode 16
echo "elapsed $SECONDS s"
