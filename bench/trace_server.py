#!/usr/bin/env python3
"""`kvstash bench trace` in-process and through a kvstashd, in one run.

    python3 bench/trace_server.py [--build DIR] [--requests N] [--runs R]
        [--dram 16G] [--nvme 64G] [--scale 128] [--dir DIR] [--json]

Generates a trace (bench/trace_gen.py, --seed 1), replays it in-process
with the given capacities at scale 1 (`--model llama-3-8b --scale K`),
then starts a kvstashd from the same build with exactly the store
configuration that replay used (its store_dram_capacity,
store_nvme_capacity and store_segment_size) and replays the same trace
through it, over TCP loopback (kvstashd's default) and over shared memory
(--shared-memory on both sides).  Each daemon replay gets a fresh
daemon and store; with R runs the three replays alternate R times.
Prints requests/s of each (the replay's own wall time: lookups, reads,
puts; not the store's open) with the median's ratio to in-process, and
the hit counts side by side (docs/REPLAY.md says where the daemon's may
differ).  Stores go under --dir (default: the build directory, a real
disk).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def start_daemon(kvstashd, tmp, name, store, shm):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write("bench %s\n" % os.urandom(16).hex())
    ready = os.path.join(d, "ready")
    args = [kvstashd, "--listen", "127.0.0.1:0", "--dir",
            os.path.join(d, "store"), "--auth-key-file", keys,
            "--ready-file", ready, "--log-level", "warn",
            "--dram-capacity", str(store["store_dram_capacity"]),
            "--nvme-capacity", str(store["store_nvme_capacity"]),
            "--segment-size", str(store["store_segment_size"])]
    if shm:
        args.append("--shared-memory")
    log = open(os.path.join(d, "log"), "w")
    p = subprocess.Popen(args, stdout=log, stderr=log)
    deadline = time.time() + 30
    while not os.path.exists(ready):
        if p.poll() is not None or time.time() > deadline:
            sys.exit("kvstashd did not start: %s" %
                     open(os.path.join(d, "log")).read())
        time.sleep(0.05)
    with open(ready) as f:
        port = int(f.read().split()[0])
    server = ["--server", "127.0.0.1:%d" % port, "--auth-key-file", keys]
    if shm:
        server.append("--shared-memory")
    return p, server


def replay(kvstash, trace, common, extra):
    p = subprocess.run([kvstash, "bench", "trace", trace] + common + extra,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("kvstash bench trace failed (%d): %s" % (p.returncode,
                                                          p.stderr))
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-ci")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--dram", default="16G")
    ap.add_argument("--nvme", default="64G")
    ap.add_argument("--scale", default="128")
    ap.add_argument("--dir")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    kvstash = os.path.join(a.build, "tools", "kvstash")
    kvstashd = os.path.join(a.build, "tools", "kvstashd")
    for exe in (kvstash, kvstashd):
        if not os.access(exe, os.X_OK):
            sys.exit("no %s: build first" % exe)
    scratch = a.dir or a.build
    results = {"in-process": [], "kvstashd tcp": [], "kvstashd shm": []}
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        trace = os.path.join(tmp, "t.jsonl")
        subprocess.run([sys.executable, os.path.join(HERE, "trace_gen.py"),
                        "--requests", str(a.requests), "--seed", "1", "-o",
                        trace], check=True)
        common = ["--model", "llama-3-8b", "--scale", a.scale,
                  "--progress", "0", "--json"]
        local_args = ["--dir", tmp, "--dram-capacity", a.dram,
                      "--nvme-capacity", a.nvme]
        for run in range(a.runs):
            local = replay(kvstash, trace, common, local_args)
            results["in-process"].append(local)
            for shm in (False, True):
                name = "kvstashd shm" if shm else "kvstashd tcp"
                p, server = start_daemon(kvstashd, tmp, "d%d%s" %
                                         (run, "s" if shm else "t"),
                                         local, shm)
                try:
                    results[name].append(replay(kvstash, trace, common,
                                                server))
                finally:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=60)
    base = statistics.median(r["requests_per_second"]
                             for r in results["in-process"])
    rows = []
    for name, rs in results.items():
        rate = statistics.median(r["requests_per_second"] for r in rs)
        rows.append({"target": name, "runs": len(rs),
                     "requests_per_second": rate,
                     "all_requests_per_second":
                         [r["requests_per_second"] for r in rs],
                     "ratio_to_in_process": rate / base,
                     "hit_blocks": [r["hit_blocks"] for r in rs],
                     "lookup_blocks": rs[0]["lookup_blocks"],
                     "prefix_hit_ratio": rs[0]["prefix_hit_ratio"],
                     "evictions": [r["evictions"] for r in rs]})
    local = results["in-process"][0]
    if a.json:
        json.dump({"requests": local["requests"], "scale": local["scale"],
                   "dram_capacity": local["dram_capacity"],
                   "nvme_capacity": local["nvme_capacity"],
                   "store_dram_capacity": local["store_dram_capacity"],
                   "store_nvme_capacity": local["store_nvme_capacity"],
                   "store_segment_size": local["store_segment_size"],
                   "rows": rows}, sys.stdout, indent=1)
        print()
        return 0
    print("trace: %d requests, %d blocks looked up; llama-3-8b 2-bit at "
          "scale %d; DRAM %s, NVMe %s at scale 1 (the stores: %d, %d "
          "bytes, segments of %d)" %
          (local["requests"], local["lookup_blocks"], local["scale"],
           a.dram, a.nvme, local["store_dram_capacity"],
           local["store_nvme_capacity"], local["store_segment_size"]))
    print("%-14s %5s %12s %8s %12s %10s %s" % (
        "target", "runs", "requests/s", "ratio", "hit blocks", "hit ratio",
        "evictions"))
    for r in rows:
        print("%-14s %5d %12.0f %7.2fx %12s %9.2f%% %s" % (
            r["target"], r["runs"], r["requests_per_second"],
            r["ratio_to_in_process"],
            ",".join(str(h) for h in sorted(set(r["hit_blocks"]))),
            100 * r["prefix_hit_ratio"],
            ",".join(str(e) for e in r["evictions"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
