#!/usr/bin/env python3
"""Integration tests of the `kvstash` command line.

Drives the real binary: cli_test.py KVSTASH GROUP, where GROUP is one of
block, errors, trace, memory, args, demo, demo_cuda (suite gpu), bench,
conventions.  Every check asserts a
result (exit status, bytes, numbers); the first failure stops the group
with a message and exit status 1.
"""
import json
import math
import os
import random
import re
import signal
import struct
import subprocess
import sys
import tempfile

KVSTASH = None
TMP = None


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def run(*args, expect=None):
    """Runs kvstash with @args; returns (rc, stdout, stderr)."""
    p = subprocess.run([KVSTASH] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=120)
    if expect is not None and p.returncode != expect:
        raise Failure("kvstash %s: exit %d, expected %d\nstdout:\n%s\n"
                      "stderr:\n%s" % (" ".join(map(str, args)),
                                       p.returncode, expect, p.stdout,
                                       p.stderr))
    return p.returncode, p.stdout, p.stderr


def path(name):
    return os.path.join(TMP, name)


def write(name, data):
    with open(path(name), "wb") as f:
        f.write(data)
    return path(name)


def read(name):
    with open(path(name), "rb") as f:
        return f.read()


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def bf16_bits(x):
    """float -> bfloat16 bits, round to nearest even (inputs finite)."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def encode(values, dtype):
    if dtype == "f32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "f16":
        return struct.pack("<%de" % len(values), *values)
    return struct.pack("<%dH" % len(values),
                       *[bf16_bits(v) for v in values])


def representable(values, dtype):
    """The values as the file holds them (what the quantizer sees)."""
    if dtype == "f32":
        return list(struct.unpack("<%df" % len(values),
                                  encode(values, dtype)))
    if dtype == "f16":
        return list(struct.unpack("<%de" % len(values),
                                  encode(values, dtype)))
    return [struct.unpack("<f", struct.pack("<I", b << 16))[0]
            for b in struct.unpack("<%dH" % len(values),
                                   encode(values, dtype))]


class Case:
    """One set of generated K/V files and the pack arguments for them."""

    def __init__(self, name, heads=2, dim=64, tokens=64, bits=2, group=32,
                 meta="fp16", dtype="f32", seed=1, lz4=False):
        rng = random.Random(seed)
        n = heads * tokens * dim
        keys = []
        for i in range(n):
            d = i % dim
            bias = 12.0 if d == 3 else (-9.0 if d == 40 % dim else 0.0)
            keys.append(bias + rng.gauss(0.0, 1.0))
        values = [rng.gauss(0.0, 1.0) for _ in range(n)]
        self.name = name
        self.heads, self.dim, self.tokens = heads, dim, tokens
        self.bits, self.group, self.meta, self.dtype = bits, group, meta, \
            dtype
        self.keys = representable(keys, dtype)
        self.values = representable(values, dtype)
        self.ids = [rng.randrange(0, 1 << 32) for _ in range(tokens)]
        self.k_file = write(name + ".k", encode(keys, dtype))
        self.v_file = write(name + ".v", encode(values, dtype))
        self.id_file = write(name + ".ids",
                             struct.pack("<%dI" % tokens, *self.ids))
        self.block = path(name + ".blk")
        self.lz4 = lz4

    def pack_args(self, **over):
        args = {
            "kv-heads": self.heads, "head-dim": self.dim,
            "tokens": self.tokens, "bits": self.bits, "group": self.group,
            "meta": self.meta, "dtype": self.dtype, "keys": self.k_file,
            "values": self.v_file, "token-ids": self.id_file,
            "out": self.block,
        }
        args.update(over)
        out = ["block", "pack"]
        for k, v in args.items():
            if v is not None:
                out += ["--" + k, v]
        if self.lz4:
            out.append("--lz4")
        return out

    def index(self, h, t, d):
        return (h * self.tokens + t) * self.dim + d


def group_bound(xs, bits):
    """Largest reconstruction error the contract allows for one group:
    half a step, plus the rounding of origin and step into the metadata
    type (fp16/bf16: relative 2^-8 is generous for both)."""
    lo, hi = min(xs), max(xs)
    step = (hi - lo) / ((1 << bits) - 1)
    return 0.5 * step + 2.0 ** -7 * (abs(lo) + abs(hi) + step) + 1e-6


def check_round_trip(c):
    run(*c.pack_args(), expect=0)
    run("block", "verify", c.block, expect=0)
    run("block", "unpack", c.block, "--keys", path(c.name + ".k32"),
        "--values", path(c.name + ".v32"), expect=0)
    n = c.heads * c.tokens * c.dim
    k_out = struct.unpack("<%df" % n, read(c.name + ".k32"))
    v_out = struct.unpack("<%df" % n, read(c.name + ".v32"))
    worst = 0.0
    # Keys: one group per channel over G consecutive tokens.
    for h in range(c.heads):
        for t0 in range(0, c.tokens, c.group):
            for d in range(c.dim):
                idx = [c.index(h, t, d) for t in range(t0, t0 + c.group)]
                bound = group_bound([c.keys[i] for i in idx], c.bits)
                for i in idx:
                    err = abs(k_out[i] - c.keys[i])
                    check(err <= bound, "%s: key h%d t%d d%d error %g > "
                          "bound %g" % (c.name, h, i // c.dim % c.tokens,
                                        d, err, bound))
                    worst = max(worst, err / max(bound, 1e-9))
    # Values: one group per token over G consecutive channels.
    for g0 in range(0, n, c.group):
        idx = range(g0, g0 + c.group)
        bound = group_bound([c.values[i] for i in idx], c.bits)
        for i in idx:
            err = abs(v_out[i] - c.values[i])
            check(err <= bound, "%s: value %d error %g > bound %g" %
                  (c.name, i, err, bound))
    # A 2-bit block that reconstructs nothing would pass no bound; make
    # sure the error is also not trivially zero everywhere.
    check(any(k_out[i] != c.keys[i] for i in range(n)),
          "%s: reconstruction is exact, quantization did not run" % c.name)


def inspect_json(block):
    rc, out, err = run("block", "inspect", block, "--json")
    try:
        doc = json.loads(out)
    except ValueError as e:
        raise Failure("inspect --json is not JSON (%s):\n%s" % (e, out))
    return rc, doc


def test_block():
    c = Case("base")
    rc, out, _ = run(*c.pack_args(), expect=0)
    check_round_trip(c)
    rc, doc = inspect_json(c.block)
    check(rc == 0 and doc["valid"] is True, "inspect: block not valid")
    ids = [w for w in out.split() if len(w) == 64]
    check(ids and doc["block_id"] == ids[0],
          "inspect block_id %s differs from pack's %s" %
          (doc.get("block_id"), ids))
    for key in ("block_id", "parent_id", "model_fp"):
        check(len(doc[key]) == 64 and int(doc[key], 16) >= 0,
              "inspect: %s is not 64 hex digits" % key)
    check(doc["parent_id"] == "0" * 64, "no --parent: parent id not zero")
    check(doc["kind"] == "block" and doc["kv_heads"] == 2 and
          doc["head_dim"] == 64 and doc["tokens"] == 64 and
          doc["bits"] == 2 and doc["group"] == 32 and doc["meta"] == "f16",
          "inspect: header fields wrong: %s" % doc)
    check(len(doc["sections"]) == 6, "inspect: %d sections" %
          len(doc["sections"]))
    check(doc["total_size"] == os.path.getsize(c.block),
          "inspect: total_size differs from the file size")
    check(doc["fp16_bytes"] == 2 * 2 * 64 * 64 * 2 and
          doc["ratio_vs_fp16"] > 3.0, "inspect: ratio %s" %
          doc["ratio_vs_fp16"])
    rc, text, _ = run("block", "inspect", c.block, expect=0)
    check(doc["block_id"] in text and "key_codes" in text,
          "inspect text lacks the id or the section table")

    # Same inputs, same bytes; another namespace, another id; a parent
    # and a layer end up in the header.
    first = read("base.blk")
    run(*c.pack_args(), expect=0)
    check(read("base.blk") == first, "pack is not deterministic")
    parent = doc["block_id"]
    run(*c.pack_args(namespace="tenant-b", parent=parent, layers=32,
                     layer=7, out=path("child.blk")), expect=0)
    _, child = inspect_json(path("child.blk"))
    check(child["block_id"] != parent, "namespace did not change the id")
    check(child["parent_id"] == parent and child["layer"] == 7,
          "parent or layer not recorded: %s" % child)

    # Other parameter combinations, LZ4 included.
    check_round_trip(Case("f16b4", bits=4, meta="bf16", dtype="f16",
                          seed=2, lz4=True))
    check_round_trip(Case("bf16", dtype="bf16", meta="fp32", heads=1,
                          dim=32, tokens=128, seed=3))
    c = Case("r", tokens=128, seed=4)
    run(*c.pack_args(residual=64), expect=0)
    _, doc = inspect_json(c.block)
    check(doc["span"] == 128 and doc["residual"] == 64,
          "--residual not recorded: %s" % doc)


def one_line(err, what):
    lines = [l for l in err.splitlines() if l.strip()]
    check(len(lines) == 1, "%s: expected one line, got %r" % (what, err))
    return lines[0]


def test_errors():
    c = Case("err")
    run(*c.pack_args(), expect=0)
    _, doc = inspect_json(c.block)
    good = read("err.blk")
    sec = {s["name"]: s for s in doc["sections"]}

    def corrupt(name, offset, mask=0x01):
        data = bytearray(good)
        data[offset] ^= mask
        return write(name, bytes(data))

    for name, offset, word in (
            ("val_codes", sec["val_codes"]["offset"] + 5, "checksum"),
            ("key_step", sec["key_step"]["offset"] + 1, "checksum"),
            ("magic", 0, "magic"),
            ("header", 100, "")):
        bad = corrupt("bad_%s.blk" % name, offset)
        rc, out, err = run("block", "verify", bad)
        check(rc != 0, "verify accepted a block with %s corrupted" % name)
        line = one_line(err, "verify of corrupted %s" % name)
        check(word in line.lower(), "verify line for %s does not name the "
              "check (%s): %s" % (name, word, line))
        rc, _, _ = run("block", "unpack", bad, "--keys", path("x"),
                       "--values", path("y"))
        check(rc != 0, "unpack accepted a block with %s corrupted" % name)
        check(not os.path.exists(path("x")), "unpack wrote output for a "
              "corrupted block")

    for cut in (0, 16, 511, 600, len(good) - 1):
        bad = write("trunc.blk", good[:cut])
        rc, _, err = run("block", "verify", bad)
        check(rc != 0, "verify accepted a block truncated to %d" % cut)
        one_line(err, "verify of a block truncated to %d" % cut)
    rc, _, err = run("block", "verify", path("missing.blk"))
    check(rc != 0, "verify of a missing file succeeded")
    one_line(err, "verify of a missing file")

    # Wrong sizes and non-finite input are refused with a clear message.
    short = write("short.k", read("err.k")[:-4])
    rc, _, err = run(*c.pack_args(keys=short, out=path("no.blk")))
    check(rc != 0 and "expected" in err and "short.k" in err,
          "wrong-size K.bin not refused clearly: %s" % err)
    check(not os.path.exists(path("no.blk")), "refused pack left output")
    short = write("short.ids", read("err.ids")[:-1])
    rc, _, err = run(*c.pack_args(**{"token-ids": short,
                                     "out": path("no.blk")}))
    check(rc != 0 and "expected" in err, "wrong-size ids not refused")
    for bad_value in (float("nan"), float("inf")):
        k = bytearray(read("err.k"))
        k[4 * 77:4 * 78] = struct.pack("<f", bad_value)
        nan_file = write("nan.k", bytes(k))
        rc, _, err = run(*c.pack_args(keys=nan_file, out=path("no.blk")))
        check(rc != 0 and "non-finite" in err and "nan.k" in err and
              "token 1 channel 13" in err,
              "%r in K.bin not refused clearly: %s" % (bad_value, err))
    check(not os.path.exists(path("no.blk")), "refused pack left output")
    k = bytearray(read("err.k"))
    k[0:4] = struct.pack("<f", 1.0e6)  # beyond fp16's 65504
    big = write("big.k", bytes(k))
    rc, _, err = run(*c.pack_args(keys=big, out=path("no.blk")))
    check(rc != 0 and "fp32" in err, "fp16 metadata overflow not refused "
          "clearly: %s" % err)
    run(*c.pack_args(keys=big, meta="fp32", out=path("big.blk")), expect=0)
    rc, _, err = run(*c.pack_args(tokens=48, out=path("no.blk")))
    check(rc == 2 and "multiple" in err, "tokens not a multiple of G: %s"
          % err)
    rc, _, err = run(*c.pack_args(parent="xyz", out=path("no.blk")))
    check(rc == 2 and "parent" in err, "bad --parent accepted: %s" % err)
    rc, _, err = run(*c.pack_args(meta="fp8", out=path("no.blk")))
    check(rc == 2 and "meta" in err, "bad --meta accepted: %s" % err)
    rc, _, err = run(*c.pack_args(bits=3, out=path("no.blk")))
    check(rc == 2, "3-bit accepted: %s" % err)


SEED_TABLE = {  # tokens: k_compute_full, k_persist_full, v_compute_full,
    3: (3, 3, 3, 3),  # v_persist_full (the seed's R=4, G=2 table)
    4: (4, 0, 4, 4),
    5: (1, 1, 5, 4),
    8: (4, 0, 5, 4),
    9: (1, 1, 5, 4),
}


def test_trace():
    _, out, _ = run("trace", "--residual", 4, "--group", 2, "--steps", 9,
                    "--json", expect=0)
    rows = json.loads(out)
    check(len(rows) == 9, "trace: %d rows" % len(rows))
    keys = ("tokens", "k_compute_quant", "k_compute_full",
            "k_persist_quant", "k_persist_full", "v_compute_quant",
            "v_compute_full", "v_persist_quant", "v_persist_full")
    for i, row in enumerate(rows):
        check(sorted(row) == sorted(keys), "trace row keys: %s" % row)
        check(row["tokens"] == i + 1, "trace row %d tokens" % i)
        t = row["tokens"]
        for part in ("k_compute", "k_persist", "v_compute", "v_persist"):
            check(row[part + "_quant"] + row[part + "_full"] == t,
                  "trace step %d: %s does not cover all tokens" % (t, part))
        if t in SEED_TABLE:
            got = (row["k_compute_full"], row["k_persist_full"],
                   row["v_compute_full"], row["v_persist_full"])
            check(got == SEED_TABLE[t], "trace step %d: %s, seed says %s" %
                  (t, got, SEED_TABLE[t]))
    _, text, _ = run("trace", "--residual", 4, "--group", 2, "--steps", 9,
                     expect=0)
    check("8+1" in text and "4+5" in text, "trace text lacks step 9:\n" +
          text)
    _, out, _ = run("trace", "--residual", 4, "--group", 2, "--steps", 9,
                    "--order", "paper", "--json", expect=0)
    check(len(json.loads(out)) == 9, "paper trace rows")
    _, out, _ = run("trace", "--residual", 128, "--group", 32, "--steps",
                    0, "--json", expect=0)
    check(json.loads(out) == [], "zero steps is an empty array")
    rc, _, err = run("trace", "--residual", 3, "--group", 2, "--steps", 4)
    check(rc == 2 and err, "R not a multiple of G accepted")
    rc, _, err = run("trace", "--residual", 4, "--group", 2, "--steps", 4,
                     "--order", "fifo")
    check(rc == 2 and "order" in err, "bad --order accepted")


def test_memory():
    _, out, _ = run("memory", "--tokens", 4096, "--head-dim", 128,
                    "--group", 32, "--residual", 128, "--bits", 2,
                    "--meta-bytes", 2, "--float-bytes", 2, "--json",
                    expect=0)
    m = json.loads(out)
    check(m["quantized_bytes"] == 387072 and m["residual_bytes"] == 32768
          and m["total_bytes"] == 419840,
          "memory: seed example gives %s" % m)
    check(m["format_bytes"] >= m["total_bytes"],
          "format bytes %s below the formula %s" % (m["format_bytes"],
                                                    m["total_bytes"]))
    _, out, _ = run("memory", "--tokens", 4096, "--head-dim", 128,
                    "--group", 32, "--residual", 128, "--bits", 2,
                    "--meta-bytes", 2, "--float-bytes", 2, "--layers", 2,
                    "--kv-heads", 4, "--batch", 3, "--json", expect=0)
    m2 = json.loads(out)
    check(m2["total_bytes"] == 24 * 419840, "memory x24: %s" % m2)
    _, text, _ = run("memory", "--tokens", 4096, "--head-dim", 128,
                     "--group", 32, "--residual", 128, "--bits", 2,
                     "--meta-bytes", 2, "--float-bytes", 2, expect=0)
    check("410.0 KiB" in text and "378.0 KiB" in text and
          "2.00 MiB" in text, "memory text:\n" + text)
    rc, _, err = run("memory", "--tokens", 4096, "--head-dim", 128,
                     "--group", 32, "--residual", 100, "--bits", 2,
                     "--meta-bytes", 2, "--float-bytes", 2)
    check(rc == 2 and err, "R not a multiple of G accepted by memory")


def usage_error(args, cmd):
    """kvstash @args must be a usage error of @cmd ("store get"; None for
    kvstash itself): exit 2, its one line and the one-line hint."""
    rc, out, err = run(*args)
    what = "kvstash " + " ".join(map(str, args))
    check(rc == 2, "%s: exit %d, expected 2" % (what, rc))
    lines = err.splitlines()
    name = "kvstash" + (" " + cmd if cmd else "")
    check(len(lines) == 2 and err.endswith("\n"),
          "%s: expected an error line and a hint, got %r" % (what, err))
    check(lines[0].startswith(name + ": ") and
          len(lines[0]) > len(name) + 2,
          "%s: error line does not name %r: %r" % (what, name, lines[0]))
    check(lines[1] == "try '%s --help'" % name,
          "%s: hint is %r" % (what, lines[1]))
    check(out == "", "%s: printed on stdout: %r" % (what, out))
    return lines[0]


def failure(args, cmd, expect=1):
    """kvstash @args must fail with exit @expect and one stderr line naming
    @cmd; returns that line."""
    rc, _, err = run(*args)
    what = "kvstash " + " ".join(map(str, args))
    check(rc == expect, "%s: exit %d, expected %d" % (what, rc, expect))
    line = one_line(err, what)
    check(line.startswith("kvstash %s: " % cmd),
          "%s: line does not name %r: %r" % (what, cmd, line))
    return line


def test_args():
    cases = [
        ([], None),
        (["frobnicate"], None),
        (["block"], "block"),
        (["block", "frob"], "block"),
        (["block", "pack"], "block pack"),
        (["block", "verify"], "block verify"),
        (["block", "verify", "a", "b"], "block verify"),
        (["block", "inspect", "--yaml", "x"], "block inspect"),
        (["block", "unpack", "x.blk", "--keys", "k"], "block unpack"),
        (["trace", "--residual", "4", "--group", "2"], "trace"),
        (["trace", "--residual", "four", "--group", "2", "--steps", "3"],
         "trace"),
        (["trace", "--residual", "-4", "--group", "2", "--steps", "3"],
         "trace"),
        (["trace", "--residual", "4", "--group", "2", "--steps"], "trace"),
        (["trace", "--residual", "4", "--residual", "4", "--group", "2",
          "--steps", "3"], "trace"),
        (["trace", "--residual", "99999999999", "--group", "2", "--steps",
          "3"], "trace"),
        (["trace", "--residual", "3", "--group", "2", "--steps", "3"],
         "trace"),
        (["memory", "--tokens", "10"], "memory"),
        (["demo", "extra"], "demo"),
        (["bench"], "bench"),
        (["bench", "nothing"], "bench"),
        (["bench", "format", "--seconds", "x"], "bench format"),
        (["bench", "format", "--seconds", "0"], "bench format"),
        # a shape the benchmark cannot run is a usage error, not a failure
        (["bench", "format", "--tokens", "100"], "bench format"),
        (["bench", "store"], "bench store"),
        (["store"], "store"),
        (["store", "frob"], "store"),
        (["store", "put", "--dir", TMP], "store put"),
        (["store", "get", "--dir", TMP, "x"], "store get"),
        (["store", "stat"], "store stat"),
    ]
    for args, cmd in cases:
        usage_error(args, cmd)
    for args in (["--help"], ["-h"], ["block", "--help"],
                 ["block", "pack", "-h"], ["block", "unpack", "--help"],
                 ["trace", "--help"], ["memory", "--help"],
                 ["demo", "--help"], ["bench", "--help"],
                 ["bench", "format", "--help"], ["bench", "store", "--help"],
                 ["store", "--help"], ["store", "get", "--help"]):
        rc, out, err = run(*args, expect=0)
        check(out.startswith("usage: "),
              "kvstash %s: no usage" % " ".join(args))
        check(err == "", "kvstash %s: stderr %r" % (" ".join(args), err))
    # Failures that are not usage errors: one line, no hint, exit 1.
    failure(["block", "verify", path("missing.blk")], "block verify")
    failure(["block", "inspect", path("missing.blk")], "block inspect")
    _, out, _ = run("trace", "--residual=4", "--group=2", "--steps=5",
                    "--json", expect=0)
    check(len(json.loads(out)) == 5, "--name=value form")


def project_version():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                        "..", "meson.build")
    with open(root) as f:
        m = re.search(r"project\([^)]*?version:\s*'([^']+)'", f.read(),
                      re.S)
    check(m is not None, "no version in meson.build")
    return m.group(1)


def run_to_full(*args):
    """Runs kvstash with stdout on /dev/full; returns (rc, stderr)."""
    with open("/dev/full", "w") as full:
        p = subprocess.run([KVSTASH] + [str(a) for a in args], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    return p.returncode, p.stderr


def check_full(args, cmd):
    """Output that cannot be written is a failure: exit 1, one line."""
    rc, err = run_to_full(*args)
    what = "kvstash %s > /dev/full" % " ".join(map(str, args))
    check(rc == 1, "%s: exit %d, expected 1" % (what, rc))
    line = one_line(err, what)
    name = "kvstash" + (" " + cmd if cmd else "")
    check(line == name + ": standard output: No space left on device",
          "%s: %r" % (what, line))


def test_conventions():
    # --version: the project's version, from meson through the config
    _, out, err = run("--version", expect=0)
    check(out == "kvstash %s\n" % project_version() and err == "",
          "--version printed %r" % out)

    # Numbers are decimal: a leading zero is not octal, hex is refused.
    _, out, _ = run("trace", "--residual", "04", "--group", "02",
                    "--steps", "010", "--json", expect=0)
    check(len(json.loads(out)) == 10, "--steps 010 gave %d rows, not 10"
          % len(json.loads(out)))
    c = Case("dec", heads=1, dim=64, tokens=32, seed=9)
    run(*c.pack_args(), expect=0)
    plain = read("dec.blk")
    run(*c.pack_args(**{"head-dim": "064", "kv-heads": "001"}), expect=0)
    check(read("dec.blk") == plain, "--head-dim 064 is not 64")
    line = usage_error(c.pack_args(**{"head-dim": "0x40"}), "block pack")
    check("decimal" in line and "0x40" in line, "hex refused as %r" % line)

    # Positions past 2^64 - 1 are refused; up to it they are fine.
    last = (1 << 64) - 32
    run(*c.pack_args(**{"first-pos": last}), expect=0)
    _, doc = inspect_json(c.block)
    check(doc["first_pos"] == last, "first_pos %s" % doc["first_pos"])
    os.unlink(c.block)
    line = usage_error(c.pack_args(**{"first-pos": last + 1}),
                       "block pack")
    check("first-pos" in line, "wrap refused as %r" % line)
    check(not os.path.exists(c.block), "refused pack wrote its output")
    usage_error(c.pack_args(**{"first-pos": 1 << 64}), "block pack")

    # block unpack: the two outputs (or an output and the block) must be
    # different files, by name, by hard link or by symbolic link.
    run(*c.pack_args(), expect=0)
    keep = write("keep.f32", b"precious")
    os.link(keep, path("keep.link"))
    os.symlink(keep, path("keep.sym"))
    for k, v in ((path("kv.f32"), path("kv.f32")),
                 (path("kv.f32"), os.path.join(TMP, ".", "kv.f32")),
                 (keep, path("keep.link")),
                 (path("keep.sym"), keep),
                 (c.block, path("v.f32")),
                 (path("k.f32"), c.block)):
        line = usage_error(["block", "unpack", c.block, "--keys", k,
                            "--values", v], "block unpack")
        check("same file" in line, "same-file refusal says %r" % line)
        check(not os.path.exists(path("kv.f32")) and
              read("keep.f32") == b"precious" and
              read("dec.blk") == plain,
              "refused unpack (%s, %s) wrote something" % (k, v))
    run("block", "unpack", c.block, "--keys", path("k.f32"), "--values",
        path("v.f32"), expect=0)

    # Sizes take K/M/G suffixes; a range without an upper limit never
    # prints one of 0.
    line = usage_error(["bench", "store", "--dir", TMP, "--dram-bytes",
                        "1K"], "bench store")
    check(line.endswith("must be between 1M and 16G"), line)
    line = usage_error(["bench", "format", "--tokens", "0"], "bench format")
    check(line.endswith("must be between 1 and 1048576"), line)

    # Output write errors are errors (exit 1, one line).
    if not os.path.exists("/dev/full"):
        raise Skip("/dev/full is missing: output write errors not tested")
    check_full(["--version"], None)
    check_full(["--help"], None)
    check_full(["trace", "--help"], "trace")
    check_full(["trace", "--residual", 4, "--group", 2, "--steps", 9],
               "trace")
    check_full(["trace", "--residual", 4, "--group", 2, "--steps", 5000,
                "--json"], "trace")
    check_full(["memory", "--tokens", 4096, "--head-dim", 128, "--group",
                32, "--residual", 128, "--bits", 2, "--meta-bytes", 2,
                "--float-bytes", 2, "--json"], "memory")
    check_full(["block", "inspect", c.block, "--json"], "block inspect")
    check_full(["block", "inspect", c.block], "block inspect")
    check_full(["block", "verify", c.block], "block verify")
    check_full(c.pack_args(), "block pack")
    check_full(["demo"], "demo")
    check_full(["bench", "format", "--heads", 1, "--head-dim", 32,
                "--tokens", 32, "--seconds", 0.05], "bench format")
    # A file output on a full device is the same kind of failure.
    failure(["block", "unpack", c.block, "--keys", "/dev/full", "--values",
             path("v2.f32")], "block unpack")


def demo_env():
    """The demo's temporary directories go under TMP, to be checked."""
    env = dict(os.environ)
    env["TMPDIR"] = path("demo-tmp")
    os.makedirs(env["TMPDIR"], exist_ok=True)
    return env


