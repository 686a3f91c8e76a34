#!/bin/sh
# kvstash's transport beside ucx_perftest, in the same run, on loopback.
#
#   sh bench/transport_vs_perftest.sh [BUILD_DIR] [RUNS] [SECONDS]
#
# For each transport -- TCP loopback (kvstashd's default) and shared memory
# (kvstashd --shared-memory) -- starts a kvstashd from BUILD_DIR (default
# build-ci) on 127.0.0.1 with a scratch store, then RUNS times (default
# 3), alternating:
#   kvstash bench transport --json   (get/put of 96 KiB blocks and of
#                                     3 MiB batches, lookup latency; 1 and
#                                     8 threads)
#   ucx_perftest -t ucp_am_bw -e     (the same transport: active messages
#                                     with peer error handling, as
#                                     kvstash's endpoints; the block size and
#                                     the batch size as message sizes)
# and prints the medians and kvstash's GB/s as a ratio of ucx_perftest's.
# ucx_perftest's MB/s are MiB/s (converted to GB/s here); a ucx_perftest
# pair that has not finished in PERFTEST_TIMEOUT seconds (default 60) is
# stopped and counts as no figure.  KVSTASHD_DRAM sets the daemon's DRAM
# tier (default 512M) and KVSTASHD_FLAGS adds flags to it (e.g.
# KVSTASHD_DRAM=16M KVSTASHD_FLAGS="--durability written": puts written
# through to the store's device, gets partly from it).
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-ci}
runs=${2:-3}
seconds=${3:-2}
kvstash="$build/tools/kvstash"
kvstashd="$build/server/kvstashd"
for exe in "$kvstash" "$kvstashd"; do
	[ -x "$exe" ] || { echo "no $exe: build first" >&2; exit 1; }
done
command -v ucx_perftest >/dev/null ||
	{ echo "ucx_perftest missing (Debian: ucx-utils)" >&2; exit 1; }

tmp=$(mktemp -d)
daemon=""
cleanup() {
	if [ -n "$daemon" ]; then
		kill "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

echo "alice $(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')" >"$tmp/keys"

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# perftest MODE SIZE ITERS: one ucx_perftest pair with peer error
# handling (-e), as kvstash's endpoints; MODE shm allows the shared-memory
# transports as kvstash's --shared-memory does.  Prints MiB/s overall.
perftest() {
	p=$(free_port)
	if [ "$1" = shm ]; then
		export UCX_MM_ERROR_HANDLING=y
	else
		unset UCX_MM_ERROR_HANDLING
	fi
	timeout "${PERFTEST_TIMEOUT:-60}" ucx_perftest -p "$p" -e \
		>/dev/null 2>&1 &
	srv=$!
	sleep 0.3
	timeout "${PERFTEST_TIMEOUT:-60}" ucx_perftest 127.0.0.1 -p "$p" -e \
		-t ucp_am_bw -s "$2" -n "$3" -w 100 2>/dev/null |
		awk '/^Final:/ { print $6 }'
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
	unset UCX_MM_ERROR_HANDLING
}

block=98816
batch=$((block * 32))
for mode in tcp shm; do
	flag=""
	[ "$mode" = shm ] && flag="--shared-memory"
	rm -rf "$tmp/store" "$tmp/ready"
	"$kvstashd" --listen 127.0.0.1:0 --dir "$tmp/store" \
		--auth-key-file "$tmp/keys" --dram-capacity "${KVSTASHD_DRAM:-512M}" \
		--nvme-capacity 1G --ready-file "$tmp/ready" --log-level warn \
		$flag ${KVSTASHD_FLAGS:-} 2>"$tmp/kvstashd.log" &
	daemon=$!
	i=0
	while [ ! -s "$tmp/ready" ]; do
		i=$((i + 1))
		[ $i -lt 500 ] || { echo "kvstashd did not start" >&2; cat "$tmp/kvstashd.log" >&2; exit 1; }
		sleep 0.02
	done
	port=$(cut -d' ' -f1 "$tmp/ready")
	for r in $(seq 1 "$runs"); do
		"$kvstash" bench transport --server "127.0.0.1:$port" \
			--auth-key-file "$tmp/keys" --seconds "$seconds" --json \
			$flag >"$tmp/kvstash.$mode.$r.json"
		echo "$(perftest $mode $block 20000) $(perftest $mode $batch 600)" \
			>"$tmp/perftest.$mode.$r"
	done
	kill "$daemon"
	wait "$daemon" || true
	daemon=""
done

python3 - "$tmp" "$runs" <<'EOF2'
import json, os, statistics, sys

tmp, runs = sys.argv[1], int(sys.argv[2])
errors = 0
for mode, what in (("tcp", "TCP loopback (the default)"),
                   ("shm", "shared memory (--shared-memory)")):
    ours, pt = {}, {"block": [], "batch": []}
    for r in range(1, runs + 1):
        with open(os.path.join(tmp, "kvstash.%s.%d.json" % (mode, r))) as f:
            for res in json.load(f)["results"]:
                ours.setdefault((res["phase"], res["threads"]), []).append(res)
        with open(os.path.join(tmp, "perftest.%s.%d" % (mode, r))) as f:
            vals = [float(v) * 1048576 / 1e9 for v in f.read().split()]
        # a pair stopped by its timeout left no figure
        if len(vals) == 2:
            for k, v in zip(("block", "batch"), vals):
                pt[k].append(v)
    med = {k: statistics.median(v) for k, v in pt.items() if v}
    print("%s: ucx_perftest -t ucp_am_bw -e (median of %d): 96 KiB "
          "%.2f GB/s, 3 MiB %.2f GB/s" % (what, runs, med.get("block", 0),
                                         med.get("batch", 0)))
    print("  %-18s %7s %10s %10s" % ("kvstash", "threads", "GB/s", "ratio"))
    for (phase, threads), rs in sorted(ours.items(),
                                       key=lambda x: (x[0][1], x[0][0])):
        errors += sum(r["errors"] for r in rs)
        if phase.startswith("lookup"):
            print("  %-18s %7d   p50 %.1f us, p99 %.1f us" %
                  (phase, threads,
                   statistics.median(r["p50_us"] for r in rs),
                   statistics.median(r["p99_us"] for r in rs)))
            continue
        gbps = statistics.median(r["gbps"] for r in rs)
        ref = med.get("block" if "96" in phase else "batch")
        print("  %-18s %7d %10.2f %9.0f%%" %
              (phase, threads, gbps, 100 * gbps / ref if ref else 0))
print("errors: %d" % errors)
sys.exit(1 if errors else 0)
EOF2
