#!/usr/bin/env python3
"""Integration tests of `kvstash bench trace` and bench/trace_gen.py.

trace_test.py KVSTASH BENCH_DIR SCRATCH GROUP drives the real binary on
traces written here (whose counts are worked out by hand in the comments)
and on traces from the generator.  Stores are made under SCRATCH (a real
disk).  Every check asserts a result; the first failure stops the group
with a message and exit status 1.

Groups: hand, lru, tiers, scale, determinism, malformed, csv, sweep, args,
server.  The server group starts real kvstashd processes ($KVSTASHD, this
build's) on 127.0.0.1 with ports they pick, stores under SCRATCH, and
replays through them with --server (exit 77 where there is no kvstashd).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

KVSTASH = BENCH = SCRATCH = TMP = None
DAEMONS = []  # kvstashd processes started by this group, stopped at exit
KEY = "replay 000102030405060708090a0b0c0d0e0f\n"


class Skip(Exception):
    pass

# One trace block of 512 tokens is 4 spans of 128; the test model has one
# layer and one KV head of D=128, so a block is 4 objects (2-bit: 12800
# bytes each, a 16 KiB record and DRAM slot).  A DRAM arena under 1 MiB is
# cut into 64 KiB slabs of 4 slots: 64 KiB of DRAM holds exactly 1 block.
SMALL = ["--layers", "1", "--kv-heads", "1", "--head-dim", "128"]
OBJ = 12800
BLOCK_DRAM = 64 << 10


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def run(*args, expect=0, env=None):
    p = subprocess.run([KVSTASH] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=600, env=env)
    if expect is not None and p.returncode != expect:
        raise Failure("kvstash %s: exit %d, expected %d\nstdout:\n%s\n"
                      "stderr:\n%s" % (" ".join(map(str, args)),
                                       p.returncode, expect, p.stdout,
                                       p.stderr))
    return p


def replay(trace, *args):
    """One replay with --json; the parsed object."""
    p = run("bench", "trace", trace, "--dir", SCRATCH, "--progress", "0",
            "--json", *args)
    return json.loads(p.stdout)


def replay_server(trace, server, *args):
    """One replay through the daemon @server ([--server, ADDR,
    --auth-key-file, FILE]) with --json: (parsed object, stderr)."""
    p = run("bench", "trace", trace, "--progress", "0", "--json", *server,
            *args)
    return json.loads(p.stdout), p.stderr


def write_trace(name, requests):
    """@requests: (input_length, hash_ids) pairs, as JSON lines."""
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        for i, (tokens, ids) in enumerate(requests):
            f.write(json.dumps({"timestamp": i * 10, "input_length": tokens,
                                "output_length": 16, "hash_ids": ids}))
            f.write("\n")
    return path


def gen(name, *args):
    path = os.path.join(TMP, name)
    subprocess.run([sys.executable, os.path.join(BENCH, "trace_gen.py"),
                    "-o", path] + [str(a) for a in args], check=True,
                   timeout=120)
    return path


def counts(r):
    """The counters a replay must reproduce (no timings)."""
    keys = ("requests", "lookup_blocks", "hit_blocks", "miss_blocks",
            "dram_hit_blocks", "nvme_hit_blocks", "prompt_tokens",
            "hit_tokens", "prefill_tokens_saved")
    return {k: r[k] for k in keys}


def expect_counts(r, **want):
    for k, v in want.items():
        check(r[k] == v, "%s: %r, expected %r" % (k, r[k], v))


# ---- hand-computed traces -------------------------------------------------

def group_hand():
    dram = "1M"  # 16 blocks: nothing is evicted below

    # One prefix of 3 blocks, four times: the first request misses all 3
    # (12 objects put), the next three hit all 3 (36 objects read).
    t = write_trace("repeat.jsonl", [(1536, [1, 2, 3])] * 4)
    r = replay(t, *SMALL, "--dram-capacity", dram, "--nvme-capacity", "0")
    expect_counts(r, requests=4, lookup_blocks=12, hit_blocks=9,
                  miss_blocks=3, dram_hit_blocks=9, nvme_hit_blocks=0,
                  prompt_tokens=4 * 1536, hit_tokens=9 * 512,
                  prefill_tokens_saved=9 * 512, evictions=0,
                  objects_put=12, objects_read=36,
                  bytes_written=12 * OBJ, bytes_read=36 * OBJ)
    check(r["prefix_hit_ratio"] == 0.75, "ratio %r" % r["prefix_hit_ratio"])
    check(r["objects"]["per_block"] == 4 and
          r["objects"]["object_bytes"] == OBJ, "objects %r" % r["objects"])
    expect_counts(r["lru"], hit_blocks=9, hit_tokens=9 * 512)

    # A chain that extends: [1], [1 2], [1 2 3], [1 2 3 4]: request n
    # hits the n-1 blocks before it and adds one.
    t = write_trace("chain.jsonl", [(512 * n, list(range(1, n + 1)))
                                    for n in range(1, 5)])
    r = replay(t, *SMALL, "--dram-capacity", dram, "--nvme-capacity", "0")
    expect_counts(r, lookup_blocks=10, hit_blocks=6, hit_tokens=6 * 512,
                  prompt_tokens=10 * 512, objects_put=16, evictions=0)
    expect_counts(r["lru"], hit_blocks=6)

    # Equal ids under different parents are different prefixes: [1 2 3]
    # then [1 2 4] (hits 1 2), then [5 2 3] (2 after 5 is new: no hit).
    t = write_trace("tree.jsonl", [(1536, [1, 2, 3]), (1536, [1, 2, 4]),
                                   (1536, [5, 2, 3])])
    r = replay(t, *SMALL, "--dram-capacity", dram, "--nvme-capacity", "0")
    expect_counts(r, lookup_blocks=9, hit_blocks=2, objects_put=28)
    check(r["distinct_blocks"] == 7, "distinct %r" % r["distinct_blocks"])

    # A partial last block: 1300 tokens in 3 blocks, twice; the second
    # request saves all its 1300 tokens, not 3 x 512.
    t = write_trace("partial.jsonl", [(1300, [7, 8, 9])] * 2)
    r = replay(t, *SMALL, "--dram-capacity", dram, "--nvme-capacity", "0")
    expect_counts(r, hit_blocks=3, hit_tokens=1300, prompt_tokens=2600)
    check(r["length_mismatches"] == 0, "mismatches")
    t = write_trace("mismatch.jsonl", [(100, [7, 8, 9])])
    r = replay(t, *SMALL, "--dram-capacity", dram, "--nvme-capacity", "0")
    check(r["length_mismatches"] == 1, "a 100-token prompt in 3 blocks "
          "is counted as a mismatch")

    # Capacity for exactly k = 3 blocks (3 slabs of 4 slots): [1 2 3]
    # twice hits 3 the second time and evicts nothing.  One block less
    # (2 slabs): under S3-FIFO and LRU putting block 3 evicts block 1 (the
    # oldest, never read), so the second request finds no prefix at all;
    # the prefix policy (the default) never evicts a parent for its own
    # child, refuses block 3 and the second request hits 1 and 2.
    t = write_trace("cap.jsonl", [(1536, [1, 2, 3])] * 2)
    r = replay(t, *SMALL, "--dram-capacity", 3 * BLOCK_DRAM,
               "--nvme-capacity", "0")
    expect_counts(r, hit_blocks=3, evictions=0)
    expect_counts(r["lru"], hit_blocks=3, evicted_blocks=0)
    r = replay(t, *SMALL, "--dram-capacity", 2 * BLOCK_DRAM,
               "--nvme-capacity", "0")
    expect_counts(r, hit_blocks=2)
    check(r["put_refused"] >= 4, "refused %r" % r["put_refused"])
    r = replay(t, *SMALL, "--dram-capacity", 2 * BLOCK_DRAM,
               "--nvme-capacity", "0", "--eviction", "s3fifo")
    expect_counts(r, hit_blocks=0)
    check(r["evictions"] >= 4, "evictions %r" % r["evictions"])
    expect_counts(r["lru"], hit_blocks=0)
    check(r["lru"]["evicted_blocks"] >= 1, "LRU evicted nothing")


def group_lru():
    # LRU of 3 blocks (DRAM only), one block a request:
    # 1 2 3 1 4 1: the second 1 hits; 4 evicts 2 (least recent);
    # the third 1 hits.  2 hits.
    t = write_trace("lru1.jsonl", [(512, [b]) for b in (1, 2, 3, 1, 4, 1)])
    r = replay(t, *SMALL, "--dram-capacity", 3 * BLOCK_DRAM,
               "--nvme-capacity", "0")
    expect_counts(r["lru"], hit_blocks=2, evicted_blocks=1)
    # 1 2 3 4 1 2: LRU's worst case, 4 evicts 1, 1 evicts 2: no hit.
    t = write_trace("lru2.jsonl", [(512, [b]) for b in (1, 2, 3, 4, 1, 2)])
    r = replay(t, *SMALL, "--dram-capacity", 3 * BLOCK_DRAM,
               "--nvme-capacity", "0")
    expect_counts(r["lru"], hit_blocks=0, evicted_blocks=3)
    # Two tiers, 1 block of DRAM in front of 2 of NVMe (one LRU of 3):
    # 1 2 3 1: 1 was demoted to NVMe and is read from there.  (Blocks of
    # 8 heads, 4 x 98816 bytes, so that 2 of them are an NVMe tier the
    # store accepts.)
    t = write_trace("lru3.jsonl", [(512, [b]) for b in (1, 2, 3, 1)])
    block = 4 * 98816
    r = replay(t, "--layers", "1", "--kv-heads", "8", "--head-dim", "128",
               "--dram-capacity", block, "--nvme-capacity", 2 * block)
    expect_counts(r["lru"], hit_blocks=1, nvme_hit_blocks=1,
                  dram_hit_blocks=0, demoted_blocks=3, evicted_blocks=0)
    # The optimum keeps 1 in DRAM (2 and 3 are never used again: they
    # bypass the smaller cache), so its hit comes from DRAM.
    expect_counts(r["optimum"], hit_blocks=1, dram_hit_blocks=1,
                  nvme_hit_blocks=0, evicted_blocks=0)


def group_optimum():
    # Belady over 3 blocks: 1 2 3 4 1 2: 4 is never used again and
    # ranks last, so it is not cached; 1 and 2 hit (LRU: none).
    t = write_trace("opt1.jsonl", [(512, [b]) for b in (1, 2, 3, 4, 1, 2)])
    r = replay(t, *SMALL, "--dram-capacity", 3 * BLOCK_DRAM,
               "--nvme-capacity", "0")
    expect_counts(r["optimum"], hit_blocks=2, evicted_blocks=0,
                  hit_tokens=2 * 512, prompt_tokens=6 * 512)
    expect_counts(r["lru"], hit_blocks=0)
    # The chain: [1 2 3], [1 2 4], [1 2 3] in 3 blocks.  At 4 the
    # cache holds 1 2 3, all used next at the third request: the deepest,
    # 3, would go, but 4 (never used again) ranks after it and bypasses:
    # the third request hits all 3 (5 hit blocks in all).  LRU evicts 3
    # for 4 and hits 2 + 2.  A parent never goes before its child.
    t = write_trace("opt2.jsonl", [(1536, [1, 2, 3]), (1536, [1, 2, 4]),
                                   (1536, [1, 2, 3])])
    r = replay(t, *SMALL, "--dram-capacity", 3 * BLOCK_DRAM,
               "--nvme-capacity", "0")
    expect_counts(r["optimum"], hit_blocks=5, evicted_blocks=0,
                  miss_blocks=4)
    expect_counts(r["lru"], hit_blocks=4, evicted_blocks=2)
    check(r["optimum"]["prefix_hit_ratio"] == 5 / 9, "optimum ratio %r" %
          r["optimum"]["prefix_hit_ratio"])
    # Every field of the LRU's object is in the optimum's.
    check(sorted(r["optimum"]) == sorted(r["lru"]), "optimum fields %r" %
          sorted(r["optimum"]))
    # Two requests: [1 2] [3 4] then [1 2] in 2 blocks: the optimum keeps
    # 1 2 (next used last) and bypasses 3 4: 2 hits; the store's prefix
    # policy (the default) keeps them too, as leaves-first would not
    # evict 1 while 2 stays.
    t = write_trace("opt3.jsonl", [(1024, [1, 2]), (1024, [3, 4]),
                                   (1024, [1, 2])])
    r = replay(t, *SMALL, "--dram-capacity", 2 * BLOCK_DRAM,
               "--nvme-capacity", "0")
    expect_counts(r["optimum"], hit_blocks=2)
    expect_counts(r["lru"], hit_blocks=0)


def group_tiers():
    # DRAM for 1 block in front of a 1 MiB NVMe tier: the first request
    # puts 3 blocks, so 2 leave DRAM for NVMe (spilled: written there);
    # the second request finds all 3, some of them on NVMe.
    t = write_trace("tiers.jsonl", [(1536, [1, 2, 3])] * 2)
    # (S3-FIFO, which spills every block it evicts; the prefix policy
    # writes a block that could not be hit from DRAM to NVMe at once)
    r = replay(t, *SMALL, "--dram-capacity", BLOCK_DRAM,
               "--nvme-capacity", "1M", "--segment-size", "256K",
               "--eviction", "s3fifo")
    expect_counts(r, hit_blocks=3, read_misses=0)
    check(r["dram_hit_blocks"] + r["nvme_hit_blocks"] == 3, "tiers")
    check(r["nvme_hit_blocks"] >= 2, "NVMe hits %r" % r["nvme_hit_blocks"])
    check(r["spills"] >= 8, "spills %r" % r["spills"])
    check(r["nvme_bytes_written"] == r["spills"] * OBJ, "NVMe bytes")
    check(r["nvme_bytes_read"] >= 8 * OBJ, "NVMe reads")
    check(r["dram_bytes_read"] + r["nvme_bytes_read"] == r["bytes_read"],
          "bytes read by tier")
    check(r["store_segment_size"] == 256 << 10 and
          r["store_nvme_segments"] == 4, "segments as given at scale 1")


# ---- properties on generated traces --------------------------------------

MODEL4 = ["--layers", "4", "--kv-heads", "2", "--head-dim", "128"]
# 4 layers of one head: 16 objects a block, each in a 16 KiB record, a
# size every DRAM slab holds a whole number of.
MODEL4H1 = ["--layers", "4", "--kv-heads", "1", "--head-dim", "128"]


def group_scale():
    # Layers, then spans per block, are divided away by the scale while
    # every object keeps its real size, and the store's own sizes divide
    # evenly at these capacities (20 slabs of DRAM whose tenth, the S3-FIFO
    # small queue, is whole records; 64 NVMe segments of 16 blocks of
    # 256 KiB of records each): hit counts do not change with the scale,
    # and neither do the tiers.  Under S3-FIFO, whose order is one of
    # independent objects: the prefix policy (the default) sees the chain
    # of a block's spans at scale 1 and one object a block at full scale,
    # so its choices may differ with the scale.
    t = gen("scale.jsonl", "--requests", "600", "--seed", "7",
            "--documents", "80")
    for dram, nvme in (("160M", "0"), ("80M", "256M")):
        seg = ["--segment-size", 8192 + 16 * (256 << 10),
               "--eviction", "s3fifo"]
        base = replay(t, *MODEL4H1, "--dram-capacity", dram,
                      "--nvme-capacity", nvme, *seg)
        check(base["evictions"] > 0, "no eviction at %s" % dram)
        check(0 < base["hit_blocks"] < base["lookup_blocks"],
              "hits %r" % base["hit_blocks"])
        if nvme != "0":
            check(base["nvme_hit_blocks"] > 0, "no NVMe hit")
            check(base["store_nvme_segments"] == 63, "segments %r" %
                  base["store_nvme_segments"])
        for k in (2, 4, 8, 16):
            r = replay(t, *MODEL4H1, "--dram-capacity", dram,
                       "--nvme-capacity", nvme, "--scale", k, *seg)
            check(r["objects"]["per_block"] * k == 16, "objects at %d" % k)
            if k == 16:
                # A tier of a few hundred objects: the policy's minimum
                # of 256 remembered keys is more blocks here than at
                # scale 1, so the counts are close, not equal.
                check(abs(r["hit_blocks"] - base["hit_blocks"]) <=
                      0.03 * base["hit_blocks"], "scale 16: %d vs %d" %
                      (r["hit_blocks"], base["hit_blocks"]))
                continue
            check(r["store_dram_capacity"] * k ==
                  base["store_dram_capacity"], "DRAM at %d" % k)
            check(r["store_nvme_segments"] == base["store_nvme_segments"]
                  and (r["store_segment_size"] - 8192) * k ==
                  (base["store_segment_size"] - 8192) or nvme == "0",
                  "segments at %d" % k)
            check(counts(r) == counts(base), "scale %d at %s/%s: %r != %r"
                  % (k, dram, nvme, counts(r), counts(base)))
            check(counts(r["lru"]) == counts(base["lru"]), "LRU scale")
            check(r["bytes_written"] * k == base["bytes_written"],
                  "bytes at scale %d" % k)
            # Objects of one block leave together, except where a put
            # stops inside a block.
            check(abs(r["evictions"] * k - base["evictions"]) <=
                  0.01 * base["evictions"] + 16,
                  "evictions at scale %d: %d vs %d" %
                  (k, r["evictions"], base["evictions"]))
    # Objects that lose heads keep their per-record overhead in
    # proportion (DRAM divided by 16 x 16384 / 2 x 28672 rather than 32).
    r = replay(t, *MODEL4, "--dram-capacity", "128M", "--nvme-capacity",
               "0", "--scale", "32")
    check(r["objects"]["heads_kept"] == 1 and
          r["store_dram_capacity"] == (128 << 20) * 16384 // (16 * 28672),
          "head scaling: %r" % r["store_dram_capacity"])


def group_determinism():
    a = gen("g1.jsonl", "--requests", "300", "--seed", "5")
    b = gen("g2.jsonl", "--requests", "300", "--seed", "5")
    c = gen("g3.jsonl", "--requests", "300", "--seed", "6")
    data = [open(p, "rb").read() for p in (a, b, c)]
    check(data[0] == data[1], "same seed, different traces")
    check(data[0] != data[2], "different seeds, same trace")

    # What the generator promises, on the default mix: ids are chained
    # prefix hashes (an id always follows the same parent) and a prompt
    # is ceil(len/512) blocks; a system prompt's blocks are shared.
    parents, firsts = {}, {}
    for line in data[0].decode().splitlines():
        r = json.loads(line)
        ids = r["hash_ids"]
        check(len(ids) == -(-r["input_length"] // 512), "blocks")
        prev = None
        for i in ids:
            check(parents.setdefault(i, prev) == prev, "id %d has two "
                  "parents" % i)
            prev = i
        firsts[ids[0]] = firsts.get(ids[0], 0) + 1
    check(max(firsts.values()) > 30, "no shared first block")

    # One conversation at a time, never closed: each request is the
    # previous prompt, its answer and a new message, so it starts with
    # the previous request's full blocks and is longer.
    conv = [json.loads(l) for l in open(gen(
        "conv.jsonl", "--requests", "40", "--mix", "1,0,0", "--open", "1",
        "--turns", "1000", "--seed", "2"))]
    for a_, b_ in zip(conv, conv[1:]):
        full = a_["input_length"] // 512
        check(b_["hash_ids"][:full] == a_["hash_ids"][:full] and
              b_["input_length"] > a_["input_length"] + 5,
              "a turn does not extend the previous one")
    # Documents only, one document: [system][document][question] share
    # every block before the one where the question starts.
    docs = [json.loads(l) for l in open(gen(
        "docs.jsonl", "--requests", "20", "--mix", "0,0,1", "--documents",
        "1", "--seed", "2"))]
    shared = (1200 + min(len(d["hash_ids"]) for d in docs)) // 512
    for d in docs:
        check(d["hash_ids"][:shared - 3] == docs[0]["hash_ids"][:shared - 3],
              "documents do not share their prefix")
    # Zipf over documents: the most popular is asked more than the least.
    many = [json.loads(l) for l in open(gen(
        "zipf.jsonl", "--requests", "400", "--mix", "0,0,1", "--documents",
        "20", "--seed", "2"))]
    second = {}
    for d in many:
        second[d["hash_ids"][3]] = second.get(d["hash_ids"][3], 0) + 1
    counts_ = sorted(second.values())
    check(counts_[-1] > 4 * counts_[0], "document popularity %r" % counts_)

    r1 = replay(a, *MODEL4, "--dram-capacity", "8M", "--nvme-capacity",
                "16M")
    r2 = replay(a, *MODEL4, "--dram-capacity", "8M", "--nvme-capacity",
                "16M")
    for r in (r1, r2):
        for k in ("wall_seconds", "requests_per_second", "span_id_seconds",
                  "direct_io"):
            r.pop(k)
    check(r1 == r2, "two replays differ")


def group_malformed():
    good = json.dumps({"timestamp": 1, "input_length": 1024,
                       "output_length": 5, "hash_ids": [1, 2]})
    bad_lines = [
        ("{not json", "not JSON"),
        ('{"input_length": 10}', "hash_ids: missing"),
        ('{"input_length": 10, "hash_ids": [1, -2]}', "hash_ids[1]"),
        ('{"input_length": "10", "hash_ids": [1]}', "input_length"),
        ('[1, 2]', "not a JSON object"),
    ]
    for i, (bad, cause) in enumerate(bad_lines):
        path = os.path.join(TMP, "bad%d.jsonl" % i)
        with open(path, "w") as f:
            f.write("\n".join([good, good, bad, good, ""]))
        p = run("bench", "trace", path, "--dir", SCRATCH, *SMALL,
                "--json", expect=1)
        lines = p.stderr.strip().splitlines()
        check(len(lines) == 1, "one error line: %r" % p.stderr)
        check(lines[0].startswith("kvstash bench trace: %s:3: " % path),
              "line number: %r" % lines[0])
        check(cause in lines[0], "cause %r in %r" % (cause, lines[0]))
        check(p.stdout == "", "output after a fatal line")
        r = json.loads(run("bench", "trace", path, "--dir", SCRATCH,
                           *SMALL, "--json", "--on-error", "skip",
                           "--progress", "0").stdout)
        check(r["requests"] == 3 and r["skipped_lines"] == 1,
              "skip: %r" % r["requests"])
        check(r["hit_blocks"] == 4, "skip: hits %r" % r["hit_blocks"])

    # CSV: a missing header is fatal even with skip; a bad row is
    # reported with its line number.
    path = os.path.join(TMP, "noheader.csv")
    with open(path, "w") as f:
        f.write("0,1024,5,1 2\n")
    p = run("bench", "trace", path, "--dir", SCRATCH, *SMALL,
            "--on-error", "skip", expect=1)
    check(":1: expected the header" in p.stderr, p.stderr)
    path = os.path.join(TMP, "badrow.csv")
    with open(path, "w") as f:
        f.write("timestamp,input_length,output_length,hash_ids\n"
                "0,1024,5,1 2\n0,x,5,1 2\n")
    p = run("bench", "trace", path, "--dir", SCRATCH, *SMALL, expect=1)
    check("badrow.csv:3: input_length" in p.stderr, p.stderr)
    empty = os.path.join(TMP, "empty.jsonl")
    open(empty, "w").close()
    p = run("bench", "trace", empty, "--dir", SCRATCH, expect=1)
    check("no requests" in p.stderr, p.stderr)
    p = run("bench", "trace", os.path.join(TMP, "absent.jsonl"), expect=1)
    check(len(p.stderr.strip().splitlines()) == 1, p.stderr)


def group_csv():
    # The CSV form of the same trace replays to the same counts; ids may
    # be written with spaces, ';' or in a quoted JSON-like list.
    j = gen("c.jsonl", "--requests", "200", "--seed", "3")
    c = gen("c.csv", "--requests", "200", "--seed", "3", "--format", "csv")
    rj = replay(j, *MODEL4, "--dram-capacity", "8M", "--nvme-capacity", "0")
    rc = replay(c, *MODEL4, "--dram-capacity", "8M", "--nvme-capacity", "0")
    check(counts(rj) == counts(rc), "CSV and JSON lines differ")
    path = os.path.join(TMP, "forms.csv")
    with open(path, "w") as f:
        f.write(" timestamp , input_length,output_length,hash_ids\r\n"
                "0,1024,5,1 2\r\n1.5,1024,5,\"[1, 2]\"\r\n2,1024,5,1;2\r\n")
    r = replay(path, *SMALL, "--format", "csv")
    expect_counts(r, requests=3, hit_blocks=4)


def group_sweep():
    t = gen("sw.jsonl", "--requests", "300", "--seed", "11",
            "--documents", "80")
    png = os.path.join(TMP, "sweep.png")
    p = run("bench", "trace", t, "--dir", SCRATCH, *MODEL4, "--progress",
            "0", "--nvme-capacity", "0", "--sweep", "4M,8M,16M,64M",
            "--json", "--plot", png)
    s = json.loads(p.stdout)
    check(len(s["points"]) == 4, "points")
    prev = None
    for pt in s["points"]:
        q, h = pt["quant"], pt["fp16"]
        check(q["format"] == "2-bit" and h["format"] == "fp16", "formats")
        check(h["objects"]["object_bytes"] > 5 * q["objects"]["object_bytes"],
              "fp16 objects are the fp16 size")
        # LRU is a stack policy and every block is touched whatever the
        # hits: a larger capacity never hits less, and fp16 (5.3x the
        # bytes a block) never hits more than 2-bit at one capacity.
        check(h["lru"]["hit_blocks"] <= q["lru"]["hit_blocks"], "LRU fp16")
        if prev:
            check(q["lru"]["hit_blocks"] >= prev["lru"]["hit_blocks"],
                  "LRU monotone")
        prev = q
        check(q["requests_per_second"] > 0, "rate")
    last = s["points"][-1]
    check(last["quant"]["hit_blocks"] > last["fp16"]["hit_blocks"],
          "2-bit hits more than fp16 at 64M")
    try:
        import matplotlib  # noqa: F401
        have_mpl = True
    except ImportError:
        have_mpl = False
    if have_mpl:
        with open(png, "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n", "PNG written")
    else:
        check(not os.path.exists(png), "PNG without matplotlib")

    # Without matplotlib the sweep still succeeds, without a PNG.
    fake = os.path.join(TMP, "nompl")
    os.makedirs(os.path.join(fake, "matplotlib"), exist_ok=True)
    with open(os.path.join(fake, "matplotlib", "__init__.py"), "w") as f:
        f.write("raise ImportError('hidden for the test')\n")
    env = dict(os.environ, PYTHONPATH=fake)
    png2 = os.path.join(TMP, "none.png")
    p = run("bench", "trace", t, "--dir", SCRATCH, *MODEL4, "--progress",
            "0", "--nvme-capacity", "0", "--sweep", "4M,8M", "--plot", png2,
            env=env)
    check(not os.path.exists(png2), "a PNG without matplotlib")
    check("matplotlib is not installed" in p.stderr, p.stderr)
    check("2-bit" in p.stdout and "fp16" in p.stdout, "sweep table")

    # Progress lines go to stderr, the result to stdout.
    p = run("bench", "trace", t, "--dir", SCRATCH, *MODEL4, "--progress",
            "100", "--json")
    check(p.stderr.count("requests/s") == 3, "progress: %r" % p.stderr)
    json.loads(p.stdout)


def group_args():
    t = write_trace("args.jsonl", [(512, [1])])
    usage = [
        ["--scale", "3"],  # 3 divides neither 32 layers, 4 spans nor 8 heads
        ["--model", "gpt-5"],
        ["--layers", "2"],
        ["--model", "llama-3-8b", "--layers", "2", "--kv-heads", "1",
         "--head-dim", "128"],
        ["--fp16", "--sweep", "1G"],
        ["--plot", "x.png"],
        ["--block-tokens", "500"],
        ["--sweep-tier", "disk", "--sweep", "1G"],
        ["--on-error", "ignore"],
        ["--bits", "3"],
        ["--format", "xml"],
        ["--sweep", "1G,lots"],
        ["--segment-size", "4K"],
        ["--no-such-option"],
    ]
    for extra in usage:
        p = run("bench", "trace", t, "--dir", SCRATCH, *extra, expect=2)
        lines = p.stderr.strip().splitlines()
        check(len(lines) == 2 and lines[0].startswith("kvstash bench trace: ")
              and lines[1] == "try 'kvstash bench trace --help'",
              "%r: %r" % (extra, p.stderr))
    # With --server the store is the daemon's: what configures a store
    # here, and a sweep, are refused, not ignored; the client's options
    # need --server.  (A build without the network service refuses
    # --server itself.)
    srv = ["--server", "127.0.0.1:1", "--auth-key-file", "keys"]
    server_usage = [
        (srv + ["--sweep", "1G"], "one capacity"),
        (srv + ["--sweep-tier", "nvme"], "one capacity"),
        (srv + ["--plot", "x.png"], "one capacity"),
        (srv + ["--dram-capacity", "1G"], "--dram-capacity with --server"),
        (srv + ["--nvme-capacity", "1G"], "--nvme-capacity with --server"),
        (srv + ["--segment-size", "1M"], "--segment-size with --server"),
        (srv + ["--dir", SCRATCH], "--dir with --server"),
        (srv + ["--fp16"], "kvstashd stores sealed blocks only"),
        (srv[:2], "needs --auth-key-file"),
        (["--auth-key-file", "keys"], "--auth-key-file goes with --server"),
        (["--timeout-ms", "5"], "--timeout-ms goes with --server"),
        (["--shared-memory"], "--shared-memory goes with --server"),
    ]
    for extra, cause in server_usage:
        p = run("bench", "trace", t, *extra, expect=2)
        lines = p.stderr.strip().splitlines()
        check(len(lines) == 2 and lines[1] ==
              "try 'kvstash bench trace --help'" and
              (cause in lines[0] or ("--server" in extra and
                                      "without the network service" in
                                      lines[0])),
              "%r: %r" % (extra, p.stderr))
    p = run("bench", "trace", "--help")
    check(p.stdout.startswith("usage: kvstash bench trace"), "help")
    check("--server HOST:PORT" in p.stdout, "help: --server")
    run("bench", "trace", expect=2)
    # A failed write of the result is an error.
    with open("/dev/full", "w") as full:
        p = subprocess.run([KVSTASH, "bench", "trace", t, "--dir", SCRATCH]
                           + SMALL, stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    check(p.returncode == 1 and "standard output" in p.stderr and
          len(p.stderr.strip().splitlines()) == 1, "write error: %r" %
          p.stderr)
    # A --dir that does not exist is created (one level, as kvstashd's
    # --dir); one that cannot be is refused in one line naming it.
    fresh = os.path.join(TMP, "fresh-dir")
    p = run("bench", "trace", t, "--dir", fresh, "--progress", "0",
            "--json", *SMALL)
    r = json.loads(p.stdout)
    check(os.path.isdir(fresh) and os.listdir(fresh) == [] and
          r["requests"] == 1, "--dir created: %r" % (os.listdir(TMP),))
    deep = os.path.join(TMP, "no-such", "dir")
    p = run("bench", "trace", t, "--dir", deep, *SMALL, expect=1)
    lines = p.stderr.strip().splitlines()
    check(len(lines) == 1 and deep in lines[0] and
          "No such file or directory" in lines[0] and
          "kvstash-replay" not in lines[0], "--dir missing parent: %r" %
          p.stderr)
    afile = os.path.join(TMP, "a-file")
    open(afile, "w").close()
    p = run("bench", "trace", t, "--dir", afile, *SMALL, expect=1)
    lines = p.stderr.strip().splitlines()
    check(len(lines) == 1 and afile in lines[0] and
          "Not a directory" in lines[0], "--dir a file: %r" % p.stderr)
    # --model presets and fp16 replay.
    r = replay(t, "--model", "qwen2.5-7b", "--fp16", "--scale", "28",
               "--dram-capacity", "4G", "--nvme-capacity", "0")
    check(r["model"]["layers"] == 28 and r["model"]["kv_heads"] == 4,
          "preset")
    check(r["format"] == "fp16" and r["objects"]["object_bytes"] ==
          512 + 2 * 4 * 128 * 128 * 2, "fp16 object %r" % r["objects"])


# ---- through a kvstashd ---------------------------------------------------

def start_daemon(name, *args):
    """A kvstashd of this build on 127.0.0.1 (a port it picks) with a new
    store; the replay's --server arguments for it."""
    kvstashd = os.environ.get("KVSTASHD", "")
    if not os.access(kvstashd, os.X_OK):
        raise Skip("no kvstashd in this build ($KVSTASHD unset): the "
                   "network service is not built")
    d = os.path.join(TMP, name)
    os.makedirs(d)
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write(KEY)
    ready = os.path.join(d, "ready")
    log = os.path.join(d, "kvstashd.log")
    with open(log, "w") as out:
        p = subprocess.Popen([kvstashd, "--listen", "127.0.0.1:0", "--dir",
                              os.path.join(d, "store"), "--auth-key-file",
                              keys, "--ready-file", ready] +
                             [str(a) for a in args], stdout=out, stderr=out)
    DAEMONS.append(p)
    deadline = time.time() + 15
    while not os.path.exists(ready):
        if p.poll() is not None:
            with open(log) as f:
                raise Failure("kvstashd exited at start: %s" % f.read())
        check(time.time() < deadline, "kvstashd not ready in 15 s")
        time.sleep(0.02)
    with open(ready) as f:
        port = int(f.read().split()[0])
    return ["--server", "127.0.0.1:%d" % port, "--auth-key-file", keys]


