#!/usr/bin/env python3
"""The table of docs/BENCHMARKS.md (Restarts) from fault_bench's JSON.

fault_summary.py OUT_DIR     (what bench/fault_bench.sh wrote)

One row a run: threads, nodes, signal, restarts; the daemon's exit after
the signal, its start until it listens (its store's recovery included)
and the first request that succeeds (one node: from listening; a
cluster: from the signal), each as median and worst over the restarts; requests that succeeded and failed (by
cause); acknowledged durable blocks, lost, wrong; the longest call.
"""
import glob
import json
import os
import statistics
import sys


def mw(values):
    return "%.0f / %.0f" % (statistics.median(values), max(values))


def main():
    rows = []
    for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
        if os.path.getsize(path) == 0:
            continue  # a run that did not finish
        with open(path) as f:
            # lines of UCX's log, where it wrote to stdout, left out
            r = json.loads("".join(line for line in f
                                   if not line.startswith("[")
                                   or line.startswith("[]")))
        rs = r["restarts"]
        exit_ms = [x["exit_ms"] for x in rs]
        listen = [x["listening_ms"] for x in rs]
        # one node: the first success once the new daemon listens (runs
        # before after_listening_ms was recorded: kill -9, where nothing
        # succeeds between the signal and the exit); a cluster: the first
        # success after the signal (the replicas answer meanwhile)
        back = [x["first_ok_ms"] if r["nodes"] > 1 else
                x.get("after_listening_ms",
                      x["first_ok_ms"] - x["exit_ms"] - x["listening_ms"])
                for x in rs]
        req = r["requests"]
        ok = sum(v["ok"] for v in req.values())
        conn = sum(v["failed_connection"] for v in req.values())
        tmo = sum(v["failed_timeout"] for v in req.values())
        other = sum(v["failed_other"] for v in req.values())
        rows.append("| %s | %d | %d | %s | %d | %s | %s | %s | %d | %d / %d / %d "
                    "| %d | %d | %d | %.0f |" % (
                        os.path.basename(path)[:-5], r["threads"], r["nodes"],
                        r["signal"], len(rs), mw(exit_ms), mw(listen),
                        mw(back), ok, conn, tmo, other, r["acked_durable"],
                        r["lost"], r["wrong"] + r["wrong_during_run"],
                        r["max_call_ms"]))
    print("| run | threads | nodes | signal | restarts | exit ms | listening ms "
          "| first success ms | requests ok | failed conn / timeout / other "
          "| acked durable | lost | wrong | longest call ms |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
