"""Markdown table of every measured candidate (results*.jsonl, full
protocol; the last measurement of a name wins), sorted by bytes. Bytes:
  blocks  sealed blocks only (header + codes + fp16 origins/steps), the long-context figure
  @4096   kvs_memory_account's format bytes at T=4096 (blocks + fp16 tail) + fp16 sinks:
          the definition the baseline table's "KV memory vs fp16" column uses
  @1152   the same at the protocol's own context (1152 tokens)

    python3 table.py > table.md
"""
import glob
import json
import os

import accbench as ab
import kvquant as kq

HERE = os.path.dirname(os.path.abspath(__file__))
plans = ab.candidates()
for extra in sorted(glob.glob(os.path.join(HERE, "candidates_*.py"))):
    ns = {}
    exec(open(extra).read(), ns)
    plans.update(ns["candidates"](ab.Q, ab.per_layer, ab.L))
rows = {}
for path in sorted(glob.glob(os.path.join(HERE, "results*.jsonl"))):
    for line in open(path):
        r = json.loads(line)
        if r.get("windows", 3) == 3:
            rows[r["name"]] = r
print("| candidate | ppl vs fp32 | top-1 agree | x smaller (blocks) | x smaller @4096 | x smaller @1152 |")
print("|---|---:|---:|---:|---:|---:|")
for r in sorted(rows.values(), key=lambda r: (-r["x_fp16_blocks"], r["dppl_pct"])):
    x4096 = kq.ratio(plans[r["name"]], 4096, 3, 64) if r["name"] in plans else float("nan")
    print("| %s | %+.2f%% | %.1f%% | %.2f | %.2f | %.2f |" % (
        r["name"], r["dppl_pct"], r["top1_pct"], r["x_fp16_blocks"], x4096, r["x_fp16_T1152"]))
