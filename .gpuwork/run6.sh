#!/bin/bash
source .devdeps/install.sh
OUTROOT=${OUT:-/tmp/out}
R=/tmp/r; rm -rf $R; mkdir -p $R
export OUT=$R
bash bench/gpu_run.sh > $R/gpu_run.log 2>&1
L=build-gpu/kernels/libkvstash_cuda.so
ncu --clock-control none -k regex:seal_ -c 1 --set full --import-source no -o $R/seal \
  python3 bench/attn_bench.py --shapes "" --runs 1 --lib $L > $R/ncu_seal.log 2>&1
ncu --import $R/seal.ncu-rep --page details > $R/seal_details.txt 2>&1
ncu --import $R/seal.ncu-rep --page source --csv --print-source sass > $R/seal_source.csv 2>&1
rm -f $R/*.ncu-rep
tar czf $OUTROOT/run.tgz -C /tmp r
grep -E "Ok:|Fail:|FAIL" $R/gpu_run.log; grep -E "^B=|^seal" $R/gpu_run.log; grep -E "seal_fast|Duration|Issued Ipc|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|DRAM Throughput" $R/seal_details.txt | head
