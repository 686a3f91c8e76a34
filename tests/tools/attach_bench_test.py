#!/usr/bin/env python3
"""Tests of the attach benchmark: `kvstash bench attach` against a real
kvstashd on the CPU (a small shape), and bench/attach_bench.py's
argument handling and, where torch and transformers are installed, its
tiny CPU dry run end to end.

attach_bench_test.py KVSTASH KVSTASHD SCRIPT SCRATCH GROUP, GROUP one of
tool, args, dry-run.  Exit 0, 1 with a message, 77 (skip) with why.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def run(args, timeout=240, env=None):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def daemon(kvstashd, tmp):
    key = os.path.join(tmp, "key")
    with open(key, "w") as f:
        f.write("bench 000102030405060708090a0b0c0d0e0f\n")
    ready = os.path.join(tmp, "ready")
    p = subprocess.Popen([kvstashd, "--listen", "127.0.0.1:0", "--dir",
                          os.path.join(tmp, "store"), "--auth-key-file", key,
                          "--ready-file", ready, "--log-level", "warn",
                          "--dram-capacity", "64M", "--tail-capacity", "64M"])
    deadline = time.monotonic() + 15
    while not (os.path.exists(ready) and open(ready).read().split()):
        check(p.poll() is None, "kvstashd exited at start")
        check(time.monotonic() < deadline, "kvstashd not ready")
        time.sleep(0.02)
    port = int(open(ready).read().split()[0])
    return p, "127.0.0.1:%d" % port, key


def test_tool(kvstash, kvstashd, script, tmp):
    p, addr, key = daemon(kvstashd, tmp)
    try:
        small = ["--tokens", 1024, "--layers", 2, "--kv-heads", 2, "--q-heads",
                 4, "--head-dim", 64, "--runs", 2, "--device", "cpu"]
        rc, out, err = run([kvstash, "bench", "attach", "--server", addr,
                            "--auth-key-file", key] + small + ["--json"])
        check(rc == 0, "bench attach: exit %d: %s" % (rc, err))
        d = json.loads(out)
        check(d["device"] == "cpu" and d["tokens"] == 1024 and
              d["layers"] == 2 and d["runs"] == 2, "shape %r" % d)
        # fp16 K/V against 2-bit blocks of the same tokens: 2 x 2 bytes a
        # value against 2 bits and the metadata (4.6x at D=64, G=32)
        ratio = d["bytes_fp16"] / d["bytes_2bit"]
        check(4.0 < ratio < 5.5, "bytes ratio %.2f" % ratio)
        # 16 blocks (2 layers x 8 spans) of 12 KiB of codes and metadata
        # at kv 2, D 64, S 128, G 32, and a header
        block = d["bytes_2bit"] / 16
        check(d["bytes_2bit"] % 16 == 0 and 12288 + 512 <= block <= 16384,
              "2-bit bytes %r" % d["bytes_2bit"])
        for k in ("attach_2bit_s", "attach_fp16_s"):
            check(d[k] > 0 and len(d[k.replace("_s", "_runs_s")]) == 2,
                  "%s %r" % (k, d))
        check(abs(d["fp16_over_2bit"] - d["attach_fp16_s"] /
                  d["attach_2bit_s"]) < 1e-9, "ratio %r" % d)
        # the text form, run again on the same daemon (blocks already held)
        rc, out, err = run([kvstash, "bench", "attach", "--server", addr,
                            "--auth-key-file", key] + small)
        check(rc == 0 and "2-bit attach" in out and "fp16 objects" in out and
              "faster to ready" in out, "text form: %d %r %r" % (rc, out, err))
        # usage errors: exit 2, the line and the hint
        for bad in (["--tokens", 100], ["--device", "gpu"], ["--runs", 0],
                    ["--q-heads", 3]):
            rc, out, err = run([kvstash, "bench", "attach", "--server", addr,
                                "--auth-key-file", key] + small + bad)
            lines = err.strip().splitlines()
            check(rc == 2 and len(lines) == 2 and
                  lines[0].startswith("kvstash bench attach: ") and
                  lines[1] == "try 'kvstash bench attach --help'",
                  "%r: exit %d, %r" % (bad, rc, err))
        rc, _, err = run([kvstash, "bench", "attach", "--server",
                          "127.0.0.1:1", "--auth-key-file", key] + small)
        check(rc == 1 and len(err.strip().splitlines()) == 1,
              "no daemon: exit %d, %r" % (rc, err))
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    check(p.returncode == 0, "kvstashd exit %d" % p.returncode)


def test_args(kvstash, kvstashd, script, tmp):
    build = os.path.dirname(os.path.dirname(os.path.abspath(kvstash)))
    for bad, word in ((["--tokens", "100"], "--tokens"),
                      (["--tokens", "x"], "--tokens"),
                      (["--runs", "0"], "--runs"),
                      (["--layers", "4", "--gen-layers", "8"], "--gen-layers"),
                      (["--new-tokens", "1"], "--new-tokens"),
                      (["--frob"], "--frob")):
        rc, out, err = run([sys.executable, script, "--build", build] + bad)
        check(rc == 2 and word in err, "%r: exit %d, %r" % (bad, rc, err))
    rc, out, err = run([sys.executable, script, "--help"])
    check(rc == 0 and "--tiny" in out and err == "", "--help: %d %r" % (rc, err))
    rc, out, err = run([sys.executable, script, "--build",
                        os.path.join(tmp, "nowhere"), "--tiny"])
    check(rc == 1 and "is missing" in err and
          len(err.strip().splitlines()) == 1, "no build: %d %r" % (rc, err))


def test_dry_run(kvstash, kvstashd, script, tmp):
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        print("SKIP: the dry run needs torch and transformers")
        sys.exit(77)
    build = os.path.dirname(os.path.dirname(os.path.abspath(kvstash)))
    out = os.path.join(tmp, "out")
    rc, stdout, err = run([sys.executable, script, "--tiny", "--build", build,
                           "--out", out], timeout=600)
    check(rc == 0, "dry run: exit %d\n%s\n%s" % (rc, stdout, err))
    with open(os.path.join(out, "attach_bench.json")) as f:
        d = json.load(f)
    check(d["tiny"] and d["device"] == "cpu", "%r" % d)
    t = d["time_to_ready"]
    check(t["tokens"] == 1024 and t["attach_2bit_s"] > 0, "%r" % t)
    check(d["recompute"]["median_s"] > 0, "%r" % d["recompute"])
    r = d["ratios"]
    check(abs(r["recompute_over_attach"] - d["recompute"]["median_s"] /
              t["attach_2bit_s"]) < 1e-9, "%r" % r)
    g = d["generate"]
    check(g["layers"] == 2 and g["published_blocks"] == 2 * 1024 // 128,
          "%r" % g)
    for side in ("kvstash", "default"):
        check(g[side]["tokens_per_s"] > 0 and g[side]["steps"] == 3,
              "%s %r" % (side, g[side]))
    check(os.path.getsize(os.path.join(out, "attach_bench.png")) > 10000 or
          "matplotlib" not in sys.modules, "no plot")
    for word in ("time to ready", "target >= 4", "target >= 20", "tokens/s"):
        check(word in stdout, "output lacks %r:\n%s" % (word, stdout))


GROUPS = {"tool": test_tool, "args": test_args, "dry-run": test_dry_run}


def main():
    if len(sys.argv) != 6 or sys.argv[5] not in GROUPS:
        print("usage: attach_bench_test.py KVSTASH KVSTASHD SCRIPT SCRATCH "
              "{%s}" % ",".join(GROUPS), file=sys.stderr)
        return 2
    kvstash, kvstashd, script, scratch, group = sys.argv[1:]
    os.makedirs(scratch, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="attach-", dir=scratch)
    try:
        GROUPS[group](kvstash, kvstashd, script, tmp)
    except Failure as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok: %s" % group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
