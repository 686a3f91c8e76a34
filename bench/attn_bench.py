#!/usr/bin/env python3
"""attn_bench.py - kvstash fused decode attention vs torch SDPA, side by side.

One process, same shapes: kvstash's fused decode attention over paged 2-bit
blocks (libkvstash_cuda through ctypes, on torch tensors' memory) against
torch.nn.functional.scaled_dot_product_attention on fp16 K/V with
enable_gqa=True.  CUDA events, medians over many runs, inputs rotated
through enough copies to defeat the L2.  Prints both times, their ratio,
the bytes each reads and the share of the device-to-device copy bandwidth
measured in the same run; then the seal kernel's throughput against the
same bandwidth.  The headline times are per call from CUDA-graph replays of
10 calls (device time); eager times (one call between two events, host
launch overhead included) are printed beside them.  --json writes every
figure.

The GPU's SM clock and power are sampled (nvidia-smi, every 50 ms) around
kvstash's timing: under sustained load the H200 reaches its 700 W cap and
lowers the SM clock, which slows this kernel (it is bound by the SMs) and
not SDPA (bound by memory).  --sustained S times both again after S
seconds of back-to-back kvstash calls, at the clock such a load settles
at (docs/KERNELS.md, "How to measure"); the headline timing of each shape comes
after --cool seconds of idling, so that the load of whatever ran before
it (the previous shape's held phase) does not carry over; its own calls
can still reach the cap at (8, 128K), as the clock printed beside it
shows.

usage: attn_bench.py [--lib build-gpu/kernels/libkvstash_cuda.so]
                     [--shapes 1x32768,8x32768,8x131072,32x8192] [--json F]
"""
import argparse
import ctypes as C
import json
import math
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

F32, F16, BF16 = 1, 2, 3
HQ, HKV, D, BITS, G, R = 32, 8, 128, 2, 32, 128


class Shape(C.Structure):
    _fields_ = [("kv_heads", C.c_uint16), ("head_dim", C.c_uint16),
                ("group", C.c_uint16), ("bits", C.c_uint8),
                ("meta_type", C.c_uint8), ("span", C.c_uint32),
                ("residual", C.c_uint32)]


class Layout(C.Structure):
    _fields_ = [("offset", C.c_uint32 * 8), ("length", C.c_uint32 * 8),
                ("section_count", C.c_uint32), ("total_size", C.c_uint32)]


class Seq(C.Structure):
    _fields_ = [("k_quant_len", C.c_uint32), ("v_quant_len", C.c_uint32),
                ("k_resid_len", C.c_uint32), ("v_resid_len", C.c_uint32),
                ("v_resid_start", C.c_uint32), ("reserved", C.c_uint32)]


class Attn(C.Structure):
    _fields_ = [("shape", Shape), ("batch", C.c_uint32),
                ("q_heads", C.c_uint32), ("dtype", C.c_int),
                ("out_dtype", C.c_int), ("scale", C.c_float),
                ("max_tokens", C.c_uint32), ("q", C.c_void_p),
                ("pool", C.c_void_p), ("page_stride", C.c_uint64),
                ("page_table", C.c_void_p), ("max_pages", C.c_uint32),
                ("seqs", C.c_void_p), ("k_resid", C.c_void_p),
                ("v_resid", C.c_void_p), ("k_resid_stride", C.c_uint32),
                ("v_resid_stride", C.c_uint32), ("out", C.c_void_p),
                ("workspace", C.c_void_p), ("workspace_size", C.c_uint64),
                ("flags", C.c_uint32), ("stream", C.c_void_p),
                ("max_resid_rows", C.c_uint32)]


class Seal(C.Structure):
    _fields_ = [("shape", Shape), ("in_dtype", C.c_int),
                ("keys", C.c_void_p), ("values", C.c_void_p),
                ("block_stride", C.c_int64), ("token_stride", C.c_int64),
                ("head_stride", C.c_int64), ("src", C.c_void_p),
                ("blocks", C.c_uint32), ("images", C.c_void_p),
                ("image_stride", C.c_uint64), ("dst", C.c_void_p),
                ("status", C.c_void_p), ("stream", C.c_void_p),
                ("v_head_stride", C.c_int64)]


