# Run in the thirty-eighth session on an H100, not merged: suite 57 passed, grouped rows 1.5-3 % faster, the one-row
# decode 1.017x and 1.112x slower in two of six rows (kernels/BENCHMARKS.md, thirty-eighth session). Written in the
# thirty-seventh session: the decode's map entries loaded an iteration ahead (patch
# kernels/results/2026-12-06-s37-map-prefetch.patch, triton_decode.decode_kernel). The grouped rows are latency-bound
# (about 5 us a block a program on an H100, kernels/BENCHMARKS.md, thirty-seventh session) and each block waits for its
# page, then its map entries, then its data; the patch starts the next block's page and entries during this block's
# math. CPU: the interpreter suite passes; ptxas: d128 16 rows 245 -> 250 registers, no spill (d256 8 rows: 236 -> 248
# bytes of spill). One device call, no carry: the grouped probe on this tree, then the patch applied to a copy of it,
# its Triton decode suite, the one-row decode (decode_ab: patched, "now", against this tree, "before") and the grouped
# probe on the copy. Merge where the suite passes, the one-row decode holds (within 1 %) and the grouped rows get faster.
# From the repository root: bash THIS_FILE
source scripts/device_env.sh; export HS_KERNELS_CACHE=/tmp/hsk; mkdir -p $OUT
date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name --format=csv,noheader
root=$PWD
timeout 150 python kernels/probes/grouped_decode.py --prefixes 4096,16384,65536 2>&1 | tee $OUT/grouped-main.txt | grep "^|"
rm -rf /tmp/pf && mkdir -p /tmp/pf && tar --exclude=./.dev -cf - . | tar -xf - -C /tmp/pf
(cd /tmp/pf && patch -p1 -s < kernels/results/2026-12-06-s37-map-prefetch.patch) || { echo "patch failed"; exit 1; }
cd /tmp/pf && source scripts/device_env.sh  # /tmp/pp now points at the patched tree
timeout 200 python -m pytest -q -m gpu tests/test_kernels_gpu_decode.py -k "not cuda" > $OUT/prefetch-tests.log 2>&1
echo "tests rc $?"; tail -1 $OUT/prefetch-tests.log
timeout 100 python kernels/results/2026-12-05-s36-grouped-decode/decode_ab.py "$root/kernels" 2>&1 \
  | tee $OUT/decode-ab-prefetch.txt | grep "^|"
timeout 150 python kernels/probes/grouped_decode.py --prefixes 4096,16384,65536 2>&1 | tee $OUT/grouped-prefetch.txt \
  | grep "^|"
cd "$root" && source scripts/device_env.sh
echo "elapsed $SECONDS s"
