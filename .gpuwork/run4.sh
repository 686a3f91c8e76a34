#!/bin/bash
source .devdeps/install.sh
OUTROOT=${OUT:-/tmp/out}
R=/tmp/r; rm -rf $R; mkdir -p $R
export OUT=$R
( rm -rf /tmp/v && mkdir /tmp/v && cp -r $(ls -A | grep -v -e build-gpu -e '^.git$') /tmp/v/ && cd /tmp/v && sed -i 's/^#define STAGES 3$/#define STAGES 4/' kernels/attention.cu && grep -n "define STAGES" kernels/attention.cu && meson setup build-gpu -Dcuda=enabled -Dfuzz=disabled > $R/v_setup.log 2>&1 && ninja -C build-gpu kernels/libkvstash_cuda.so > $R/v_build.log 2>&1 ) > $R/v.log 2>&1 &
bash bench/gpu_run.sh > $R/gpu_run.log 2>&1
wait
L=build-gpu/kernels/libkvstash_cuda.so
V=/tmp/v/build-gpu/kernels/libkvstash_cuda.so
for i in 1 2; do
 echo "== base $i"; python3 bench/attn_bench.py --lib $L --no-seal --runs 60 | grep "^B="
 echo "== stages4 $i"; python3 bench/attn_bench.py --lib $V --no-seal --runs 60 | grep "^B="
done > $R/ab.log 2>&1
tar czf $OUTROOT/run.tgz -C /tmp r
grep -E "Ok:|Fail:|FAIL" $R/gpu_run.log; grep -E "^B=|^seal" $R/gpu_run.log; cat $R/ab.log; cat $R/v.log; tail -3 $R/v_build.log
