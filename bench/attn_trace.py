#!/usr/bin/env python3
"""attn_trace.py - where one call of the fused decode attention spends time.

Needs the trace probe library, the kernels compiled with
bench/attn_probe.cuh's trace (KVS_ATTN_TRACE), which records %globaltimer
at fixed points of every warp of the attention kernel and every CTA of the
merge kernel for the last 10 calls; any CUDA build makes it:

    meson setup build-gpu -Dcuda=enabled
    ninja -C build-gpu bench/libkvstash_attn_trace.so
    python3 bench/attn_trace.py build-gpu/bench/libkvstash_attn_trace.so \
        1x512,1x32768 [flags]

Runs attn_bench.py's benchmark of each shape (the same inputs, the same
CUDA-graph replays of 10 calls) and, after the replays, prints per call
(calls 2-9 of the last replay, in time order) microseconds from the call's
first CTA: the generic CTAs' duration and end, the fast warps' prologue,
wait for the first tile, tile loop and epilogue (medians) and their ends,
the merge's release and end, its steps after the first loads (its own
splits folded, the warps' meeting, the stores), and the next call's
start.  The trace points
cost a few stores per warp: times are close to, not equal to, the
untraced build's.  Per SM (the trace records each warp's SM): the end of
its last fast warp and its fast tiles per microsecond.  With
ATTN_TRACE_DUMP=DIR set, the raw events of each shape's last replay are
also saved to DIR/trace_<shape>_f<flags>.npz.  Under the cluster plan
(attn_cluster_kernel) each CTA's quads count as CTAs, and its fold in
distributed shared memory stands where the merge's times are: entry, the
cluster barrier's release, the first received partials loaded, done.
"""
import ctypes as C
import os
import statistics as st
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_bench as ab  # noqa: E402

# the trace's layout (bench/attn_probe.cuh): per call, [CTA][warp][8]
# attention events, then [CTA][6] merge events
TR_CALLS, TR_CTAS, WARPS = 10, 2048, 4
TR_ATT = TR_CTAS * WARPS * 8
TR_CALL = TR_ATT + TR_CTAS * 6
if len(sys.argv) < 3:
    sys.exit("usage: attn_trace.py LIB SHAPES [flags]")
lib_path, shapes = sys.argv[1], sys.argv[2]
flags = int(sys.argv[3]) if len(sys.argv) > 3 else 0
dump = os.environ.get("ATTN_TRACE_DUMP")
lib = ab.load(lib_path)
lib.kvs_cuda_attn_trace_read.argtypes = [C.c_void_p, C.c_size_t]
buf = np.zeros(TR_CALLS * TR_CALL, dtype=np.uint64)
orig = ab.time_graph


def med(x):
    return st.median(x) if len(x) else float("nan")


