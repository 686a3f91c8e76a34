#!/usr/bin/env python3
"""The CLI's remote forms against a real kvstashd on loopback.

cli_remote_test.py KVSTASH KVSTASHD SCRATCH

`kvstash --server HOST:PORT --auth-key-file FILE put|get|exists|delete|
stat` with the arguments and output of `kvstash store` where they
overlap: put prints one id per block (--durable: once durable), get --out
writes the bytes put and exits 3 on a miss, stat --json has store stat's
fields with the daemon's counters, a refused authentication exits 1 with
one line.  The daemon picks its port (127.0.0.1:0, --ready-file).
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

KVSTASH, KVSTASHD = sys.argv[1], sys.argv[2]
ALICE = "alice 000102030405060708090a0b0c0d0e0f\n"
WRONG = "alice 0f0e0d0c0b0a09080706050403020100\n"
BOB = "bob 101112131415161718191a1b1c1d1e1f\n"


# Failure, check() and run() come from the CLI tests' driver, the block
# maker from the store's CLI test.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
sys.path.insert(0, os.path.join(HERE, "..", "store"))
import cli_test  # noqa: E402
import cli_store_test  # noqa: E402
from cli_test import Failure, check  # noqa: E402

cli_test.KVSTASH = KVSTASH


def run(*args, expect=None):
    return cli_test.run(*args, expect=expect)


def pack(tmp, i, rng):
    return cli_store_test.pack(KVSTASH, tmp, i, rng)


def check_gets(remote, ids, blocks, tmp):
    """get ID --out FILE of each id gives the bytes of its block file."""
    for i, ident in enumerate(ids):
        dst = os.path.join(tmp, "got%d" % i)
        run(*remote, "get", ident, "--out", dst, expect=0)
        with open(dst, "rb") as a, open(blocks[i], "rb") as b:
            check(a.read() == b.read(), "get %d: bytes differ" % i)


def start_daemon(tmp):
    keys = os.path.join(tmp, "keys")
    with open(keys, "w") as f:
        f.write(ALICE + BOB)
    ready = os.path.join(tmp, "ready")
    if os.path.exists(ready):
        os.unlink(ready)
    log = open(os.path.join(tmp, "kvstashd.log"), "a")
    p = subprocess.Popen([KVSTASHD, "--listen", "127.0.0.1:0", "--dir",
                          os.path.join(tmp, "store"), "--auth-key-file", keys,
                          "--dram-capacity", "16M", "--nvme-capacity", "64M",
                          "--segment-size", "4M", "--ready-file", ready],
                         stdout=log, stderr=log)
    deadline = time.time() + 15
    while not os.path.exists(ready):
        check(p.poll() is None, "kvstashd exited at start")
        check(time.time() < deadline, "kvstashd not ready")
        time.sleep(0.02)
    with open(ready) as f:
        port = int(f.read().split()[0])
    return p, "127.0.0.1:%d" % port


def config_and_signals(tmp, key):
    """kvstashd from a config file (a flag on the command line wins);
    SIGHUP reopens the log file; SIGTERM exits 0."""
    keys = os.path.join(tmp, "keys")
    ready = os.path.join(tmp, "ready-conf")
    log = os.path.join(tmp, "conf.log")
    conf = os.path.join(tmp, "kvstashd.conf")
    with open(conf, "w") as f:
        f.write("# kvstashd test configuration\n"
                "listen = 127.0.0.1:0\n"
                "dir = %s\n"
                "auth-key-file = %s\n"
                "dram-capacity = 8M   # small\n"
                "nvme-capacity = 32M\n"
                "segment-size = 1M\n"
                "log-level = warn\n"
                "log-file = %s\n"
                "ready-file = %s\n" % (os.path.join(tmp, "store-conf"),
                                        keys, log, ready))
    p = subprocess.Popen([KVSTASHD, "--config", conf, "--log-level", "info"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 15
        while not os.path.exists(ready):
            check(p.poll() is None, "kvstashd --config exited: %r"
                  % p.stderr.read())
            check(time.time() < deadline, "kvstashd --config not ready")
            time.sleep(0.02)
        with open(ready) as f:
            addr = "127.0.0.1:%s" % f.read().split()[0]
        _, out, _ = run("--server", addr, "--auth-key-file", key, "stat",
                        "--json", expect=0)
        check(json.loads(out)["dram"]["capacity"] == 8 << 20,
              "config's dram-capacity not applied")
        with open(log) as f:
            text = f.read()
        check("kvstashd: listening on" in text, "log file: %r" % text)
        check("authenticated" in text,
              "--log-level info on the command line did not win")
        os.rename(log, log + ".1")
        p.send_signal(signal.SIGHUP)
        deadline = time.time() + 5
        while not os.path.exists(log):
            check(time.time() < deadline, "SIGHUP did not reopen the log")
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        check(p.wait(timeout=15) == 0, "SIGTERM exit status")
        with open(log) as f:
            text = f.read()
        check("log reopened" in text and "kvstashd: stopped" in text,
              "reopened log: %r" % text)
        # a bad config line: a usage error, one line
        with open(conf, "a") as f:
            f.write("no equals sign here\n")
        q = subprocess.run([KVSTASHD, "--config", conf],
                           capture_output=True, text=True, timeout=30)
        check(q.returncode == 2 and "expected 'name = value'" in q.stderr,
              "bad config: %d %r" % (q.returncode, q.stderr))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def main():
    tmp = tempfile.mkdtemp(prefix="cli-remote-", dir=sys.argv[3])
    daemon = None
    try:
        rng = random.Random(5)
        blocks = [pack(tmp, i, rng) for i in range(3)]
        key = os.path.join(tmp, "key-alice")
        with open(key, "w") as f:
            f.write(ALICE)
        wrong = os.path.join(tmp, "key-wrong")
        with open(wrong, "w") as f:
            f.write(WRONG)
        bob = os.path.join(tmp, "key-bob")
        with open(bob, "w") as f:
            f.write(BOB)
        daemon, addr = start_daemon(tmp)
        remote = ["--server", addr, "--auth-key-file", key]

        # put prints one id per block, as `store put` does
        _, out, _ = run(*remote, "put", *blocks, expect=0)
        ids = out.split()
        check(len(ids) == 3, "put printed %r" % out)
        _, local, _ = run("store", "put", "--dir", os.path.join(tmp, "local"),
                          *blocks, expect=0)
        check(local.split() == ids, "remote ids %r, store ids %r"
              % (ids, local.split()))
        _, out, _ = run(*remote, "put", "--durable", blocks[0], expect=0)
        check(out.split() == ids[:1], "put --durable printed %r" % out)

        # get: the bytes put
        check_gets(remote, ids, blocks, tmp)

        # exists / delete / a miss: exit 3
        _, out, _ = run(*remote, "exists", *ids, expect=0)
        check(out.split().count("present") == 3, "exists: %r" % out)
        run(*remote, "delete", ids[2], expect=0)
        rc, out, err = run(*remote, "get", ids[2], "--out",
                           os.path.join(tmp, "miss"), expect=3)
        check("not found" in err and len(err.splitlines()) == 1,
              "miss message: %r" % err)
        check(not os.path.exists(os.path.join(tmp, "miss")),
              "a miss wrote its output")
        _, out, _ = run(*remote, "exists", ids[2], expect=3)
        check("absent" in out, "exists after delete: %r" % out)
        run(*remote, "delete", ids[2], expect=3)

        # another tenant's namespace: a miss
        run("--server", addr, "--auth-key-file", bob, "get", ids[0], "--out",
            os.path.join(tmp, "bob"), expect=3)

        # usage errors stay usage errors (2)
        run(*remote, "get", "nothex", "--out", os.path.join(tmp, "x"),
            expect=2)
        run(*remote, "get", ids[0], expect=2)
        run(*remote, "frobnicate", expect=2)

        # stat --json: store stat's fields, the daemon's counters
        _, out, _ = run(*remote, "stat", "--json", expect=0)
        st = json.loads(out)
        _, local, _ = run("store", "stat", "--dir", os.path.join(tmp, "local"),
                          "--json", expect=0)
        missing = set(json.loads(local)) - set(st)
        check(not missing, "stat --json lacks %r" % missing)
        check(st["counters_scope"] == "daemon", "scope %r"
              % st["counters_scope"])
        check(st["hits"] == 3 and st["misses"] >= 2,
              "daemon counters: hits %d misses %d" % (st["hits"],
                                                      st["misses"]))
        check(st["dram"]["blocks"] == 2, "dram blocks %d"
              % st["dram"]["blocks"])
        run(*remote, "stat", expect=0)

        # a refused authentication: exit 1, one line that says so
        rc, out, err = run("--server", addr, "--auth-key-file", wrong,
                           "stat", expect=1)
        check(len(err.splitlines()) == 1 and "authentication refused" in err,
              "refusal message: %r" % err)
        # no server there: exit 1, one line
        daemon.send_signal(signal.SIGTERM)
        check(daemon.wait(timeout=15) == 0, "kvstashd exit status")
        daemon = None
        rc, out, err = run(*remote, "--timeout-ms", "2000", "stat", expect=1)
        check(len(err.splitlines()) == 1, "no-server message: %r" % err)
        config_and_signals(tmp, key)
        print("cli remote: all checks passed")
        return 0
    except Failure as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        if daemon is not None:
            daemon.kill()
            daemon.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
