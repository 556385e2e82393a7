#!/usr/bin/env bash
# The fortieth session's device calls (README.md maps them), from the repository root.
#   here:           bash kernels/results/2026-12-06-s40-balanced-decode/run.sh prepare   (fills .scratch/s40)
#   on the device:  bash kernels/results/2026-12-06-s40-balanced-decode/run.sh N         (carry [".scratch/s40"])
# Calls 1-6 measured candidate sources against the then shipped one: run them on 6f4f3c4's tree.
set -o pipefail
here=kernels/results/2026-12-06-s40-balanced-decode
s=.scratch/s40
if [ "$1" = prepare ]; then
    rm -rf $s && mkdir -p $s/head && git archive 6f4f3c4 kernels | tar -x -C $s/head && rm -rf $s/head/kernels/results
    for p in $here/decode_sp_*.patch; do
        v=$(basename "$p" .patch); patch -s -o "$s/$v.cu" $s/head/kernels/cuda/decode_sp.cu "$p"
    done
    for v in 0:0 2:"n_blocks / 2 / splits" 7:"n_blocks * 7 / 8 / splits"; do
        sed "s|n_blocks \* 3 / 4 / splits|${v#*:}|" $s/decode_sp_steal.cu > "$s/decode_sp_steal${v%%:*}.cu"
    done
    git show 535242c:kernels/cuda/decode_sp.cu > $s/decode_sp_nomin.cu  # balanced whatever the rows' length
    cp $here/*.py $s/
    exit
fi
source scripts/device_env.sh
export HS_KERNELS_CACHE=/tmp/hsk
nvidia-smi -L
log=$OUT/s40; mkdir -p "$log"
src() { [ "$1" = shipped ] && echo "$PWD/kernels/cuda/decode_sp.cu" || echo "$PWD/$s/decode_sp_$1.cu"; }
splits() {  # candidate, counts
    echo "== $1 splits"
    HS_CUDA_DECODE_SOURCE=$(src "$1") timeout 150 python kernels/probes/decode_timing.py --splits --counts "$2" 2>&1 \
        | tee -a "$log/splits_$1.log" | grep -v "per-kernel\|Warn\|warn"
}
suite() {  # pytest's -k, repetitions
    for r in $(seq "$2"); do
        timeout 250 python -m pytest -q -p no:cacheprovider tests/test_kernels_gpu_decode.py -k "$1" 2>&1 \
            | tee "$log/tests_$r.log" | tail -2
    done
}
timing_against_head() {
    mkdir -p /tmp/old && ln -sfn "$PWD/$s/head/kernels" /tmp/old/hs_kernels
    for v in head new head new; do
        echo "== $v"
        pp=$PYTHONPATH probe=kernels/probes
        [ $v = head ] && pp=/tmp/old:$PYTHONPATH probe=$s/head/kernels/probes
        PYTHONPATH=$pp timeout 150 python $probe/decode_timing.py --splits --counts 6,8,16 2>&1 \
            | tee -a "$log/splits_$v.log" | grep -v "per-kernel\|Warn\|warn"
    done
}
against_head() {  # slots
    mkdir -p /tmp/old && ln -sfn "$PWD/$s/head/kernels" /tmp/old/hs_kernels
    for v in head new head new; do
        echo "== $v"
        if [ $v = head ]; then pp=/tmp/old:$PYTHONPATH; else pp=$PYTHONPATH; fi
        for n in $1; do
            PYTHONPATH=$pp timeout 100 python $s/slots.py "$n" 6,8,12,16 2>&1 | tee -a "$log/slots_$v.log" | grep slots
        done
    done
}
case "$1" in
1)  # L2 prefetch sizes and an evict-first policy on cp.async
    for v in shipped pf256 pf128 ef256 shipped pf256; do splits $v 6,8; done
    for v in shipped pf256 shipped pf256; do
        HS_CUDA_DECODE_SOURCE=$(src $v) timeout 150 python kernels/probes/decode_timing.py --layers 8 --counts 6,8 \
            2>&1 | tee -a "$log/layers_$v.log" | tail -5
    done
    HS_CUDA_DECODE_SOURCE=$(src pf256) suite cuda 1 ;;
2)  # ncu: cuDNN's decode and ours
    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy \
        --section MemoryWorkloadAnalysis --section WarpStateStats python $s/ncu_decode.py > "$log/ncu_decode.txt" 2>&1
    grep -E "^  [a-zA-Z_]|Duration|DRAM Throughput|Grid Size|Block Size|Registers Per|Achieved Occ|Dynamic Shared" \
        "$log/ncu_decode.txt" | cut -c1-140 ;;
3|4)  # each program's start and end; equal programs per SM
    HS_CUDA_DECODE_SOURCE=$(src ts) timeout 200 python $s/tail_probe.py 2>&1 | tee "$log/tail.log"
    [ "$1" = 4 ] && timeout 300 python $s/balance_probe.py 2>&1 | tee "$log/balance.log" ;;
5)  # the balanced prototype (3/4 fixed)
    HS_CUDA_DECODE_SOURCE=$(src steal) suite cuda 2
    for v in shipped steal shipped steal; do splits $v 6,8,12,16; done ;;
6)  # the fixed share; the end times with 3/4 fixed
    HS_CUDA_DECODE_SOURCE=$(src stealts) timeout 200 python $s/tail_probe.py 2>&1 | tee "$log/tail_steal.log"
    for v in shipped steal0 steal2 steal steal7 shipped steal0 steal2 steal steal7; do splits $v 8,16; done ;;
7)  # the shipped kernel (on this tree) against 6f4f3c4's
    suite "" 2; timing_against_head
    timeout 200 python -m hs_kernels.bench_gpu --decode-only 2>&1 | tee "$log/bench_decode.log" | tail -22 ;;
8|9)  # call 8 ran a one-wave guard since dropped: on this tree both are call 9 but for slots 4
    suite "" 1; suite balanced 2; against_head "$([ "$1" = 8 ] && echo "3 4" || echo 3)" ;;
10)  # short rows: 535242c's kernel (balanced at any length) and this tree's, balanced against fixed
    for v in nomin shipped nomin shipped; do
        echo "== $v"
        HS_CUDA_DECODE_SOURCE=$(src $v) timeout 100 python $s/short_rows.py 2>&1 | tee -a "$log/short_$v.log" | grep B=
    done
    suite cuda 1 ;;
11)  # outgrown counters stay allocated; the test fails on a copy whose balance_counters frees them
    suite cuda 1; suite outgrow 2
    mkdir -p /tmp/mut && cp -r kernels /tmp/mut/hs_kernels
    sed -i 's/            _OUTGROWN.append(buf)/            pass/' /tmp/mut/hs_kernels/cuda_decode.py
    PYTHONPATH=/tmp/mut:$PYTHONPATH suite outgrow 1 ;;
12)  # the headline decode table on the final tree
    timeout 200 python -m hs_kernels.bench_gpu --decode-only > "$log/bench_decode.log" 2>&1
    grep -E "cuDNN SDPA|S_K=0 S_V=1 slots=3 splits=(6|8|16) |S_K=1 S_V=1 slots=3 splits=8 |via decode_attention" \
        "$log/bench_decode.log" ;;
13)  # branch s40-review (launch takes the counters on its stream; shared_base without a dead branch): the decode GPU
    # suite, then the decode table, to compare with call 12's
    suite "" 1; suite outgrow 1
    timeout 200 python -m hs_kernels.bench_gpu --decode-only > "$log/bench_decode.log" 2>&1
    grep -E "cuDNN SDPA|S_K=0 S_V=1 slots=3 splits=(6|8|16) |S_K=(1 S_V=1|0 S_V=0) slots=3 splits=8 " \
        "$log/bench_decode.log"; grep "via decode_attention" "$log/bench_decode.log" ;;
*) echo "usage: run.sh prepare|1..13" >&2; exit 2 ;;
esac
