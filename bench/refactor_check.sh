#!/bin/bash
# refactor_check.sh - a change that must not change the kernels, checked
# on the GPU machine against the tree before it, in one call:
#   1. builds both trees with CUDA (this one whole, with warnings as
#      errors; the old one's libkvstash_cuda.so alone);
#   2. compares the two libraries' kernels, function by function (SASS
#      with addresses and encodings left out, and registers and stack);
#   3. runs this tree's 'gpu' test suite;
#   4. times bench/attn_bench.py on both libraries, in separate processes
#      taken in turn (old, new, new, old, ...), on the same shapes, and
#      prints per shape the medians of each side, new / old, and SDPA's.
# Logs and JSON go to $OUT (default /tmp/kvs-out).  Run from this tree's
# root, under bash; .devdeps/install.sh is sourced where it exists (the
# libraries the GPU machine lacks, /work/shared/device/README.md).
#
# usage: bench/refactor_check.sh OLD_TREE [shapes]
#   OLD_TREE  the project as it was, e.g. from the CPU machine:
#             git archive BASE --prefix=.gpuwork/old/ | tar -x
#             (and carry .gpuwork/old to the GPU machine)
#   shapes    default 1x32768,8x32768,8x131072,32x8192
# env: ROUNDS (processes per side, default 2), RUNS (default 50)
set -o pipefail

usage() {
	echo "usage: bench/refactor_check.sh OLD_TREE [shapes]" >&2
	exit 2
}
[ $# -ge 1 ] && [ $# -le 2 ] || usage
old=$1
shapes=${2:-1x32768,8x32768,8x131072,32x8192}
rounds=${ROUNDS:-2}
runs=${RUNS:-50}
out=${OUT:-/tmp/kvs-out}
if [ ! -f "$old/meson.build" ] || [ ! -d "$old/kernels" ]; then
	echo "refactor_check: $old is not a kvstash tree" >&2
	exit 2
fi
if [ ! -f bench/attn_bench.py ] || [ ! -f kernels/meson.build ]; then
	echo "refactor_check: run from the project root" >&2
	exit 2
fi
case $shapes in
*[!0-9x,]* | "") echo "refactor_check: shapes as 1x32768,8x32768" >&2
	exit 2 ;;
esac
case $rounds$runs in
*[!0-9]*) echo "refactor_check: ROUNDS and RUNS are numbers" >&2
	exit 2 ;;
esac
old=$(cd "$old" && pwd)
mkdir -p "$out"
[ -f .devdeps/install.sh ] && . .devdeps/install.sh
start=$(date +%s)
stamp() { echo "== $(( $(date +%s) - start )) s: $*"; }

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw \
	--format=csv 2>&1 | tee "$out/gpu.txt"

# 1. both builds, side by side (the old tree builds its library only)
stamp "build"
new_lib=build-gpu/kernels/libkvstash_cuda.so
old_lib=$old/build-ref/kernels/libkvstash_cuda.so
# a build directory left by an earlier call is configured again
again() { [ -d "$1/meson-private" ] && echo --reconfigure; }
(
	meson setup $(again build-gpu) build-gpu -Dcuda=enabled \
		-Dwerror=true -Dfuzz=disabled >"$out/setup_new.log" 2>&1 &&
		ninja -C build-gpu >"$out/build_new.log" 2>&1
) &
new_pid=$!
(
	cd "$old" &&
		meson setup $(again build-ref) build-ref -Dcuda=enabled \
			-Dtests=disabled -Dfuzz=disabled \
			>"$out/setup_old.log" 2>&1 &&
		ninja -C build-ref kernels/libkvstash_cuda.so \
			>"$out/build_old.log" 2>&1
) &
old_pid=$!
wait "$new_pid"
new_rc=$?
wait "$old_pid"
old_rc=$?
if [ "$new_rc" -ne 0 ] || [ "$old_rc" -ne 0 ]; then
	echo "refactor_check: build failed (new $new_rc, old $old_rc)" >&2
	tail -30 "$out/build_new.log" "$out/build_old.log" \
		"$out/setup_new.log" "$out/setup_old.log" 2>/dev/null
	exit 1
fi

# 2. the kernels of both libraries, function by function
stamp "kernels compared"
command -v cuobjdump >/dev/null ||
	echo "refactor_check: no cuobjdump on PATH, kernels not compared" >&2