def load(path):
    lib = C.CDLL(path)
    lib.kvs_cuda_attn_workspace.restype = C.c_uint64
    lib.kvs_cuda_attn_workspace.argtypes = [C.POINTER(Attn)]
    lib.kvs_cuda_attend.argtypes = [C.POINTER(Attn)]
    lib.kvs_cuda_seal_blocks.argtypes = [C.POINTER(Seal)]
    lib.kvs_block_layout.argtypes = [C.POINTER(Shape), C.POINTER(Layout)]
    return lib


def shape():
    return Shape(HKV, D, G, BITS, F16, R, R)


def pool_page_stride(lib):
    """Bytes between pages of the pool: a block image, 256-byte aligned."""
    lay = Layout()
    sh = shape()
    if lib.kvs_block_layout(C.byref(sh), C.byref(lay)):
        sys.exit("layout failed")
    return (lay.total_size + 255) // 256 * 256


def stream_ptr():
    return C.c_void_p(torch.cuda.current_stream().cuda_stream)


def time_runs(fn, runs, warmup=5):
    """Median (and spread) in microseconds of fn() between CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    times.sort()
    return statistics.median(times), times[len(times) // 10], \
        times[(len(times) * 9) // 10]


def graph_of(fn, reps=10):
    """A CUDA graph of @reps calls of fn(), warmed up and replayed once."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def time_graph(fn, runs, reps=10):
    """Median microseconds per call of fn() replayed from a CUDA graph of
    @reps calls: device time without the host's launch overhead."""
    graph = graph_of(fn, reps)
    times = []
    for _ in range(runs):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / reps)
    times.sort()
    return statistics.median(times), times[len(times) // 10], \
        times[(len(times) * 9) // 10]


class GpuState:
    """SM clock (MHz), power (W, nvidia-smi's one-second average) and
    clock-limit reasons sampled every 50 ms around the block (nvidia-smi
    takes ~0.1 s to start, and samples for 0.15 s after it, so a short
    block's figures are those just after it); summary() is None where
    nvidia-smi is missing."""

    def __enter__(self):
        try:
            self.p = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,"
                 "clocks_throttle_reasons.active",
                 "--format=csv,noheader,nounits", "-lms", "50"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.p = None
        return self

    def __exit__(self, *exc):
        self.rows = []
        if self.p is None:
            return False
        time.sleep(0.15)
        self.p.terminate()
        out = self.p.communicate()[0]
        for line in out.splitlines():
            f = [x.strip() for x in line.split(",")]
            try:
                self.rows.append((float(f[0]), float(f[1]), int(f[2], 16)))
            except (ValueError, IndexError):
                pass
        return False

    def summary(self):
        if not self.rows:
            return None
        mhz = sorted(r[0] for r in self.rows)
        reasons = 0
        for r in self.rows:
            reasons |= r[2]
        return {"sm_mhz_median": statistics.median(mhz),
                "sm_mhz_min": mhz[0],
                "power_w_max": max(r[1] for r in self.rows),
                "power_cap": bool(reasons & 0x4)}


def state_str(st):
    if not st:
        return "clock n/a"
    return "SM %.0f MHz (min %.0f), %.0f W%s" % (
        st["sm_mhz_median"], st["sm_mhz_min"], st["power_w_max"],
        ", power cap" if st["power_cap"] else "")


def bw_share(nbytes, us, bw):
    """Share of the copy bandwidth @bw (bytes/s) that moving @nbytes in
    @us microseconds is."""
    return nbytes / (us * 1e-6) / bw


def copy_bandwidth():
    """Device-to-device copy, bytes read + written per second."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    src.random_()
    med, _, _ = time_runs(lambda: dst.copy_(src), 30)
    del src, dst
    return 2.0 * n / (med * 1e-6)


def seal_pages(lib, keys, values, pool, first_page, page_stride, status):
    """Seals [H][T][D] fp16 K/V of one sequence into consecutive pages."""
    T = keys.shape[1]
    a = Seal()
    a.shape = shape()
    a.in_dtype = F16
    a.keys = keys.data_ptr()
    a.values = values.data_ptr()
    a.block_stride = R * D
    a.token_stride = D
    a.head_stride = T * D
    a.blocks = T // R
    a.images = pool.data_ptr() + first_page * page_stride
    a.image_stride = page_stride
    a.status = status.data_ptr()
    a.stream = stream_ptr()
    rc = lib.kvs_cuda_seal_blocks(C.byref(a))
    if rc:
        sys.exit("seal failed: %d" % rc)


def bench_shape(lib, B, T, bw, runs, page_stride, flags, tail_hint=True,
                alt_flags=None, sustained=0.0, cool=0.0, check=True):
    torch.manual_seed(B * 1000003 + T)
    P = T // R
    kr, vr = 64, R + 1                  # a kivi step: both residuals live
    kq, vq = T - kr, T - vr
    rstride = 2 * R + 2
    # bytes kvstash must read: K and V codes, K meta per G tokens, V meta
    # per token, fp16 residual rows, q; and write out
    k_bytes = B * HKV * (kq * D * BITS // 8 + (kq // G) * D * 2 * 2)
    v_bytes = B * HKV * (vq * D * BITS // 8 + vq * (D // G) * 2 * 2)
    r_bytes = B * HKV * (kr + vr) * D * 2
    qo_bytes = 2 * B * HQ * D * 2
    kv_bytes = k_bytes + v_bytes + r_bytes + qo_bytes
    sdpa_bytes = 2 * B * HKV * T * D * 2 + qo_bytes
    sets = max(1, min(8, math.ceil(512e6 / kv_bytes)))
    sdpa_sets = max(1, min(4, math.ceil(512e6 / sdpa_bytes)))

    status = torch.zeros(1, dtype=torch.int32, device="cuda")
    pool = torch.empty(sets * B * P * page_stride, dtype=torch.uint8,
                       device="cuda")
    kf = [torch.randn(B, HKV, T, D, dtype=torch.float16, device="cuda")
          for _ in range(sdpa_sets)]
    vf = [torch.randn(B, HKV, T, D, dtype=torch.float16, device="cuda")
          for _ in range(sdpa_sets)]
    for s in range(sets):
        for b in range(B):
            seal_pages(lib, kf[s % sdpa_sets][b], vf[s % sdpa_sets][b], pool,
                       (s * B + b) * P, page_stride, status)
    torch.cuda.synchronize()
    if int(status.item()):
        sys.exit("seal flagged an error")
    # sequence b of set s owns pages (s*B + b)*P .. +P-1, in token order
    tables = [((s * B + torch.arange(B, device="cuda").unsqueeze(1)) * P
               + torch.arange(P, device="cuda")).to(torch.int32).contiguous()
              for s in range(sets)]
    seqs = (Seq * B)()
    for b in range(B):
        seqs[b] = Seq(kq, vq, kr, vr, 0, 0)
    seq_t = torch.frombuffer(bytearray(seqs), dtype=torch.uint8).cuda()
    k_res = torch.randn(B, HKV, rstride, D, dtype=torch.float16,
                        device="cuda")
    v_res = torch.randn(B, HKV, rstride, D, dtype=torch.float16,
                        device="cuda")
    q = torch.randn(B, HQ, D, dtype=torch.float16, device="cuda")
    out = torch.empty(B, HQ, D, dtype=torch.float16, device="cuda")

    args = []
    for s in range(sets):
        a = Attn()
        a.shape = shape()
        a.batch, a.q_heads = B, HQ
        a.dtype, a.out_dtype = F16, F16
        a.scale = 1.0 / math.sqrt(D)
        a.max_tokens = T
        a.q = q.data_ptr()
        a.pool = pool.data_ptr()
        a.page_stride = page_stride
        a.page_table = tables[s].data_ptr()
        a.max_pages = P
        a.seqs = seq_t.data_ptr()
        a.k_resid, a.v_resid = k_res.data_ptr(), v_res.data_ptr()
        a.k_resid_stride = a.v_resid_stride = rstride
        a.max_resid_rows = max(kr, vr) if tail_hint else 0
        a.out = out.data_ptr()
        a.stream = stream_ptr()
        a.flags = flags
        args.append(a)
    # the same calls with other flags, timed in turn with the first
    alt = []
    for a in args if alt_flags is not None else []:
        b = Attn.from_buffer_copy(a)
        b.flags = alt_flags
        alt.append(b)
    ws_size = max(lib.kvs_cuda_attn_workspace(C.byref(a))
                  for a in args[:1] + alt[:1])
    ws = torch.empty(max(ws_size, 16), dtype=torch.uint8, device="cuda")
    for a in args + alt:
        a.workspace, a.workspace_size = ws.data_ptr(), ws_size

    it = [0]

    def run_kvs(calls=args):
        a = calls[it[0] % sets]
        it[0] += 1
        a.stream = torch.cuda.current_stream().cuda_stream
        rc = lib.kvs_cuda_attend(C.byref(a))
        if rc:
            sys.exit("attend failed: %d" % rc)

    out.fill_(float("nan"))
    run_kvs()
    torch.cuda.synchronize()
    if check and not torch.isfinite(out).all():
        sys.exit("kvstash output not finite at %dx%d" % (B, T))
    if alt:
        # the other flags must compute the same attention (up to the
        # order of the sums)
        ref = out.float().clone()
        out.fill_(float("nan"))
        it[0] = 0                       # the same page set as ref's
        run_kvs(alt)
        torch.cuda.synchronize()
        err = ((out.float() - ref).abs().max() /
               ref.abs().max().clamp_min(1e-30)).item()
        print("B=%-3d T=%-7d flags %d against %d: max difference %.2e of "
              "the largest output" % (B, T, alt_flags, flags, err),
              flush=True)
        if not err <= 2e-3:             # each within 1e-3 of the exact
            sys.exit("the two flags disagree")
        it[0] = 0

    qs = q.view(B, HQ, 1, D)
    jt = [0]

    def run_sdpa():
        s = jt[0] % sdpa_sets
        jt[0] += 1
        return F.scaled_dot_product_attention(qs, kf[s], vf[s],
                                              enable_gqa=True)

    kvs_e = time_runs(run_kvs, runs)
    sdpa_e = time_runs(run_sdpa, runs)
    # the headline after an idle pause: a previous shape's held phase
    # leaves the power average at the cap for about a second
    time.sleep(cool)
    with GpuState() as g:
        kvs_t = time_graph(run_kvs, runs)
    kvs_state = g.summary()
    sdpa_t = time_graph(run_sdpa, runs)
    alt_t = []
    if alt:
        # alternate the two, twice, after the runs above
        ab = []
        for _ in range(2):
            ab.append(time_graph(lambda: run_kvs(alt), runs)[0])
            ab.append(time_graph(run_kvs, runs)[0])
        alt_t, kvs_again = ab[0::2], ab[1::2]
        print("B=%-3d T=%-7d flags %d: %s us, flags %d: %s us"
              % (B, T, flags, " ".join("%.1f" % x for x in
                                        [kvs_t[0]] + kvs_again),
                 alt_flags, " ".join("%.1f" % x for x in alt_t)),
              flush=True)
    held = None
    if sustained > 0:
        # back-to-back calls until the power average has settled, then
        # both timed again at the clock that load runs at
        load = graph_of(run_kvs)
        t_end = time.time() + sustained

        def replay_until(t):
            while time.time() < t:
                load.replay()
                torch.cuda.synchronize()

        replay_until(t_end - 1.0)
        with GpuState() as g:
            # the last second of the load, sampled, then the timing
            replay_until(t_end)
            kvs_h = time_graph(run_kvs, runs)
        sdpa_h = time_graph(run_sdpa, runs)
        held = {"kvstash_us": kvs_h[0], "sdpa_us": sdpa_h[0],
                "speedup": sdpa_h[0] / kvs_h[0],
                "kvstash_bw_share": bw_share(kv_bytes, kvs_h[0], bw),
                "state": g.summary()}
        print("B=%-3d T=%-7d after %.0f s of calls: kvstash %.1f us, sdpa "
              "%.1f us, x%.2f, bw %.0f%% (%s)"
              % (B, T, sustained, kvs_h[0], sdpa_h[0], held["speedup"],
                 100 * held["kvstash_bw_share"], state_str(held["state"])),
              flush=True)
    res = {
        "batch": B, "tokens": T, "kvstash_us": kvs_t[0],
        "kvstash_state": kvs_state, "sustained": held,
        "kvstash_p10_p90": kvs_t[1:], "sdpa_us": sdpa_t[0],
        "sdpa_p10_p90": sdpa_t[1:], "speedup": sdpa_t[0] / kvs_t[0],
        "kvstash_eager_us": kvs_e[0], "sdpa_eager_us": sdpa_e[0],
        "speedup_eager": sdpa_e[0] / kvs_e[0],
        "kvstash_bytes": kv_bytes, "sdpa_bytes": sdpa_bytes,
        "kvstash_bw_share": bw_share(kv_bytes, kvs_t[0], bw),
        "sdpa_bw_share": bw_share(sdpa_bytes, sdpa_t[0], bw),
        "sets": sets, "workspace": ws_size,
    }
    if alt:
        res["alt_flags"], res["alt_us"] = alt_flags, alt_t
    del pool, kf, vf
    torch.cuda.empty_cache()
    return res


def bench_seal(lib, bw, runs, page_stride, tokens=65536):
    """Seal throughput on engine-layout [tokens][H][D] fp16 K/V."""
    k = torch.randn(tokens, HKV, D, dtype=torch.float16, device="cuda")
    v = torch.randn(tokens, HKV, D, dtype=torch.float16, device="cuda")
    blocks = tokens // R
    pool = torch.empty(blocks * page_stride, dtype=torch.uint8,
                       device="cuda")
    status = torch.zeros(1, dtype=torch.int32, device="cuda")
    a = Seal()
    a.shape = shape()
    a.in_dtype = F16
    a.keys, a.values = k.data_ptr(), v.data_ptr()
    a.token_stride = HKV * D
    a.head_stride = D
    a.block_stride = R * HKV * D
    a.blocks = blocks
    a.images = pool.data_ptr()
    a.image_stride = page_stride
    a.status = status.data_ptr()
    a.stream = stream_ptr()
    lay = Layout()
    lib.kvs_block_layout(C.byref(a.shape), C.byref(lay))
    sec = sum(lay.length[i] for i in range(6))

    def run():
        a.stream = torch.cuda.current_stream().cuda_stream
        rc = lib.kvs_cuda_seal_blocks(C.byref(a))
        if rc:
            sys.exit("seal failed: %d" % rc)

    t = time_graph(run, runs)
    nbytes = 2 * tokens * HKV * D * 2 + blocks * sec
    return {"tokens": tokens, "seal_us": t[0], "bytes": nbytes,
            "bw_share": bw_share(nbytes, t[0], bw),
            "GBps": nbytes / (t[0] * 1e-6) / 1e9}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-gpu/kernels/libkvstash_cuda.so")
    ap.add_argument("--shapes", default="1x32768,8x32768,8x131072,32x8192")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--flags", type=int, default=0,
                    help="kvs_cuda_attn flags: 1 generic only, and those of "
                    "kernels/kernels_test.h that force a plan (2: the "
                    "3-CTA/SM build, 8: the 4-CTA one, 32: pieces, 128: "
                    "cluster, 256: no cluster)")
    ap.add_argument("--alt-flags", type=int,
                    help="also time these flags on the same calls, in turn "
                    "with --flags (an A/B in one process)")
    ap.add_argument("--no-seal", action="store_true")
    ap.add_argument("--no-tail-hint", action="store_true",
                    help="leave max_resid_rows 0 (tail sized by strides)")
    ap.add_argument("--page-stride", type=int, default=0,
                    help="bytes between pool pages (a multiple of 256, at "
                    "least a block image; default: the image rounded up)")
    ap.add_argument("--sustained", type=float, default=0.0,
                    metavar="S", help="also time both after S seconds of "
                    "back-to-back kvstash calls (the power-capped clock)")
    ap.add_argument("--cool", type=float, default=2.0, metavar="S",
                    help="seconds the GPU idles before each shape's "
                    "headline timing (default 2)")
    ap.add_argument("--diag", action="store_true",
                    help="a parts probe library (bench/attn_parts.sh): its "
                    "output is wrong on purpose, so not checked for finite "
                    "values")
    ap.add_argument("--json")
    opt = ap.parse_args()
    lib = load(opt.lib)
    page_stride = pool_page_stride(lib)
    if opt.page_stride:
        if opt.page_stride < page_stride or opt.page_stride % 256:
            sys.exit("--page-stride: a multiple of 256, at least %d"
                     % page_stride)
        page_stride = opt.page_stride
    dev = torch.cuda.get_device_name()
    bw = copy_bandwidth()
    print("device %s, D2D copy %.0f GB/s (read+write), page %d B"
          % (dev, bw / 1e9, page_stride))
    results = []
    for spec in filter(None, opt.shapes.split(",")):
        B, T = (int(x) for x in spec.split("x"))
        r = bench_shape(lib, B, T, bw, opt.runs, page_stride, opt.flags,
                        not opt.no_tail_hint, opt.alt_flags,
                        opt.sustained, opt.cool, not opt.diag)
        results.append(r)
        print("B=%-3d T=%-7d kvstash %8.1f us  sdpa %8.1f us  x%.2f  "
              "bytes %6.1f MB vs %7.1f MB  bw %3.0f%% vs %3.0f%%  "
              "(eager %.1f vs %.1f us, x%.2f)"
              % (B, T, r["kvstash_us"], r["sdpa_us"], r["speedup"],
                 r["kvstash_bytes"] / 1e6, r["sdpa_bytes"] / 1e6,
                 100 * r["kvstash_bw_share"], 100 * r["sdpa_bw_share"],
                 r["kvstash_eager_us"], r["sdpa_eager_us"],
                 r["speedup_eager"]), flush=True)
        print("             kvstash timed at %s" % state_str(
            r["kvstash_state"]), flush=True)
    seal = None if opt.no_seal else bench_seal(lib, bw, opt.runs,
                                                page_stride)
    if seal:
        print("seal %d tokens x %d heads: %.1f us, %.1f MB, %.0f GB/s, "
              "%.0f%% of copy" % (seal["tokens"], HKV, seal["seal_us"],
                                  seal["bytes"] / 1e6, seal["GBps"],
                                  100 * seal["bw_share"]))
    print("%-12s %10s %10s %7s %9s" % ("shape", "kvstash_us", "sdpa_us",
                                       "ratio", "bw_share"))
    for r in results:
        print("%-12s %10.1f %10.1f %7.2f %8.0f%%"
              % ("%dx%d" % (r["batch"], r["tokens"]), r["kvstash_us"],
                 r["sdpa_us"], r["speedup"], 100 * r["kvstash_bw_share"]))
    if opt.json:
        with open(opt.json, "w") as f:
            json.dump({"device": dev, "copy_Bps": bw, "attention": results,
                       "seal": seal}, f, indent=1)


if __name__ == "__main__":
    main()