def analyse(tag):
    """Prints the per-call summary of buf (the last replay's 10 calls)."""
    a = buf.reshape(TR_CALLS, TR_CALL).astype(np.int64)
    t0s = []
    for c in range(TR_CALLS):
        att = a[c, :TR_ATT].reshape(TR_CTAS, WARPS, 8)
        ent = att[:, 0, 0]
        v = ent > 0
        t0s.append(ent[v].min() if v.any() else 0)
    order = [c for c in np.argsort(t0s) if t0s[c]]
    rows = []
    for n, c in enumerate(order):
        att = a[c, :TR_ATT].reshape(TR_CTAS, WARPS, 8)
        mg = a[c, TR_ATT:].reshape(TR_CTAS, 6)
        t0 = t0s[c]
        v = att[:, 0, 0] > 0
        ncta = int(v.sum())
        ent = att[v, 0, 0] - t0
        gen = att[:, :, 1] > 0
        fw = att[:, :, 2] > 0
        r = {"ctas": ncta, "entry_max": ent.max() / 1e3}
        if gen.any():
            g = att[:, 0, 1][gen[:, 0]] - att[:, 0, 0][gen[:, 0]]
            r["gen_dur_med"] = med(list(g)) / 1e3
            r["gen_end_max"] = (att[:, :, 1][gen].max() - t0) / 1e3
            go = gen[:, 0] & (att[:, 0, 2] == 0) & (att[:, 0, 3] > 0)
            if go.any():
                r["gen_staged_med"] = med(list(att[go, 0, 3] -
                                               att[go, 0, 0])) / 1e3
        if fw.any():
            f = att[fw]
            r["fast_warps"] = int(fw.sum())
            r["tiles_med"] = med(list(f[:, 7] & 0xffffffff))
            r["pro_med"] = med(list(f[:, 3] - f[:, 2])) / 1e3
            ok = f[:, 4] > 0
            r["first_med"] = med(list(f[ok, 4] - f[ok, 3])) / 1e3
            r["first_max"] = ((f[ok, 4] - f[ok, 3]).max() / 1e3
                              if ok.any() else 0)
            r["loop_med"] = med(list(f[ok, 5] - f[ok, 4])) / 1e3
            nt = f[:, 7] & 0xffffffff
            many = ok & (nt > 1)
            r["tile_med"] = med(list((f[many, 5] - f[many, 4]) /
                                     nt[many])) / 1e3
            r["epi_med"] = med(list(f[:, 6] - f[:, 5])) / 1e3
            r["fast_start_max"] = (f[:, 2].max() - t0) / 1e3
            r["fast_end_min"] = (f[:, 6].min() - t0) / 1e3
            r["fast_end_med"] = med(list(f[:, 6] - t0)) / 1e3
            r["fast_end_max"] = (f[:, 6].max() - t0) / 1e3
            # per SM (the high word of event 7): when its last fast warp
            # ends, and its tiles per microsecond from the call's start
            sm = f[:, 7] >> 32
            ends = {}
            for k in np.unique(sm):
                on = sm == k
                ends[k] = ((f[on, 6].max() - t0) / 1e3, nt[on].sum())
            e = [v[0] for v in ends.values()]
            r["sm_end_min"], r["sm_end_med"] = min(e), med(e)
            r["sm_tiles_us"] = med([v[1] / v[0] for v in ends.values()])
            # the last warp's story
            i = int(np.argmax(f[:, 6]))
            w = f[i]
            r["last"] = ("start %.2f pro %.2f first %.2f loop %.2f (%d t) "
                         "epi %.2f") % (
                (w[2] - t0) / 1e3, (w[3] - w[2]) / 1e3,
                (w[4] - w[3]) / 1e3 if w[4] else -1,
                (w[5] - w[4]) / 1e3 if w[4] else -1, w[7] & 0xffffffff,
                (w[6] - w[5]) / 1e3)
        vm = mg[:, 0] > 0
        if vm.any():
            m = mg[vm]
            r["m_entry_min"] = (m[:, 0].min() - t0) / 1e3
            r["m_entry_max"] = (m[:, 0].max() - t0) / 1e3
            r["m_rel_min"] = (m[:, 1].min() - t0) / 1e3
            r["m_rel_max"] = (m[:, 1].max() - t0) / 1e3
            r["m_loaded_max"] = (m[:, 3].max() - t0) / 1e3
            r["m_end_max"] = (m[:, 2].max() - t0) / 1e3
            # the merge kernel's steps after its first loads, per CTA
            # (medians): own splits folded, the warps' meeting (to the
            # stores' start), the stores to the end
            st4 = (m[:, 4] > 0) & (m[:, 5] > 0)
            if st4.any():
                r["m_fold_med"] = med(list(m[st4, 4] - m[st4, 3])) / 1e3
                r["m_meet_med"] = med(list(m[st4, 5] - m[st4, 4])) / 1e3
                r["m_store_med"] = med(list(m[st4, 2] - m[st4, 5])) / 1e3
                r["m_in_med"] = med(list(m[st4, 3] - m[st4, 1])) / 1e3
        if n + 1 < len(order):
            r["next_start"] = (t0s[order[n + 1]] - t0) / 1e3
        rows.append(r)
    print("== %s" % tag)
    keys = [k for k in rows[1] if k != "last"]
    for k in keys:
        vals = [r[k] for r in rows[1:9] if k in r]
        print("  %-15s %s" % (k, " ".join("%7.2f" % x for x in vals)))
    for r in rows[1:4]:
        print("  last warp: %s" % r.get("last"))


def tg(fn, runs, reps=10):
    """attn_bench's time_graph, then the trace of its last replay"""
    r = orig(fn, runs, reps)
    if fn.__name__ == "run_kvs":
        rc = lib.kvs_cuda_attn_trace_read(buf.ctypes.data, buf.nbytes)
        if rc:
            sys.exit("trace read failed %d" % rc)
        if dump:
            np.savez_compressed(os.path.join(dump, "trace_%s_f%d.npz" % (
                cur[0], flags)), trace=buf.reshape(TR_CALLS, TR_CALL))
        analyse("%s flags %d: %.2f us/call" % (cur[0], flags, r[0]))
    return r


ab.time_graph = tg
page_stride = ab.pool_page_stride(lib)
bw = ab.copy_bandwidth()
cur = [""]
for s in shapes.split(","):
    B, T = (int(x) for x in s.split("x"))
    cur[0] = s
    lib.kvs_cuda_attn_trace_read(buf.ctypes.data, buf.nbytes)
    r = ab.bench_shape(lib, B, T, bw, 30, page_stride, flags)
    print("   sdpa %.2f us, ratio %.2f" % (r["sdpa_us"], r["speedup"]),
          flush=True)
