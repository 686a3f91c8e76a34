#!/bin/sh
# The whole test suite, as CI runs it: install dependencies, build with
# warnings as errors, run every suite, then build the unit tests again under
# ASan+UBSan and run them, and the threaded tests (suite "tsan") under
# ThreadSanitizer.  Build trees: build-ci/, build-asan/ and build-tsan/.
# Ends with one line "N passed, N failed, N skipped" over the three runs
# (from meson's testlog.json); the exit status is non-zero if anything
# failed.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
# vLLM (CPU) for the connector's tests, in its own virtual environment kept
# between runs (KVSTASH_VLLM_VENV; KVSTASH_VLLM=off leaves it out); where
# it cannot be installed the vLLM tests skip and say so.
vllm_venv=${KVSTASH_VLLM_VENV:-/opt/kvstash-vllm}
if [ "${KVSTASH_VLLM:-on}" != off ]; then
	if sh scripts/install-vllm.sh "$vllm_venv"; then
		export KVSTASH_VLLM_PYTHON="$vllm_venv/bin/python"
	else
		echo "kvstash: vLLM could not be installed: the vLLM tests skip"
	fi
fi

status=0
jobs=2
# Stale logs must not count: the summary reads only this run's.
rm -f build-ci/meson-logs/testlog.json build-asan/meson-logs/testlog.json \
	build-tsan/meson-logs/testlog.json

meson setup build-ci --wipe -Dwerror=true -Dtests=enabled >/dev/null 2>&1 ||
	meson setup build-ci -Dwerror=true -Dtests=enabled || status=1
if [ "$status" -eq 0 ]; then
	ninja -C build-ci -j "$jobs" || status=1
fi
if [ "$status" -eq 0 ]; then
	meson test -C build-ci --print-errorlogs --num-processes "$jobs" ||
		status=1
fi

# Sanitizers: CPU code only (CUDA's runtime does not run under ASan here).
asan_status=0
meson setup build-asan --wipe -Dwerror=true -Dtests=enabled -Dcuda=disabled \
	-Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=disabled \
	>/dev/null 2>&1 ||
	meson setup build-asan -Dwerror=true -Dtests=enabled -Dcuda=disabled \
		-Db_sanitize=address,undefined -Db_lundef=false \
		-Dfuzz=disabled || asan_status=1
if [ "$asan_status" -eq 0 ]; then
	ninja -C build-asan -j "$jobs" || asan_status=1
fi
if [ "$asan_status" -eq 0 ]; then
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	ASAN_OPTIONS=detect_leaks=1 \
		meson test -C build-asan --suite unit --print-errorlogs \
			--num-processes "$jobs" || asan_status=1
fi

# ThreadSanitizer: the threaded tests only (suite "tsan"), so only their
# executables are built.  TSan's shadow memory wants the fixed layout that
# kernels randomising mmap widely do not give: ASLR off where setarch can.
tsan_status=0
tsan_opts="-Dwerror=true -Dtests=enabled -Dcuda=disabled \
	-Db_sanitize=thread -Db_lundef=false -Dfuzz=disabled"
# shellcheck disable=SC2086
meson setup build-tsan --wipe $tsan_opts >/dev/null 2>&1 ||
	meson setup build-tsan $tsan_opts || tsan_status=1
if [ "$tsan_status" -eq 0 ]; then
	tsan_targets=$(meson introspect build-tsan --tests | python3 -c '
import json, os, sys
build = os.path.abspath("build-tsan")
print(" ".join(sorted({os.path.relpath(t["cmd"][0], build)
                       for t in json.load(sys.stdin)
                       if any(s.endswith(":tsan") for s in t["suite"])})))
') || tsan_status=1
fi
if [ "$tsan_status" -eq 0 ]; then
	# shellcheck disable=SC2086
	ninja -C build-tsan -j "$jobs" $tsan_targets || tsan_status=1
fi
if [ "$tsan_status" -eq 0 ]; then
	no_aslr=""
	if setarch "$(uname -m)" -R true 2>/dev/null; then
		no_aslr="setarch $(uname -m) -R"
	fi
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
		$no_aslr meson test -C build-tsan --suite tsan --no-rebuild \
			--print-errorlogs --num-processes "$jobs" ||
		tsan_status=1
fi

# One summary line over the three runs.  A run that failed before its tests
# (no testlog.json) counts as one failure, so the line never reads
# "0 failed" after a broken build.
python3 - "build-ci:$status" "build-asan:$asan_status" \
	"build-tsan:$tsan_status" <<'EOF' || status=1
import json, os, sys

passed = failed = skipped = 0
for arg in sys.argv[1:]:
    build, run_status = arg.rsplit(":", 1)
    log = os.path.join(build, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        if run_status != "0":
            failed += 1
            print("%s: failed before its tests ran" % build)
        continue
    with open(log) as f:
        for line in f:
            if not line.strip():
                continue
            result = json.loads(line).get("result")
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
sys.exit(1 if failed else 0)
EOF
[ "$asan_status" -eq 0 ] || status=1
[ "$tsan_status" -eq 0 ] || status=1
exit "$status"