def demo_dirs_left():
    return os.listdir(path("demo-tmp"))


def ours(pid):
    """Whether @pid is still a process of this build (kvstash or
    kvstashd), not reaped: a pid reused by another program is not."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read().split(b"\0")[0].decode(errors="replace")
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z" and os.path.basename(cmd) in ("kvstash",
                                                        "kvstashd")


def pids_in(text):
    return [int(p) for p in re.findall(r"pid (\d+)", text)]


def test_demo():
    env = demo_env()
    # the summary as JSON: every fact the demo shows
    p = subprocess.run([KVSTASH, "demo", "--json"], capture_output=True,
                       text=True, timeout=110, env=env)
    check(p.returncode == 0, "demo --json: exit %d\n%s" % (p.returncode,
                                                           p.stderr))
    check(p.stderr == "", "demo --json wrote to stderr: %r" % p.stderr)
    d = json.loads(p.stdout)
    r1, r2, lc = d["request1"], d["request2"], d["long"]
    check(r1["handoff_identical"] is True,
          "decoding after the handoff differs: %r" % r1)
    check(r1["published"] == (r1["prompt"] // 128) * d["model"]["layers"],
          "request 1 published %r" % r1)
    check(r1["imported_blocks"] == r1["prompt"] // 128, "import %r" % r1)
    check(r2["hits"] > 0 and r2["attached_tokens"] > 0,
          "request 2 had no hits: %r" % r2)
    check(r2["hits"] == r2["attached_tokens"] // 128 *
          d["model"]["layers"], "hits and attached tokens: %r" % r2)
    check(r2["attached_tokens"] <= r2["shared"] and
          r2["prefill_tokens"] == r2["prompt"] - r2["attached_tokens"],
          "request 2's prefill: %r" % r2)
    check(r2["recompute_identical"] is True,
          "attach differs from recompute: %r" % r2)
    check(lc["block_bytes"] > lc["dram_capacity"],
          "the long context fits in DRAM: %r" % lc)
    check(lc["spills"] > 0 and lc["nvme_hits"] > 0,
          "no spill to NVMe and back: %r" % lc)
    check(lc["attached_tokens"] == lc["tokens"],
          "the long context did not all come back: %r" % lc)
    acc = d["accuracy"]
    check(acc["values"] > 0 and 0 < acc["relative_l2"] < 0.2,
          "attention error against fp16: %r" % acc)
    b = d["bytes"]
    check(b["moved"] == b["blocks"] + b["tails"] and
          b["fp16"] > 4 * b["moved"], "bytes moved: %r" % b)
    check(d["all_stopped"] is True and d["temp_removed"] is True,
          "processes or directory left: %r" % d)
    names = [x["name"] for x in d["processes"]]
    check(names[0] == "kvstashd" and names.count("prefill") == 2 and
          names.count("decode") == 3, "processes: %r" % names)
    for x in d["processes"]:
        check(x["status"] == "exit 0", "process %r" % x)
        check(not ours(x["pid"]), "process %r is still there" % x)
    check(demo_dirs_left() == [], "left %r" % demo_dirs_left())

    # the narration and the one-screen summary
    p = subprocess.run([KVSTASH, "demo", "--steps", "8"],
                       capture_output=True, text=True, timeout=110,
                       env=env)
    check(p.returncode == 0, "demo: exit %d\n%s" % (p.returncode, p.stderr))
    out = p.stdout
    for word in ("kvstashd   pid", "request 1", "request 2", "long",
                 "summary", "handoff", "identical (8 steps", "block hits",
                 "spilled to NVMe", "relative L2 error", "as fp16 K/V",
                 "all stopped", "directory removed"):
        check(word in out, "demo output lacks %r:\n%s" % (word, out))
    check("DIFFERENT" not in out and "NOT" not in out, out)
    check(len(out.splitlines()) <= 24, "the summary is not one screen")
    for pid in pids_in(out):
        check(not ours(pid), "pid %d is still there" % pid)

    # Ctrl-C: every process stopped, the directory removed, one line
    check_interrupted(env)
    # a daemon killed under it: a failure that names it, nothing left
    check_daemon_killed(env)
    # a daemon that does not start
    rc, _, err = run("demo", "--kvstashd", "/bin/false")
    check(rc == 1 and one_line(err, "demo --kvstashd /bin/false")
          .startswith("kvstash demo: kvstashd did not start"), err)

    # the one-block walk-through, without a daemon
    _, first, _ = run("demo", "--block", expect=0)
    _, second, _ = run("demo", "--block", expect=0)
    check(first == second, "demo --block output differs between runs")
    for word in ("verify   ok", "refused", "relative", "fp16", "410 KiB"):
        check(word in first, "demo --block lacks %r:\n%s" % (word, first))


def test_demo_cuda():
    """The demo with the CUDA device (suite gpu; skips without one)."""
    env = demo_env()
    p = subprocess.run([KVSTASH, "demo", "--json", "--device", "cuda"],
                       capture_output=True, text=True, timeout=300, env=env)
    if p.returncode != 0 and "CUDA asked for, but not built or no usable" \
            in p.stderr:
        raise Skip("no usable CUDA device: %s" % p.stderr.strip())
    check(p.returncode == 0, "demo --device cuda: exit %d\n%s"
          % (p.returncode, p.stderr))
    d = json.loads(p.stdout)
    check(d["device"] == "cuda", "device %r" % d["device"])
    check(d["request1"]["handoff_identical"] is True and
          d["request2"]["recompute_identical"] is True and
          d["request2"]["hits"] > 0, "%r %r" % (d["request1"], d["request2"]))
    check(d["long"]["spills"] > 0 and d["long"]["nvme_hits"] > 0 and
          d["long"]["attached_tokens"] == d["long"]["tokens"], "%r" % d["long"])
    check(0 < d["accuracy"]["relative_l2"] < 0.2, "%r" % d["accuracy"])
    check(d["all_stopped"] and d["temp_removed"], "%r" % d)
    for x in d["processes"]:
        check(not ours(x["pid"]), "process %r is still there" % x)
    check(demo_dirs_left() == [], "left %r" % demo_dirs_left())


def demo_until(env, args, marker):
    """Starts the demo; returns it and its stdout up to the line holding
    @marker."""
    p = subprocess.Popen([KVSTASH, "demo"] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    seen = ""
    while marker not in seen:
        line = p.stdout.readline()
        if not line:
            p.kill()
            p.wait()
            raise Failure("demo ended before %r:\n%s%s" %
                          (marker, seen, p.stderr.read()))
        seen += line
    return p, seen


def check_interrupted(env):
    p, seen = demo_until(env, ["--long", "65536"], "request 1")
    p.send_signal(signal.SIGINT)
    rest, err = p.communicate(timeout=60)
    check(p.returncode == 1, "interrupted demo: exit %d" % p.returncode)
    line = one_line(err, "interrupted demo")
    check("interrupted" in line and line.startswith("kvstash demo: "),
          line)
    pids = pids_in(seen + rest)
    check(len(pids) >= 2, "no pids in %r" % seen)
    for pid in pids:
        check(not ours(pid), "pid %d is still there after Ctrl-C" % pid)
    check(demo_dirs_left() == [], "Ctrl-C left %r" % demo_dirs_left())


def check_daemon_killed(env):
    p, seen = demo_until(env, ["--long", "65536"], "request 2")
    daemon = pids_in(seen)[0]
    os.kill(daemon, signal.SIGKILL)
    rest, err = p.communicate(timeout=60)
    check(p.returncode == 1, "demo without its daemon: exit %d"
          % p.returncode)
    line = one_line(err, "demo without its daemon")
    check("kvstashd" in line or "process" in line, line)
    for pid in pids_in(seen + rest):
        check(not ours(pid), "pid %d is still there" % pid)
    check(demo_dirs_left() == [], "left %r" % demo_dirs_left())


def test_bench():
    _, out, _ = run("bench", "format", "--heads", 2, "--head-dim", 64,
                    "--tokens", 64, "--seconds", 0.2, expect=0)
    for op in ("memcpy", "pack", "unpack", "verify"):
        check(any(l.startswith(op) for l in out.splitlines()),
              "bench output lacks %s:\n%s" % (op, out))


GROUPS = {
    "block": test_block, "errors": test_errors, "trace": test_trace,
    "memory": test_memory, "args": test_args, "demo": test_demo,
    "demo_cuda": test_demo_cuda,
    "bench": test_bench, "conventions": test_conventions,
}


def main():
    global KVSTASH, TMP
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print("usage: cli_test.py KVSTASH {%s}" % ",".join(GROUPS),
              file=sys.stderr)
        return 2
    KVSTASH = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="kvstash-cli-") as tmp:
        TMP = tmp
        try:
            GROUPS[sys.argv[2]]()
        except Failure as e:
            print("FAIL: %s" % e, file=sys.stderr)
            return 1
        except Skip as e:
            print("SKIP: %s" % e)
            return 77
    print("ok: %s" % sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
