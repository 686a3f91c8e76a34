#!/usr/bin/env python3
"""Integration test of `kvstash store put|get|delete|stat|fsck`.

cli_store_test.py KVSTASH WORKDIR: packs a few small blocks with
`kvstash block pack`, stores them across separate processes, reads them
back byte-identical, checks stat and fsck output, damages a record and
checks that it becomes a miss, that fsck names it and --repair drops it;
a corrupt record is named so by get and fsck; garbage after the newest
segment's log end (a torn tail): stat counts it and changes nothing, the
next writer cuts it; a delete holds across processes and fsck names its
tombstone; a held lock makes a command give up after
--lock-timeout naming the holder; stat and get create nothing.
Then the command line's conventions: exit 3 for a miss only, one stderr
line per failure, usage errors with a hint, sizes, and a failed write of
the output (stdout on /dev/full) as a failure.
Exit status 0 on success, 1 with a message on the first failure.
"""
import fcntl
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import time


# run(), check() and Failure come from the CLI helper's test driver.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))
import cli_test  # noqa: E402
from cli_test import Failure, check, one_line  # noqa: E402


def run(kvstash, *args, expect=None):
    cli_test.KVSTASH = kvstash
    return cli_test.run(*args, expect=expect)


def flip_bit(path, offset):
    """Flips the lowest bit of the byte at @offset of @path."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0x01]))


def pack(kvstash, tmp, i, rng):
    n = 32 * 32
    names = []
    for part in ("k", "v"):
        name = os.path.join(tmp, "%s%d" % (part, i))
        with open(name, "wb") as f:
            f.write(struct.pack("<%df" % n,
                                *[rng.gauss(0, 1) for _ in range(n)]))
        names.append(name)
    ids = os.path.join(tmp, "ids%d" % i)
    with open(ids, "wb") as f:
        f.write(struct.pack("<32I",
                            *[rng.randrange(1 << 32) for _ in range(32)]))
    out = os.path.join(tmp, "b%d.blk" % i)
    run(kvstash, "block", "pack", "--kv-heads", 1, "--head-dim", 32,
        "--tokens", 32, "--bits", 2, "--group", 32, "--meta", "fp16",
        "--dtype", "f32", "--keys", names[0], "--values", names[1],
        "--token-ids", ids, "--out", out, expect=0)
    return out


def usage_error(kvstash, args, cmd):
    cli_test.KVSTASH = kvstash
    return cli_test.usage_error(args, cmd)


def failure(kvstash, args, cmd, expect=1):
    cli_test.KVSTASH = kvstash
    return cli_test.failure(args, cmd, expect)


def check_full(kvstash, args, cmd):
    cli_test.KVSTASH = kvstash
    cli_test.check_full(args, cmd)


def check_conventions(kvstash, tmp, st, ids, blocks, rng):
    """Exit statuses, one-line messages, checked stdout, sizes."""
    x = os.path.join(tmp, "miss-out")
    # a miss is 3 and nothing else is; one line names the id
    line = failure(kvstash, ["store", "get", "--dir", st, "1" * 64 + ":7",
                             "--out", x], "store get", expect=3)
    check(line.endswith("1" * 64 + ":7: not found"), line)
    check(not os.path.exists(x), "a miss wrote --out")
    # failures: one line each, the library's cause included, no second
    # line from the engine's log
    line = failure(kvstash, ["store", "stat", "--dir",
                             os.path.join(tmp, "none")], "store stat")
    check("no store" in line, line)
    failure(kvstash, ["store", "fsck", "--dir", os.path.join(tmp, "none")],
            "store fsck")
    plain = os.path.join(tmp, "plain-file")
    with open(plain, "wb") as f:
        f.write(b"not a directory")
    line = failure(kvstash, ["store", "put", "--dir",
                             os.path.join(plain, "s"), blocks[0]],
                   "store put")
    check("Not a directory" in line, "put under a file: %r" % line)
    failure(kvstash, ["store", "put", "--dir", st,
                      os.path.join(tmp, "missing.blk")], "store put")
    # usage errors: one line and the hint
    usage_error(kvstash, ["store", "get", "--dir", st, ids[0]], "store get")
    usage_error(kvstash, ["store", "get", "--dir", st, "zz", "--out", x],
                "store get")
    usage_error(kvstash, ["store", "put", "--dir", st], "store put")
    usage_error(kvstash, ["store", "stat", "--dir", st, "extra"],
                "store stat")
    usage_error(kvstash, ["store", "fsck"], "store fsck")
    # sizes: suffixes and leading zeros; no upper bound of 0 for no limit
    line = usage_error(kvstash, ["store", "put", "--dir", st,
                                 "--nvme-capacity", "1K", blocks[0]],
                       "store put")
    check(line.endswith("--nvme-capacity: 1K is out of range: must be at "
                        "least 1M"), line)
    line = usage_error(kvstash, ["store", "put", "--dir", st,
                                 "--segment-size", "2T", blocks[0]],
                       "store put")
    check(line.endswith("must be between 256K and 1T"), line)
    line = usage_error(kvstash, ["store", "put", "--dir", st,
                                 "--dram-capacity", "0x100000", blocks[0]],
                       "store put")
    check("0x100000" in line, line)
    _, out, _ = run(kvstash, "store", "put", "--dir", st, "--dram-capacity",
                    "01M", "--nvme-capacity", "064MiB", blocks[0],
                    expect=0)
    check(out.split() == [ids[0]], "put with 01M/064MiB: %r" % out)
    for args in (["store", "--help"], ["store", "put", "--help"]):
        _, out, err = run(kvstash, *args, expect=0)
        check(out.startswith("usage: ") and "exits 3 on a miss" in out and
              err == "", "%s: %r %r" % (args, out, err))

    if not os.path.exists("/dev/full"):
        return
    # The ids put prints are the acknowledgement: if they cannot be
    # written, put fails.
    new = pack(kvstash, tmp, 99, rng)
    check_full(kvstash, ["store", "put", "--dir", st, new], "store put")
    check_full(kvstash, ["store", "put", "--dir", st, "--durable", new],
               "store put")
    check_full(kvstash, ["store", "stat", "--dir", st], "store stat")
    check_full(kvstash, ["store", "stat", "--dir", st, "--json"],
               "store stat")
    check_full(kvstash, ["store", "fsck", "--dir", st], "store fsck")
    check_full(kvstash, ["store", "fsck", "--dir", st, "--json"],
               "store fsck")
    check_full(kvstash, ["store", "--help"], "store")
    failure(kvstash, ["store", "get", "--dir", st, ids[0], "--out",
                      "/dev/full"], "store get")


def main():
    kvstash, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=work, prefix="cli-store-")
    try:
        rng = random.Random(3)
        blocks = [pack(kvstash, tmp, i, rng) for i in range(6)]
        st = os.path.join(tmp, "store")

        # put prints one id per block, in order, across processes
        _, out, _ = run(kvstash, "store", "put", "--dir", st,
                        "--dram-capacity", "1M", "--nvme-capacity", "64M",
                        *blocks[:4], expect=0)
        ids = out.split()
        check(len(ids) == 4, "put printed %d ids" % len(ids))
        _, out, _ = run(kvstash, "store", "put", "--dir", st, "--durable",
                        *blocks[4:], expect=0)
        ids += out.split()
        check(len(ids) == 6, "durable put printed %d ids" % len(ids))
        for i, ident in enumerate(ids):
            hexpart, layer = ident.split(":")
            check(len(hexpart) == 64 and layer == "0", "id " + ident)
            got = os.path.join(tmp, "got%d" % i)
            run(kvstash, "store", "get", "--dir", st, ident, "--out", got,
                expect=0)
            with open(got, "rb") as a, open(blocks[i], "rb") as b:
                check(a.read() == b.read(), "block %d differs" % i)

        # a miss: exit 3, one line; a bad id: exit 2
        rc, _, err = run(kvstash, "store", "get", "--dir", st,
                         "0" * 64 + ":0", "--out", os.path.join(tmp, "x"))
        check(rc == 3 and err.count("\n") == 1, "miss: %d %r" % (rc, err))
        rc, _, _ = run(kvstash, "store", "get", "--dir", st, "zz",
                       "--out", os.path.join(tmp, "x"))
        check(rc == 2, "bad id exit %d" % rc)
        rc, _, _ = run(kvstash, "store", "stat", "--dir",
                       os.path.join(tmp, "none"), "--json")
        check(rc == 1, "stat of no store exit %d" % rc)

        # a corrupt block is refused, nothing printed
        with open(blocks[0], "rb") as f:
            bad = bytearray(f.read())
        bad[-1] ^= 0x10
        badf = os.path.join(tmp, "bad.blk")
        with open(badf, "wb") as f:
            f.write(bad)
        rc, out, _ = run(kvstash, "store", "put", "--dir", st, badf)
        check(rc == 1 and out == "", "corrupt put: %d %r" % (rc, out))

        _, out, _ = run(kvstash, "store", "stat", "--dir", st, "--json",
                        expect=0)
        s = json.loads(out)
        for key in ("hits", "misses", "evictions", "spills",
                    "corrupt_dropped"):
            check(key in s, "stat lacks " + key)
        for tier in ("dram", "nvme"):
            for key in ("blocks", "bytes", "capacity"):
                check(key in s[tier], "stat %s lacks %s" % (tier, key))
        check(s.get("counters_scope") == "process",
              "stat counters_scope %r" % s.get("counters_scope"))
        check(s["nvme"]["blocks"] == 6, "nvme blocks %d" % s["nvme"]["blocks"])

        _, out, _ = run(kvstash, "store", "fsck", "--dir", st, "--json",
                        expect=0)
        f = json.loads(out)
        check(f["good"] == 6 and f["corrupt"] == 0 and f["torn"] == 0,
              "fsck clean: %r" % f)

        # flip a byte inside the second record: a miss, fsck names it
        segs = sorted(n for n in os.listdir(st) if n.startswith("seg-"))
        target = os.path.join(st, segs[0])
        flip_bit(target, 8192 + 1000)
        rc, _, _ = run(kvstash, "store", "get", "--dir", st, ids[1],
                       "--out", os.path.join(tmp, "x"))
        check(rc == 3, "damaged block served (exit %d)" % rc)
        run(kvstash, "store", "get", "--dir", st, ids[2], "--out",
            os.path.join(tmp, "x"), expect=0)
        rc, out, _ = run(kvstash, "store", "fsck", "--dir", st, "--json")
        f = json.loads(out)
        check(rc == 1 and f["corrupt"] + f["torn"] == 1,
              "fsck damaged: %d %r" % (rc, f))
        bad_recs = [r for r in f["records"] if r["status"] != "good"]
        check(len(bad_recs) == 1 and bad_recs[0]["offset"] == 8192 and
              "check" in bad_recs[0], "fsck record: %r" % bad_recs)
        run(kvstash, "store", "fsck", "--dir", st, "--repair", "--json",
            expect=0)
        _, out, _ = run(kvstash, "store", "fsck", "--dir", st, "--json",
                        expect=0)
        f = json.loads(out)
        check(f["good"] == 5 and f["corrupt"] + f["torn"] == 0,
              "after repair: %r" % f)
        for i in (0, 2, 3, 4, 5):
            run(kvstash, "store", "get", "--dir", st, ids[i], "--out",
                os.path.join(tmp, "x"), expect=0)

        # a corrupt record is named so by get (still a miss)
        flip_bit(target, 8192 + 1000)
        rc, _, err = run(kvstash, "store", "get", "--dir", st, ids[2],
                         "--out", os.path.join(tmp, "x"))
        check(rc == 3 and "corrupt" in err and err.count("\n") == 1,
              "corrupt get: %d %r" % (rc, err))
        rc, out, _ = run(kvstash, "store", "fsck", "--dir", st, "--json")
        f = json.loads(out)
        check(rc == 1 and f["corrupt"] == 1 and f["torn"] == 0,
              "fsck corrupt: %d %r" % (rc, f))
        run(kvstash, "store", "fsck", "--dir", st, "--repair", expect=0)

        # a writer leaves a head; garbage after its log end (a torn tail,
        # as a crash leaves): stat (read-only) counts it and changes
        # nothing; the next writer cuts it off
        run(kvstash, "store", "put", "--dir", st, blocks[1], expect=0)
        segs = sorted(n for n in os.listdir(st) if n.startswith("seg-"))
        with open(os.path.join(st, segs[-1]), "ab") as fh:
            fh.write(bytes(range(256)) * 16)
        torn = []
        for _ in range(2):
            _, out, _ = run(kvstash, "store", "stat", "--dir", st, "--json",
                            expect=0)
            torn.append(json.loads(out)["torn_dropped"])
        check(torn == [1, 1], "torn tail counted by stat %r" % torn)
        run(kvstash, "store", "put", "--dir", st, blocks[1], expect=0)
        _, out, _ = run(kvstash, "store", "stat", "--dir", st, "--json",
                        expect=0)
        check(json.loads(out)["torn_dropped"] == 0, "torn tail not cut")
        for i in (0, 1, 3, 4, 5):
            run(kvstash, "store", "get", "--dir", st, ids[i], "--out",
                os.path.join(tmp, "x"), expect=0)

        # delete: one line per id, exit 3 for a miss; the deletion holds
        # across processes, fsck names its tombstone
        rc, out, _ = run(kvstash, "store", "delete", "--dir", st,
                         "--durable", ids[3], "0" * 64 + ":0")
        check(rc == 3 and out == "%s deleted\n%s not found\n" %
              (ids[3], "0" * 64 + ":0"), "delete: %d %r" % (rc, out))
        rc, _, _ = run(kvstash, "store", "get", "--dir", st, ids[3],
                       "--out", os.path.join(tmp, "x"))
        check(rc == 3, "deleted block served (exit %d)" % rc)
        rc, out, _ = run(kvstash, "store", "delete", "--dir", st, ids[3])
        check(rc == 3 and out == ids[3] + " not found\n",
              "second delete: %d %r" % (rc, out))
        _, out, _ = run(kvstash, "store", "fsck", "--dir", st, "--json",
                        expect=0)
        f = json.loads(out)
        check(f["tombstones"] == 1 and
              sum(1 for r in f["records"] if r.get("tombstone")) == 1,
              "fsck tombstones: %r" % f)
        rc, _, _ = run(kvstash, "store", "delete", "--dir", st, "zz")
        check(rc == 2, "delete of a bad id: exit %d" % rc)
        run(kvstash, "store", "put", "--dir", st, blocks[3], expect=0)
        run(kvstash, "store", "get", "--dir", st, ids[3], "--out",
            os.path.join(tmp, "x"), expect=0)

        # another process holds the store (a writer stopped, say): a
        # command gives up after --lock-timeout, naming it
        dfd = os.open(st, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(dfd, fcntl.LOCK_EX)
        t0 = time.monotonic()
        rc, _, err = run(kvstash, "store", "stat", "--dir", st,
                         "--lock-timeout", "0.5")
        waited = time.monotonic() - t0
        os.close(dfd)
        check(rc == 1 and "pid %d" % os.getpid() in err and waited < 5,
              "lock timeout: %d %.1fs %r" % (rc, waited, err))
        run(kvstash, "store", "stat", "--dir", st, "--lock-timeout", "0.5",
            expect=0)

        # stat and get create nothing where there is no store
        empty = os.path.join(tmp, "empty")
        os.mkdir(empty)
        for cmd in (["stat"], ["get", ids[0], "--out", os.path.join(tmp,
                                                                     "y")]):
            rc, _, _ = run(kvstash, "store", *cmd[:1], "--dir", empty,
                           *cmd[1:])
            check(rc != 0 and os.listdir(empty) == [],
                  "%s on no store: %d %r" % (cmd[0], rc,
                                             os.listdir(empty)))
        check_conventions(kvstash, tmp, st, ids, blocks, rng)
    except Failure as e:
        print("FAIL:", e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
