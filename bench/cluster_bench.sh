#!/bin/sh
# kvstash as a cluster of 1, 2 and 3 nodes on this host, beside one node
# reached directly, in the same run.
#
#   sh bench/cluster_bench.sh [BUILD_DIR] [RUNS] [SECONDS] [THREADS]
#
# Starts three kvstashd from BUILD_DIR (default build-ci) on 127.0.0.1,
# each with a scratch store, then RUNS times (default 3):
#   kvstash bench cluster --server A,B,C --json
# (3 MiB get and put batches with THREADS client threads, default 4; the
# p50/p99 of a 256-block chain lookup, one thread; for the one-server
# client on A, then cluster clients of A; A,B; A,B,C) and prints the
# medians and the ratios against one node.  The nodes share the host's
# cores with the clients: on a small machine the cluster cannot add
# throughput, and the figures say what spreading a call over nodes costs.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-ci}
runs=${2:-3}
seconds=${3:-2}
threads=${4:-4}
kvstash="$build/tools/kvstash"
kvstashd="$build/server/kvstashd"
for exe in "$kvstash" "$kvstashd"; do
	[ -x "$exe" ] || { echo "no $exe: build first" >&2; exit 1; }
done

tmp=$(mktemp -d)
daemons=""
cleanup() {
	for pid in $daemons; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

echo "alice $(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')" >"$tmp/keys"

servers=""
for n in 0 1 2; do
	"$kvstashd" --listen 127.0.0.1:0 --dir "$tmp/store$n" \
		--auth-key-file "$tmp/keys" --dram-capacity 512M \
		--nvme-capacity 1G --ready-file "$tmp/ready$n" --log-level warn \
		2>"$tmp/kvstashd$n.log" &
	daemons="$daemons $!"
	i=0
	while [ ! -s "$tmp/ready$n" ]; do
		i=$((i + 1))
		[ $i -lt 500 ] || { echo "kvstashd did not start" >&2; cat "$tmp/kvstashd$n.log" >&2; exit 1; }
		sleep 0.02
	done
	servers="$servers${servers:+,}127.0.0.1:$(cut -d' ' -f1 "$tmp/ready$n")"
done

for r in $(seq 1 "$runs"); do
	"$kvstash" bench cluster --server "$servers" \
		--auth-key-file "$tmp/keys" --seconds "$seconds" \
		--threads "$threads" --json >"$tmp/cluster.$r.json"
done

python3 - "$tmp" "$runs" "$threads" <<'EOF2'
import json, os, statistics, sys

tmp, runs, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows, errors = {}, 0
for r in range(1, runs + 1):
    with open(os.path.join(tmp, "cluster.%d.json" % r)) as f:
        for res in json.load(f)["results"]:
            rows.setdefault(res["client"], []).append(res)
            errors += res["errors"]
med = {c: {k: statistics.median(x[k] for x in rs)
           for k in ("get_batch_gbps", "put_batch_gbps", "lookup_p50_us",
                     "lookup_p99_us")}
       for c, rs in rows.items()}
print("medians of %d runs, %s threads for the batches, one for lookups"
      % (runs, threads))
print("%-22s %12s %12s %12s %12s" % ("client", "get GB/s", "put GB/s",
                                       "lookup p50", "lookup p99"))
for c, m in med.items():
    print("%-22s %12.2f %12.2f %9.1f us %9.1f us" %
          (c, m["get_batch_gbps"], m["put_batch_gbps"], m["lookup_p50_us"],
           m["lookup_p99_us"]))
one = med.get("cluster of 1")
for c, m in med.items():
    if not one or not c.startswith("cluster of") or c == "cluster of 1":
        continue
    print("%s against cluster of 1: get x%.2f, put x%.2f, lookup p99 x%.2f"
          % (c, m["get_batch_gbps"] / one["get_batch_gbps"],
             m["put_batch_gbps"] / one["put_batch_gbps"],
             m["lookup_p99_us"] / one["lookup_p99_us"]))
direct = med.get("one server (direct)")
if one and direct:
    print("cluster of 1 against one server (direct): get x%.2f, put x%.2f,"
          " lookup p99 x%.2f"
          % (one["get_batch_gbps"] / direct["get_batch_gbps"],
             one["put_batch_gbps"] / direct["put_batch_gbps"],
             one["lookup_p99_us"] / direct["lookup_p99_us"]))
print("errors: %d" % errors)
sys.exit(1 if errors else 0)
EOF2
