#!/bin/bash
source .devdeps/install.sh
OUTROOT=${OUT:-/tmp/out}
R=/tmp/r; rm -rf $R; mkdir -p $R
export OUT=$R
meson setup build-gpu -Dcuda=enabled -Dwerror=true -Dfuzz=disabled > $R/setup.log 2>&1
ninja -C build-gpu > $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
L=build-gpu/kernels/libkvstash_cuda.so
ncu --clock-control none -k regex:seal_ -c 1 --set full --import-source no -o $R/seal \
  python3 bench/attn_bench.py --shapes 1x512 --runs 2 --lib $L > $R/ncu_seal.log 2>&1
ncu --import $R/seal.ncu-rep --page details > $R/seal_details.txt 2>&1
ncu --import $R/seal.ncu-rep --page source --csv --print-source sass > $R/seal_source.csv 2>&1
ncu --clock-control none -k regex:attn_kernel -c 1 --set full --import-source no -o $R/attn \
  python3 bench/attn_bench.py --shapes 8x32768 --runs 1 --no-seal --lib $L > $R/ncu_attn.log 2>&1
ncu --import $R/attn.ncu-rep --page details > $R/attn_details.txt 2>&1
ncu --import $R/attn.ncu-rep --page source --csv --print-source sass > $R/attn_source.csv 2>&1
rm -f $R/*.ncu-rep
tar czf $OUTROOT/run.tgz -C /tmp r
ls -la $R; grep -E "Duration|Issued Ipc|Warp Cycles Per Issued|No Instruction|Registers Per|Achieved Occupancy|Memory Throughput|DRAM Throughput" $R/seal_details.txt $R/attn_details.txt | head -30
