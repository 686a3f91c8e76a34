#!/bin/bash
source .devdeps/install.sh
OUTROOT=${OUT:-/tmp/out}
R=/tmp/r; rm -rf $R; mkdir -p $R
export OUT=$R
bash bench/gpu_run.sh > $R/gpu_run.log 2>&1
L=build-gpu/kernels/libkvstash_cuda.so
for i in 1 2 3; do python3 bench/attn_bench.py --lib $L --shapes "" --runs 100 | grep "^seal"; done > $R/seal3.log 2>&1
tar czf $OUTROOT/run.tgz -C /tmp r
grep -E "Ok:|Fail:|FAIL" $R/gpu_run.log; grep -E "^B=|^seal" $R/gpu_run.log; cat $R/seal3.log; grep -B3 -A20 "FAIL\|Error\|ERROR" $R/testlog.txt | head -40
