#!/bin/sh
# The fault benchmark of docs/BENCHMARKS.md: fault_bench (its header says
# what one run does) with 1, 8 and 32 client threads, kvstashd killed
# (kill -9) and stopped (SIGTERM) RESTARTS times each, one node; then one
# of three cluster members killed RESTARTS times under 32 threads; then
# the restarts of a daemon whose store holds PREFILL MiB of durable
# blocks (its recovery).  One JSON object a run, in OUT/.
#
#   sh bench/fault_bench.sh [BUILD_DIR] [RESTARTS] [UP_MS] [PREFILL] [OUT]
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-ci}
restarts=${2:-10}
up=${3:-2000}
prefill=${4:-1024}
out=${5:-fault-bench-out}
exe="$build/bench/fault_bench"
kvstashd="$build/server/kvstashd"
for f in "$exe" "$kvstashd"; do
	[ -x "$f" ] || { echo "no $f: build first" >&2; exit 1; }
done
mkdir -p "$out"
tmp=$(mktemp -d)
# a signal ends the whole benchmark, not only the run it interrupts
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
status=0
run() {
	name=$1
	shift
	echo "== $name" >&2
	# UCX's own warnings (a wireup cut by the restart) go to stdout
	UCX_LOG_LEVEL=error "$exe" --kvstashd "$kvstashd" --dir "$tmp" \
		--up-ms "$up" \
		--timeout-ms 5000 "$@" >"$out/$name.json" || status=1
	cat "$out/$name.json"
}
for sig in kill term; do
	for threads in 1 8 32; do
		run "single-$sig-$threads" --signal "$sig" --threads "$threads" \
			--restarts "$restarts"
	done
done
run "cluster-kill-32" --signal kill --threads 32 --restarts "$restarts" \
	--nodes 3
run "recovery-$prefill" --signal kill --threads 8 --restarts 3 \
	--prefill "$prefill"
exit "$status"
