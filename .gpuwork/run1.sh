#!/bin/bash
# session 3 run 1: validate 43b62a4/df6aa49/27e86dc, fixed-overhead floor,
# (1,32K) kernel breakdown, seal chunk-loop patch A/B.
source .devdeps/install.sh
OUTROOT=${OUT:-/tmp/out}
R=/tmp/r; rm -rf $R; mkdir -p $R
export OUT=$R
bash bench/gpu_run.sh > $R/gpu_run.log 2>&1
L=build-gpu/kernels/libkvstash_cuda.so
python3 bench/attn_bench.py --lib $L --no-seal --shapes 1x512,8x512,1x4096,1x32768 --runs 100 > $R/overhead.log 2>&1
# variant: seal chunk loop
rm -rf /tmp/v && mkdir /tmp/v && cp -r $(ls -A | grep -v -e build-gpu -e '^.git$') /tmp/v/ && cp .gpuwork/seal_patched.cu /tmp/v/kernels/seal.cu
( cd /tmp/v && meson setup build-gpu -Dcuda=enabled -Dwerror=true -Dfuzz=disabled > $R/v_setup.log 2>&1 && ninja -C build-gpu > $R/v_build.log 2>&1 && meson test -C build-gpu kernels.seal --print-errorlogs > $R/v_test.log 2>&1; cp build-gpu/meson-logs/testlog.txt $R/v_testlog.txt )
cuobjdump --dump-resource-usage /tmp/v/build-gpu/kernels/libkvstash_cuda.so 2>&1 | grep -E "Function|REG" | grep -A1 seal > $R/v_resources.txt
for i in 1 2 3; do
  echo "== A $i"; python3 bench/attn_bench.py --lib $L --shapes 1x512 --runs 100 | grep seal
  echo "== B $i"; python3 bench/attn_bench.py --lib /tmp/v/build-gpu/kernels/libkvstash_cuda.so --shapes 1x512 --runs 100 | grep seal
done > $R/seal_ab.log 2>&1
ncu --clock-control none -k regex:"attn" -c 4 --section SpeedOfLight --section LaunchStats --section Occupancy \
  python3 bench/attn_bench.py --shapes 1x32768 --runs 1 --no-seal --lib $L > $R/ncu_1x32k.txt 2>&1
ncu --clock-control none -k regex:seal_kernel -c 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats \
  python3 bench/attn_bench.py --shapes 1x512 --runs 2 --lib /tmp/v/build-gpu/kernels/libkvstash_cuda.so > $R/ncu_seal_v.txt 2>&1
tar czf $OUTROOT/run1.tgz -C /tmp r; tail -30 $R/gpu_run.log; cat $R/seal_ab.log; tail -12 $R/overhead.log