for side in old new; do
	lib=$new_lib
	[ $side = old ] && lib=$old_lib
	cuobjdump -sass "$lib" >"$out/sass_$side.txt" 2>&1
	cuobjdump -res-usage "$lib" >"$out/res_$side.txt" 2>&1
done
python3 - "$out" <<'EOF' | tee "$out/kernels.txt"
import hashlib, re, sys

def sass(path):
    funcs, cur = {}, None
    for line in open(path):
        m = re.match(r'\s*Function : (\S+)', line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = re.match(r'\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;?\s*/\*', line)
        if m and cur:
            funcs[cur].append(m.group(1))
    return {k: hashlib.sha1('\n'.join(v).encode()).hexdigest()
            for k, v in funcs.items()}

def res(path):
    out, cur = {}, None
    for line in open(path):
        m = re.match(r'\s*Function (\S+):', line)
        if m:
            cur = m.group(1)
            continue
        m = re.match(r'\s*(REG:\d+ STACK:\d+)', line)
        if m and cur:
            out[cur] = m.group(1)
            cur = None
    return out

d = sys.argv[1]
so, sn = sass(d + '/sass_old.txt'), sass(d + '/sass_new.txt')
ro, rn = res(d + '/res_old.txt'), res(d + '/res_new.txt')
same = [k for k in so if sn.get(k) == so[k]]
print('kernels: %d old, %d new, %d with the same SASS' %
      (len(so), len(sn), len(same)))
for k in sorted(set(so) | set(sn)):
    if so.get(k) != sn.get(k):
        print('  differs: %s  old %s  new %s' % (k, ro.get(k, '-'),
                                                  rn.get(k, '-')))
EOF

# 3. this tree's gpu suite
stamp "gpu suite"
meson test -C build-gpu --suite gpu --print-errorlogs --num-processes 1 \
	>"$out/gpu_suite.log" 2>&1
suite_rc=$?
tail -12 "$out/gpu_suite.log" | tee "$out/gpu_suite.txt"
cp build-gpu/meson-logs/testlog.txt "$out/testlog.txt"

# 4. the benchmark, old and new in turn
stamp "benchmark"
n=0
for r in $(seq 1 "$rounds"); do
	order="old new"
	[ $((r % 2)) -eq 0 ] && order="new old"
	for side in $order; do
		lib=$new_lib
		[ $side = old ] && lib=$old_lib
		n=$((n + 1))
		PYTHONUNBUFFERED=1 python3 bench/attn_bench.py --lib "$lib" \
			--no-seal --runs "$runs" --cool 1 --shapes "$shapes" \
			--json "$out/bench_${n}_$side.json" \
			>"$out/bench_${n}_$side.log" 2>&1 ||
			echo "refactor_check: benchmark $n ($side) failed:" \
				"$(tail -1 "$out/bench_${n}_$side.log")" >&2
		stamp "benchmark $n ($side)"
	done
done
python3 - "$out" <<'EOF' | tee "$out/summary.txt"
import glob, json, statistics, sys

d = sys.argv[1]
t = {}
for path in sorted(glob.glob(d + '/bench_*.json')):
    side = path.rsplit('_', 1)[1][:-5]
    res = json.load(open(path))
    for a in res['attention']:
        key = (a['batch'], a['tokens'])
        t.setdefault(key, {'old': [], 'new': [], 'sdpa': []})
        t[key][side].append(a['kvstash_us'])
        t[key]['sdpa'].append(a['sdpa_us'])
print('%-10s %22s %22s %9s %9s' % ('shape', 'old us (each process)',
                                    'new us (each process)', 'new/old',
                                    'sdpa us'))
for (b, tok), v in sorted(t.items()):
    if not v['old'] or not v['new']:
        print('%dx%d: a side is missing' % (b, tok))
        continue
    o, n = statistics.median(v['old']), statistics.median(v['new'])
    print('%-10s %8.1f (%s) %8.1f (%s) %9.3f %9.1f' % (
        '%dx%d' % (b, tok), o, ' '.join('%.1f' % x for x in v['old']),
        n, ' '.join('%.1f' % x for x in v['new']), n / o,
        statistics.median(v['sdpa'])))
EOF
stamp "done"
if [ "$suite_rc" -ne 0 ]; then
	echo "refactor_check: the gpu suite failed" >&2
	exit 1
fi
