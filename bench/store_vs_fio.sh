#!/bin/sh
# store_vs_fio.sh - the store's NVMe tier beside fio, same pattern, same
# directory, same run: `kvstash bench store` (96 KiB blocks in 100 KiB
# records, write-through puts then gets after reopening, QD 1, 8, 32),
# then fio with the io_uring engine, O_DIRECT, bs = the record size and the
# same queue depths, sequential write then read of as many bytes.  Prints
# each side's GB/s of device bytes and kvstash as a fraction of fio.
#
# usage: bench/store_vs_fio.sh [DIR]   (default build/bench-store)
# env: KVSTASH (default build/tools/kvstash), SIZE bytes per QD (1G),
#      RECORDS for the recovery figure (100000), ROUNDS (1)
set -eu
KVSTASH=${KVSTASH:-build/tools/kvstash}
DIR=${1:-build/bench-store}
SIZE=${SIZE:-1G}
RECORDS=${RECORDS:-100000}
ROUNDS=${ROUNDS:-1}
command -v fio >/dev/null || { echo "fio not installed" >&2; exit 77; }
mkdir -p "$DIR"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT" "$DIR/fio.dat"' EXIT

round=1
while [ "$round" -le "$ROUNDS" ]; do
	"$KVSTASH" bench store --dir "$DIR" --nvme-bytes "$SIZE" \
		--recovery-records "$RECORDS" --json >"$OUT/kvstash-$round.json"
	bs=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["record_bytes"])' \
		"$OUT/kvstash-$round.json")
	for qd in 1 8 32; do
		for rw in write read; do
			fio --name="$rw$qd" --directory="$DIR" --filename=fio.dat \
				--rw="$rw" --size="$SIZE" --bs="$bs" \
				--iodepth="$qd" --ioengine=io_uring --direct=1 \
				--output-format=json >"$OUT/fio-$rw$qd-$round.json"
		done
		rm -f "$DIR/fio.dat"
	done
	round=$((round + 1))
done

python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ks = [json.load(open("%s/kvstash-%d.json" % (out, r)))
      for r in range(1, rounds + 1)]
scale = ks[0]["record_bytes"] / ks[0]["block_bytes"]  # object -> device
med = statistics.median
print("block %d B in %d B records, %d rounds (medians)" %
      (ks[0]["block_bytes"], ks[0]["record_bytes"], rounds))
d = {k: med(x["dram"][k] for x in ks) for k in ks[0]["dram"]}
print("DRAM put %.2f GB/s, get (zero-copy) %.1f GB/s, get+copy %.2f GB/s, "
      "memcpy %.2f GB/s: get+copy/memcpy %.2f" %
      (d["put_gbps"], d["get_gbps"], d["get_copy_gbps"], d["memcpy_gbps"],
       d["get_copy_gbps"] / d["memcpy_gbps"]))
print("%-4s %-6s %12s %12s %7s" % ("QD", "op", "kvstash", "fio", "ratio"))
for i, qd in enumerate((1, 8, 32)):
    for rw in ("write", "read"):
        ours = med(x["nvme"][i][rw + "_gbps"] for x in ks) * scale
        fio = med(json.load(open("%s/fio-%s%d-%d.json" % (out, rw, qd, r)))
                  ["jobs"][0][rw]["bw_bytes"] / 1e9
                  for r in range(1, rounds + 1))
        print("%-4d %-6s %9.2f GB/s %7.2f GB/s %6.0f%%" %
              (qd, rw, ours, fio, 100 * ours / fio))
rec = ks[0]["recovery"]
print("recovery: %d records in %.3f s (median %.3f s)" %
      (rec["records"], rec["seconds"],
       med(x["recovery"]["seconds"] for x in ks)))
EOF
