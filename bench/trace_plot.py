#!/usr/bin/env python3
"""Draws the prefix-hit ratio curves of a trace replay sweep.

usage: trace_plot.py SWEEP.json OUT.png

SWEEP.json is what `kvstash bench trace TRACE --sweep CAPS --json` prints
(`kvstash bench trace --plot OUT.png` runs this script itself).  One curve
per format and policy: the quantized blocks and fp16 through the store's
own policy (its --eviction, DRAM + NVMe), through the LRU simulation and
the offline optimum (Belady over the chain), prefix-hit ratio (hit tokens
/ prompt tokens) against the swept capacity.

Exit status 0 when the PNG is written, 3 when matplotlib is not installed
(the PNG is optional: `pip install matplotlib`), 1 for a bad input.
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: trace_plot.py SWEEP.json OUT.png\n")
        return 1
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("kvstash bench trace: no plot: matplotlib is not "
                         "installed (pip install matplotlib)\n")
        return 3
    try:
        with open(sys.argv[1]) as f:
            sweep = json.load(f)
        points = sweep["points"]
        tier = sweep["sweep_tier"]
        caps = [p[tier + "_capacity"] / 2**30 for p in points]
        quant_label = points[0]["quant"]["format"]
        curves = []
        for fmt, label in (("quant", quant_label), ("fp16", "fp16")):
            for policy in ("store", "lru", "optimum"):
                ys = [100.0 * (p[fmt]["prefix_hit_ratio"] if policy ==
                               "store" else
                               p[fmt][policy]["prefix_hit_ratio"])
                      for p in points]
                curves.append((fmt, policy, label, ys))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        sys.stderr.write("trace_plot.py: %s: not a sweep: %s\n" %
                         (sys.argv[1], e))
        return 1
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    colors = {"quant": "tab:blue", "fp16": "tab:orange"}
    styles = {"store": ("-", "o"), "lru": ("--", "x"), "optimum": (":", "^")}
    names = {"store": "store (%s)" % sweep.get("eviction", "store"),
             "lru": "LRU", "optimum": "optimum (Belady)"}
    for fmt, policy, label, ys in curves:
        ax.plot(caps, ys, color=colors[fmt], linestyle=styles[policy][0],
                marker=styles[policy][1],
                label="%s, %s" % (label, names[policy]))
    ax.set_xscale("log", base=2)
    ax.set_xticks(caps)
    ax.set_xticklabels(["%g" % c for c in caps])
    ax.minorticks_off()
    ax.set_xlabel("%s capacity (GiB, at scale 1)" % tier.upper())
    ax.set_ylabel("prefix-hit ratio (% of prompt tokens)")
    model = sweep.get("model", {})
    ax.set_title("%s: %d requests, %s, scale %d" % (
        sweep.get("trace", "trace").rsplit("/", 1)[-1],
        sweep.get("trace_requests", 0), model.get("name", "?"),
        sweep.get("scale", 1)), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(sys.argv[2])
    except OSError as e:
        sys.stderr.write("trace_plot.py: %s: %s\n" % (sys.argv[2], e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
