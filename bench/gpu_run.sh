#!/bin/bash
# gpu_run.sh - everything the GPU machine does in one call: build with CUDA
# (warnings as errors), run the 'gpu' test suite, then the benchmark.
# Logs and JSON go to $OUT.  Run from the project root, under bash, after
# `source <devdeps>/install.sh`.  Usage: bench/gpu_run.sh [bench args...]
# (SANITIZE=1: the attention test under memcheck and racecheck as well;
# NCU=1: Nsight Compute sections and the tile loop's stalls by opcode,
# bench/ncu_stalls.py, where the machine lets ncu read the counters;
# SUSTAINED=S: seconds of back-to-back calls before the power-capped
# timing, default 3, 0 skips it).
set -o pipefail
out=${OUT:-/tmp/kvs-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv \
	2>&1 | tee "$out/gpu.txt"
meson setup build-gpu -Dcuda=enabled -Dwerror=true -Dfuzz=disabled \
	>"$out/setup.log" 2>&1 || { tail -40 "$out/setup.log"; exit 1; }
ninja -C build-gpu 2>&1 | tail -5 | tee "$out/build.log" || exit 1
cuobjdump --dump-resource-usage build-gpu/kernels/libkvstash_cuda.so \
	2>&1 | grep -E "Function|REG" | head -40 >"$out/resources.txt"
meson test -C build-gpu --suite gpu --print-errorlogs --num-processes 1 \
	2>&1 | tail -15
cp build-gpu/meson-logs/testlog.txt "$out/testlog.txt"
grep -E "worst|seed|SKIP|error" build-gpu/meson-logs/testlog.txt | head -40
if [ -n "$SANITIZE" ]; then
	# the attention test under compute-sanitizer: memory errors, then
	# shared-memory races
	cs=$(command -v compute-sanitizer ||
		ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
	for tool in memcheck racecheck; do
		"$cs" --tool "$tool" --error-exitcode 9 \
			build-gpu/tests/gpu/test_kernels_attention \
			>"$out/$tool.log" 2>&1
		echo "$tool: exit $?, $(grep -E 'SUMMARY' "$out/$tool.log")"
	done
fi
PYTHONUNBUFFERED=1 python3 bench/attn_bench.py \
	--lib build-gpu/kernels/libkvstash_cuda.so --json "$out/bench.json" \
	--sustained "${SUSTAINED:-3}" \
	"$@" 2>&1 | tee "$out/bench.log"
# the plan's choice of build (the 3-CTA one at small batch) against the
# 4-CTA build forced (flags 8), in one process
PYTHONUNBUFFERED=1 python3 bench/attn_bench.py --flags 0 --alt-flags 8 \
	--no-seal --shapes 1x32768,2x32768,8x32768 --runs 30 \
	--lib build-gpu/kernels/libkvstash_cuda.so 2>&1 | tee "$out/bench_builds.log"
# the cluster plan where the plan takes it (batch 8 and 16 at 8 KV heads)
# against the split-and-merge plans (flags 256, NO_CLUSTER), in one process
PYTHONUNBUFFERED=1 python3 bench/attn_bench.py --flags 0 --alt-flags 256 \
	--no-seal --shapes 8x32768,8x131072,16x8192 --runs 30 \
	--lib build-gpu/kernels/libkvstash_cuda.so 2>&1 | tee "$out/bench_cluster.log"
if [ -n "$NCU" ]; then
	# one profile of the attention kernel at (8, 32K), full set: its
	# sections (ncu.txt), then its stall samples per SASS instruction
	# summed by opcode over the tile loop
	lib=build-gpu/kernels/libkvstash_cuda.so
	ncu --clock-control none -k regex:attn_kernel -c 1 --set full \
		-o "$out/attn" python3 bench/attn_bench.py --shapes 8x32768 \
		--runs 2 --no-seal --lib "$lib" >"$out/ncu_run.log" 2>&1
	ncu -i "$out/attn.ncu-rep" --page details >"$out/ncu.txt" 2>&1
	ncu -i "$out/attn.ncu-rep" --page source --csv --print-source sass \
		>"$out/sass.csv" 2>&1
	rm -f "$out/attn.ncu-rep"
	ncu --clock-control none -k regex:seal_ -c 1 \
		--section SpeedOfLight --section WarpStateStats \
		python3 bench/attn_bench.py --shapes 1x32768 --runs 2 \
		--lib "$lib" >"$out/ncu_seal.txt" 2>&1
	grep -E "Throughput|Duration|Warp Cycles|Issue|Occupancy|Stall|Registers|Waves" \
		"$out/ncu.txt" | head -40
	python3 bench/ncu_stalls.py "$out/sass.csv" | tee "$out/stalls.txt"
	gzip -f "$out/sass.csv"
fi
