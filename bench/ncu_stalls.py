#!/usr/bin/env python3
"""ncu_stalls.py - where a kernel's warps stall, by SASS opcode, in its hot loop.

Reads the per-instruction page that Nsight Compute writes for one profiled
launch taken with the source counters (`--set full`):

    ncu --clock-control none -k regex:attn_kernel -c 1 --set full -o rep ...
    ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 bench/ncu_stalls.py sass.csv

and prints the share of the stall samples in the kernel's hot loop (of the
loops holding 40% of the samples or more, the shortest: the fast tile loop
of attn_kernel), that loop's stall reasons, and per opcode its instruction
count, its share of the loop's samples and its top stall reasons
(`NCU=1 bench/gpu_run.sh` runs it on the (8, 32K) launch).
"""
import collections
import csv
import re
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(sass):
    op = re.sub(r"^@!?U?P\w+\s+", "", sass.strip())
    return op.split()[0].split(".")[0] if op else "?"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_stalls.py SASS_PAGE.csv")
    rows = list(csv.reader(open(sys.argv[1], newline="")))
    head = next((i for i, r in enumerate(rows) if r and r[0] == "Address"),
                None)
    if head is None:
        sys.exit("no 'Address' header: not an ncu --page source CSV")
    names = rows[head]
    col = {n: i for i, n in enumerate(names)}
    samples = col.get("Warp Stall Sampling (All Samples)")
    if samples is None:
        sys.exit("no stall sampling column: profile with --set full")
    reasons = [n for n in names
               if n.startswith("stall_") and "Not Issued" not in n]
    code = [r for r in rows[head + 1:] if len(r) == len(names)]
    addr = [int(r[0], 16) for r in code]
    where = {a: i for i, a in enumerate(addr)}

    # the hot loop: of the loops (a branch back to an earlier
    # instruction) holding 40% of the samples or more, the shortest
    total = sum(number(r[samples]) for r in code)
    best = None
    for i, r in enumerate(code):
        m = re.search(r"BRA\s.*?(0x[0-9a-f]+)", r[1])
        if not m or int(m.group(1), 16) not in where:
            continue
        start = where[int(m.group(1), 16)]
        if start >= i:
            continue
        s = sum(number(x[samples]) for x in code[start:i + 1])
        if s >= 0.4 * total and (best is None or
                                 i - start < best[1] - best[0]):
            best = (start, i, s)
    if best is None or total == 0:
        sys.exit("no loop with samples found")
    start, end, in_loop = best
    body = code[start:end + 1]
    print("kernel samples %d; hot loop %#x-%#x, %d instructions, "
          "%.0f%% of the samples"
          % (total, addr[start] - addr[0], addr[end] - addr[0], len(body),
             100.0 * in_loop / total))

    why = collections.Counter()
    by_op = collections.defaultdict(collections.Counter)
    count = collections.Counter()
    for r in body:
        op = opcode(r[1])
        count[op] += 1
        for n in reasons:
            v = number(r[col[n]])
            why[n] += v
            by_op[op][n] += v
    print("loop stall reasons: " + ", ".join(
        "%s %.1f%%" % (n[6:], 100.0 * v / in_loop)
        for n, v in why.most_common(8) if v > 0))
    print("%-8s %5s %8s  top reasons" % ("opcode", "count", "samples"))
    for op in sorted(by_op, key=lambda o: -sum(by_op[o].values())):
        s = sum(by_op[op].values())
        if s < 0.005 * in_loop:
            continue
        top = ", ".join("%s %.0f%%" % (n[6:], 100.0 * v / s)
                        for n, v in by_op[op].most_common(4) if v > 0)
        print("%-8s %5d %7.1f%%  %s" % (op, count[op], 100.0 * s / in_loop,
                                         top))


if __name__ == "__main__":
    main()
