#!/bin/bash
source .devdeps/install.sh
OUTROOT=${OUT:-/tmp/out}
R=/tmp/r; rm -rf $R; mkdir -p $R
export OUT=$R
bash bench/gpu_run.sh > $R/gpu_run.log 2>&1
L=build-gpu/kernels/libkvstash_cuda.so
python3 bench/attn_bench.py --lib $L --no-seal --shapes 1x512,8x512,1x4096 --runs 100 > $R/overhead.log 2>&1
for c in 1 2 3; do
  echo "== GEN_COST $c"
  KVS_CUDA_GEN_COST=$c python3 bench/attn_bench.py --lib $L --no-seal --shapes 1x32768,32x8192,8x32768,1x512 --runs 50 | grep "^B="
done > $R/sweep.log 2>&1
ncu --clock-control none -k regex:"attn" -c 2 --section SpeedOfLight --section LaunchStats \
  python3 bench/attn_bench.py --shapes 1x32768 --runs 1 --no-seal --lib $L > $R/ncu_1x32k.txt 2>&1
tar czf $OUTROOT/run.tgz -C /tmp r
grep -E "Ok:|Fail:|FAIL" $R/gpu_run.log; grep -E "^B=|^seal" $R/gpu_run.log; cat $R/sweep.log; grep "^B=" $R/overhead.log; grep -E "attn|Duration" $R/ncu_1x32k.txt