def stop_daemons():
    for p in DAEMONS:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    del DAEMONS[:]


def daemon_stat(server):
    """The daemon's STAT (its counters since it started)."""
    return json.loads(run(*server, "stat", "--json").stdout)


# What a replay through a daemon must count as the same replay in-process
# does, whatever the daemon's policy did with the tiers.
SAME = ("requests", "lookup_blocks", "hit_blocks", "miss_blocks",
        "prompt_tokens", "hit_tokens", "prefill_tokens_saved",
        "objects_put", "objects_read", "bytes_written", "bytes_read",
        "put_refused", "read_misses")


def same_counts(r, local, what):
    for k in SAME:
        check(r[k] == local[k], "%s: %s %r through the daemon, %r "
              "in-process" % (what, k, r[k], local[k]))


def group_server():
    # Why the comparison is of hit counts and not of tiers: the daemon
    # receives a put's objects straight into DRAM slots it reserves for
    # them (kvs_store_reserve, then kvs_store_commit_batch), so all of a
    # batch's evictions happen before any of its objects enters the
    # S3-FIFO queues, where an in-process kvs_store_put_batch evicts for
    # each object with the batch's earlier objects already queued.  Which
    # objects stay in DRAM (evictions, promotions, hits by tier) may then
    # differ.  Whether an object is held at all does not, as long as the
    # NVMe tier never drops one: the tiers below hold every object put.
    #
    # Daemon A: DRAM for 2 blocks of the one-head model (8 slots of
    # 16 KiB) in front of 2 MiB of NVMe in 256 KiB segments (15 records
    # each, 120 in all; the replays below spill at most 48 objects).
    tiers = ["--dram-capacity", "128K", "--nvme-capacity", "2M",
             "--segment-size", "256K"]
    srv = start_daemon("a", *tiers)
    # One block a request but r7, r8: 1 2 3 miss; 1 hits (from NVMe:
    # DRAM holds 2 and 3), 2 hits, 4 misses; [1 5] hits 1, [1 5 6] hits
    # 1 5; 3 and 2 hit.  7 hit blocks (28 objects read), 6 blocks put
    # (24 objects), 13 looked up.
    reqs = [[1], [2], [3], [1], [2], [4], [1, 5], [1, 5, 6], [3], [2]]
    t = write_trace("srv.jsonl", [(512 * len(ids), ids) for ids in reqs])
    want = dict(requests=10, lookup_blocks=13, hit_blocks=7,
                miss_blocks=6, hit_tokens=7 * 512, prompt_tokens=13 * 512,
                objects_put=24, objects_read=28, bytes_written=24 * OBJ,
                bytes_read=28 * OBJ, read_misses=0, put_refused=0)
    local = replay(t, *SMALL, *tiers)
    expect_counts(local, **want)
    check(local["nvme_hit_objects"] > 0, "in-process: no NVMe hit")
    r, err = replay_server(t, srv, *SMALL)
    expect_counts(r, **want)
    same_counts(r, local, "daemon A")
    check(r["target"] == "kvstashd" and r["server"] == srv[1], "target")
    check(err == "", "a note for an empty daemon: %r" % err)
    check(r["objects_before"] == 0, "objects before %r" % r["objects_before"])
    # The capacities are the daemon's (at scale 1 the same bytes), and
    # the LRU beside it replays them: the same LRU as in-process.
    check(r["store_dram_capacity"] == 128 << 10 and
          r["store_nvme_capacity"] == 2 << 20 and
          r["dram_capacity"] == 128 << 10, "capacities %r" % r)
    check(r["lru"] == local["lru"], "LRU beside the daemon differs")
    # Counters are the daemon's, over the replay: 28 objects read are 28
    # hits of its store; 24 objects in 8 slots are at least 16 spills.
    check(r["hit_objects"] == 28, "daemon hits %r" % r["hit_objects"])
    check(r["evictions"] >= 16 and r["spills"] >= 16, "evictions %r, "
          "spills %r" % (r["evictions"], r["spills"]))
    check(r["nvme_bytes_written"] == r["spills"] * OBJ, "NVMe bytes")
    # The daemon counts its hits by tier (objects, not blocks: a block's
    # objects may sit in both tiers) and its promotions.
    check("dram_hit_blocks" not in r, "tiers of blocks reported")
    check(r["dram_hit_objects"] + r["nvme_hit_objects"] == 28 and
          r["nvme_hit_objects"] > 0 and
          r["promotions"] >= r["nvme_hit_objects"], "tiers %r" % r)
    st1 = daemon_stat(srv)
    check(st1["hits"] == r["hit_objects"] and
          st1["evictions"] == r["evictions"] and
          st1["spills"] == r["spills"], "daemon stat %r" % st1)

    # Again, on the daemon as the first replay left it: every block is
    # there (a note says the daemon was not empty), nothing is put, and
    # the counters are this replay's differences, not the daemon's
    # lifetime counters.
    r2, err = replay_server(t, srv, *SMALL)
    expect_counts(r2, lookup_blocks=13, hit_blocks=13, objects_put=0,
                  objects_read=52)
    check("note:" in err and "holds objects already" in err and
          len(err.strip().splitlines()) == 1, "note: %r" % err)
    check(r2["objects_before"] > 0, "objects before")
    st2 = daemon_stat(srv)
    check(r2["hit_objects"] == st2["hits"] - st1["hits"] == 52 and
          r2["evictions"] == st2["evictions"] - st1["evictions"],
          "differences: hits %d, evictions %d; daemon %d -> %d hits, "
          "%d -> %d evictions" % (r2["hit_objects"], r2["evictions"],
                                  st1["hits"], st2["hits"],
                                  st1["evictions"], st2["evictions"]))
    # Under another namespace the first replay's blocks are other ids:
    # the same hits as in-process (the NVMe tier still holds everything).
    r3, _ = replay_server(t, srv, *SMALL, "--namespace", "other")
    same_counts(r3, local, "another namespace")

    # Daemon B, with a 4 KiB payload limit: objects of 3584 bytes (one
    # head of D=32) go one a request, and a chain of 70 blocks (280
    # spans) is looked up in pieces of 127 spans.  [1..70] misses, again
    # hits 70, [1..60 71 72] hits 60, [1..20 73] hits 20: 150 hit blocks
    # of 223, 73 blocks put.
    tiny = ["--layers", "1", "--kv-heads", "1", "--head-dim", "32"]
    tiers = ["--dram-capacity", "256K", "--nvme-capacity", "4M",
             "--segment-size", "256K"]
    srv_b = start_daemon("b", "--max-payload", "4096", *tiers)
    chain = list(range(1, 71))
    reqs = [chain, chain, chain[:60] + [71, 72], chain[:20] + [73]]
    t = write_trace("long.jsonl", [(512 * len(ids), ids) for ids in reqs])
    want = dict(lookup_blocks=223, hit_blocks=150, objects_put=292,
                objects_read=600, read_misses=0)
    local = replay(t, *tiny, *tiers)
    expect_counts(local, **want)
    r, _ = replay_server(t, srv_b, *tiny)
    expect_counts(r, **want)
    same_counts(r, local, "daemon B")
    check(daemon_stat(srv_b)["hits"] == 600, "daemon B hits")
    # Objects over the daemon's limits: refused before anything is sent.
    p = run("bench", "trace", t, *srv_b, *SMALL, expect=1)
    lines = p.stderr.strip().splitlines()
    check(len(lines) == 1 and "12800 bytes, over the daemon's" in lines[0]
          and p.stdout == "", "objects over the limit: %r" % p.stderr)

    # A wrong key, a daemon that is not there: one line, exit 1.
    wrong = os.path.join(TMP, "wrong-key")
    with open(wrong, "w") as f:
        f.write("replay 0f0e0d0c0b0a09080706050403020100\n")
    p = run("bench", "trace", t, srv[0], srv[1], "--auth-key-file", wrong,
            *SMALL, expect=1)
    check(p.stderr.strip() == "kvstash bench trace: %s: authentication "
          "refused" % srv[1], "wrong key: %r" % p.stderr)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        gone = "127.0.0.1:%d" % s.getsockname()[1]
    p = run("bench", "trace", t, "--server", gone, "--auth-key-file", wrong,
            "--timeout-ms", "3000", *SMALL, expect=1)
    check(len(p.stderr.strip().splitlines()) == 1 and gone in p.stderr,
          "no daemon: %r" % p.stderr)


def main():
    global KVSTASH, BENCH, SCRATCH, TMP
    if len(sys.argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    KVSTASH, BENCH, SCRATCH, group = sys.argv[1:]
    os.makedirs(SCRATCH, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        TMP = tmp
        try:
            globals()["group_" + group]()
        except Failure as e:
            print("FAIL %s: %s" % (group, e))
            return 1
        except Skip as e:
            print("SKIP %s: %s" % (group, e))
            return 77
        finally:
            stop_daemons()
    print("ok %s" % group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
