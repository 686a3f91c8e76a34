#!/bin/sh
# The whole test suite, as CI runs it: install dependencies, build with
# warnings as errors, run every suite, then build the unit tests again under
# ASan+UBSan and run them.  Build trees: build-ci/ and build-asan/.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh

meson setup build-ci --wipe -Dwerror=true -Dtests=enabled >/dev/null 2>&1 ||
	meson setup build-ci -Dwerror=true -Dtests=enabled
ninja -C build-ci
meson test -C build-ci --print-errorlogs --num-processes 2

# Sanitizers: CPU code only (CUDA's runtime does not run under ASan here).
meson setup build-asan --wipe -Dwerror=true -Dtests=enabled -Dcuda=disabled \
	-Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=disabled \
	>/dev/null 2>&1 ||
	meson setup build-asan -Dwerror=true -Dtests=enabled -Dcuda=disabled \
		-Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=disabled
ninja -C build-asan
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
ASAN_OPTIONS=detect_leaks=1 \
	meson test -C build-asan --suite unit --print-errorlogs --num-processes 2
