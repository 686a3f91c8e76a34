#!/usr/bin/env python3
"""attach_bench.py - a cached prefix made ready to decode from a kvstashd,
against moving it as fp16 and against recomputing it; and decode
throughput of transformers' generate() through kvstash against its
default cache.  Self-contained: it starts its own kvstashd from the build
directory (loopback, a free port, shared memory allowed, a store and a
key in a temporary directory) and stops it at the end.

On a GPU machine, from the project root (a build with -Dcuda=enabled):

    python3 bench/attach_bench.py --build build-gpu --out "$OUT"

1. time to ready (`kvstash bench attach`): a prefix of --tokens (32768) of
   a Llama-3-8B-shaped model (32 layers, 8 KV heads, D=128, fp16) held by
   the daemon: the decode runtime attaching its 2-bit blocks into GPU
   pages, beside the same prefix moved as fp16 K/V objects through the
   same daemon into GPU buffers (median of --runs after a warm-up);
2. recompute: the same prefix prefilled by a randomly initialised
   transformers LlamaForCausalLM of that shape (fp16, SDPA, on the GPU,
   torch.no_grad), median of --recompute-runs after a short warm-up;
3. generate: --batch (8) rows sharing that prefix, each with 128 tokens
   of its own, decoding --new-tokens: kvstash.transformers (the rows
   attach the prefix the model's own prefill published through the
   daemon, then decode through the fused kernel) against transformers'
   DynamicCache with SDPA holding the recomputed prefix; decode tokens
   per second between the first and the last generated token.  Where
   the card cannot hold the default cache of all layers, the generate
   part runs on the first --gen-layers layers and says so.

Writes attach_bench.json and attach_bench.png (matplotlib) to --out,
with the machine, the date and the commit.  --tiny runs a tiny model on
the CPU instead (checks the script end to end; its figures mean
nothing).  Exit status: 0, 1 on a failure, 2 on a usage error.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
R = 128  # tokens of a block (S = R)
SUFFIX = 128  # tokens of its own each generate row adds to the prefix

LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                 num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                 rope_theta=500000.0, rms_norm_eps=1e-5)
TINY = dict(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0, rms_norm_eps=1e-5)


class Failure(Exception):
    pass


def log(msg):
    print("attach_bench: %s" % msg, flush=True)


def parse(argv):
    def count(text):
        try:
            v = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError("'%s' is not a decimal number" % text)
        if v < 1:
            raise argparse.ArgumentTypeError("must be at least 1")
        return v

    p = argparse.ArgumentParser(
        prog="attach_bench.py",
        description="Time to ready of a cached prefix from a kvstashd (2-bit attach, fp16, "
                    "recompute) and decode tokens/s of generate() through kvstash against "
                    "transformers' default cache.")
    p.add_argument("--build", default="build-gpu",
                   help="meson build directory holding tools/kvstash, server/kvstashd and "
                        "lib/libkvstash.so (default build-gpu)")
    p.add_argument("--out", default=os.environ.get("OUT") or "attach-bench-out",
                   help="where the JSON and the PNG go (default $OUT)")
    p.add_argument("--tokens", type=count, default=None,
                   help="tokens of the cached prefix, a multiple of 128 (32768)")
    p.add_argument("--layers", type=count, default=None, help="layers of the model (32)")
    p.add_argument("--runs", type=count, default=None, help="timed runs of each path (5)")
    p.add_argument("--recompute-runs", type=count, default=None, help="timed prefills (2)")
    p.add_argument("--batch", type=count, default=None, help="rows of generate() (8)")
    p.add_argument("--new-tokens", type=count, default=None,
                   help="tokens each row generates (32)")
    p.add_argument("--gen-layers", type=count, default=None,
                   help="layers of the generate part (default: all that fit on the card)")
    p.add_argument("--skip-generate", action="store_true", help="only the time to ready")
    p.add_argument("--tiny", action="store_true",
                   help="a tiny model on the CPU: checks the script; its figures mean nothing")
    p.add_argument("--commit", default=None, help="the commit measured (default: git's HEAD)")
    a = p.parse_args(argv)
    tiny = a.tiny
    defaults = dict(tokens=1024 if tiny else 32768, layers=2 if tiny else 32,
                    runs=2 if tiny else 5, recompute_runs=1 if tiny else 2,
                    batch=2 if tiny else 8, new_tokens=4 if tiny else 32)
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.tokens % R or a.tokens < 2 * R:
        p.error("--tokens must be a multiple of %d, at least %d" % (R, 2 * R))
    if a.gen_layers is not None and a.gen_layers > a.layers:
        p.error("--gen-layers must not exceed --layers")
    if a.new_tokens < 2:
        p.error("--new-tokens must be at least 2 (tokens/s is measured between tokens)")
    return a


# ---- the daemon ---------------------------------------------------------------


class Daemon:
    """kvstashd from the build directory on 127.0.0.1 with a free port."""

    def __init__(self, exe, tmp, dram, tail, nvme):
        self.tmp = tmp
        self.key = os.path.join(tmp, "key")
        with open(self.key, "w") as f:
            f.write("bench %s\n" % os.urandom(32).hex())
        os.chmod(self.key, 0o600)
        ready = os.path.join(tmp, "ready")
        self.log = os.path.join(tmp, "kvstashd.log")
        args = [exe, "--listen", "127.0.0.1:0", "--dir", os.path.join(tmp, "store"),
                "--auth-key-file", self.key, "--ready-file", ready, "--log-file", self.log,
                "--log-level", "warn", "--shared-memory", "--dram-capacity", str(dram),
                "--nvme-capacity", str(nvme), "--segment-size", "64M",
                "--tail-capacity", str(tail)]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            if os.path.exists(ready):
                with open(ready) as f:
                    words = f.read().split()
                if words:
                    self.port = int(words[0])
                    break
            if self.proc.poll() is not None:
                raise Failure("kvstashd did not start (exit %d): %s"
                              % (self.proc.returncode, self.tail_log()))
            if time.monotonic() > deadline:
                raise Failure("kvstashd not ready after 60 s")
            time.sleep(0.05)
        self.address = "127.0.0.1:%d" % self.port

    def tail_log(self):
        try:
            with open(self.log) as f:
                lines = [l.strip() for l in f if l.strip()]
            return lines[-1] if lines else ""
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---- the parts -------------------------------------------------------------------


def time_to_ready(a, kvstash_exe, daemon, shape, device):
    args = [kvstash_exe, "bench", "attach", "--server", daemon.address, "--auth-key-file",
            daemon.key, "--tokens", a.tokens, "--layers", a.layers, "--kv-heads",
            shape["num_key_value_heads"], "--q-heads", shape["num_attention_heads"],
            "--head-dim", shape["hidden_size"] // shape["num_attention_heads"], "--runs",
            a.runs, "--device", device, "--shared-memory", "--json"]
    p = subprocess.run([str(x) for x in args], capture_output=True, text=True, timeout=420)
    if p.returncode != 0:
        raise Failure("kvstash bench attach: exit %d: %s" % (p.returncode, p.stderr.strip()))
    return json.loads(p.stdout)


def build_model(torch, transformers, shape, layers, tokens, dtype, device):
    cfg = transformers.LlamaConfig(max_position_embeddings=tokens + 4096,
                                   **dict(shape, num_hidden_layers=layers))
    torch.manual_seed(0)
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": dtype}
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa",
                                                              **dtype_kw)
    return model.to(device=device, dtype=dtype).eval()


def set_attention(model, name):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name


def sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def recompute(a, torch, transformers, model, prefix, device):
    """Median seconds of prefilling the prefix; the last run's cache."""
    with torch.no_grad():
        model.model(prefix[:, :min(prefix.shape[1], 2048)], use_cache=True)  # warm-up
        sync(torch, device)
        times, cache = [], None
        for _ in range(a.recompute_runs):
            cache = None
            if device == "cuda":
                torch.cuda.empty_cache()
            cache = transformers.DynamicCache()
            sync(torch, device)
            t0 = time.perf_counter()
            model.model(prefix, past_key_values=cache, use_cache=True)
            sync(torch, device)
            times.append(time.perf_counter() - t0)
    return statistics.median(times), times, cache


def cache_tensors(cache, layer):
    """(keys, values) of a DynamicCache layer, across transformers versions."""
    if hasattr(cache, "layers"):
        return cache.layers[layer].keys, cache.layers[layer].values
    return cache.key_cache[layer], cache.value_cache[layer]


class Clock:
    """A logits processor that notes when each token's logits are ready."""

    def __init__(self, torch, device):
        self.torch, self.device, self.t = torch, device, []

    def __call__(self, input_ids, scores):
        sync(self.torch, self.device)
        self.t.append(time.perf_counter())
        return scores


def decode_rate(a, torch, transformers, model, ids, cache, device):
    clock = Clock(torch, device)
    processors = transformers.LogitsProcessorList([clock])
    with torch.no_grad():
        t0 = time.perf_counter()
        model.generate(ids, past_key_values=cache, max_new_tokens=a.new_tokens,
                       min_new_tokens=a.new_tokens, do_sample=False, logits_processor=processors,
                       pad_token_id=0)
        sync(torch, device)
        total = time.perf_counter() - t0
    steps = len(clock.t) - 1
    span = clock.t[-1] - clock.t[0]
    return dict(tokens_per_s=ids.shape[0] * steps / span, decode_s=span, steps=steps,
                generate_s=total, first_token_s=clock.t[0] - t0)


def gen_layers_that_fit(a, torch, model, shape, device):
    """Layers the default cache of the generate part can hold on this card."""
    if a.gen_layers is not None or device != "cuda":
        return a.gen_layers or a.layers
    total = torch.cuda.get_device_properties(0).total_memory
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    head_dim = shape["hidden_size"] // shape["num_attention_heads"]
    ctx = a.tokens + SUFFIX + a.new_tokens
    per_layer = a.batch * ctx * shape["num_key_value_heads"] * head_dim * 2 * 2
    # SDPA repeats K/V to every query head, for one layer at a time
    transient = 2 * a.batch * ctx * shape["num_attention_heads"] * head_dim * 2 + (3 << 30)
    room = 0.92 * total - weights - transient
    return max(1, min(a.layers, int(room // per_layer)))


def generate_part(a, torch, transformers, kvstash, kt, model, prefix, ref_cache, client,
                  shape, dtype, device):
    out = {}
    layers = gen_layers_that_fit(a, torch, model, shape, device)
    if layers < a.layers:
        log("the default cache of %d rows x %d tokens x %d layers does not fit: the generate "
            "part runs on the first %d layers" % (a.batch, a.tokens, a.layers, layers))
        model.model.layers = model.model.layers[:layers]
        model.config.num_hidden_layers = layers
        if getattr(model.config, "layer_types", None):
            model.config.layer_types = model.config.layer_types[:layers]
    out["layers"] = layers
    g = torch.Generator().manual_seed(7)
    suffix = torch.randint(3, shape["vocab_size"], (a.batch, SUFFIX), generator=g)
    ids = torch.cat([prefix.cpu().repeat(a.batch, 1), suffix], dim=1).to(device)
    max_tokens = a.tokens + SUFFIX + a.new_tokens + 2 * R

    # kvstash: the model's own prefill of the prefix publishes it ...
    set_attention(model, kt.ATTN_IMPLEMENTATION)
    publisher = kt.Cache(model.config, client=client, max_tokens=max_tokens)
    publisher.set_prompt(prefix, dtype=dtype, device=torch.device(device))
    with torch.no_grad():
        sync(torch, device)
        t0 = time.perf_counter()
        model.model(prefix, past_key_values=publisher, use_cache=True)
        publisher.rt.flush()
        sync(torch, device)
        out["kvstash_prefill_publish_s"] = time.perf_counter() - t0
    out["published_blocks"] = publisher.rt.stats()["published"]
    publisher.close()
    # ... and every row attaches it, then decodes through the fused kernel
    cache = kt.Cache(model.config, client=client, max_tokens=max_tokens)
    t0 = time.perf_counter()
    attached = cache.attach(ids, dtype=dtype, device=torch.device(device))
    sync(torch, device)
    out["kvstash_attach_rows_s"] = time.perf_counter() - t0
    if attached != a.tokens:
        raise Failure("the rows attached %d of the %d prefix tokens" % (attached, a.tokens))
    out["kvstash"] = decode_rate(a, torch, transformers, model, ids, cache, device)
    cache.close()
    del cache
    if device == "cuda":
        torch.cuda.empty_cache()

    # transformers' default cache with SDPA, holding the recomputed prefix
    set_attention(model, "sdpa")
    held = transformers.DynamicCache()
    for layer in range(layers):
        k, v = cache_tensors(ref_cache, layer)
        held.update(k.expand(a.batch, -1, -1, -1).contiguous(),
                    v.expand(a.batch, -1, -1, -1).contiguous(), layer)
    out["default"] = decode_rate(a, torch, transformers, model, ids, held, device)
    del held
    out["decode_speedup"] = out["kvstash"]["tokens_per_s"] / out["default"]["tokens_per_s"]
    return out


# ---- results ----------------------------------------------------------------------


def commit_of(a):
    if a.commit:
        return a.commit
    try:
        p = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip()
    except OSError:
        pass
    return os.environ.get("KVSTASH_COMMIT", "unknown")


def plot(result, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is missing: no plot")
        return False
    ready = result["time_to_ready"]
    gen = result.get("generate")
    fig, axes = plt.subplots(1, 2 if gen else 1, figsize=(12 if gen else 6.5, 4.8), squeeze=False)
    ax = axes[0][0]
    names = ["kvstash attach\n(2-bit)", "same path,\nfp16 K/V", "recompute\n(transformers)"]
    secs = [ready["attach_2bit_s"], ready["attach_fp16_s"], result["recompute"]["median_s"]]
    bars = ax.bar(names, [s * 1e3 for s in secs], color=["#2a7", "#888", "#c44"])
    ax.set_yscale("log")
    ax.set_ylabel("request to ready to decode (ms, log)")
    ax.set_title("%d-token prefix, %d layers, %d KV heads, D=%d"
                 % (ready["tokens"], ready["layers"], ready["kv_heads"], ready["head_dim"]))
    for b, s in zip(bars, secs):
        ax.annotate(("%.1f ms" if s < 0.01 else "%.0f ms") % (s * 1e3),
                    (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom")
    if gen:
        ax = axes[0][1]
        rates = [gen["kvstash"]["tokens_per_s"], gen["default"]["tokens_per_s"]]
        bars = ax.bar(["kvstash.transformers\n(2-bit, fused)", "DynamicCache\n+ SDPA"], rates,
                      color=["#2a7", "#888"])
        ax.set_ylabel("decode tokens / s")
        ax.set_title("generate(), batch %d, %d-token context, %d layers"
                     % (result["batch"], ready["tokens"] + SUFFIX, gen["layers"]))
        for b, r in zip(bars, rates):
            ax.annotate("%.0f" % r, (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom")
    fig.suptitle("%s, %s, commit %s%s" % (result["machine"], result["date"][:10], result["commit"],
                                          " (tiny CPU dry run)" if result["tiny"] else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv):
    a = parse(argv)
    build = os.path.abspath(a.build)
    kvstash_exe = os.path.join(build, "tools", "kvstash")
    kvstashd_exe = os.path.join(build, "server", "kvstashd")
    lib = os.path.join(build, "lib", "libkvstash.so")
    for path in (kvstash_exe, kvstashd_exe, lib):
        if not os.path.exists(path):
            print("attach_bench.py: %s is missing (build with meson and ninja first)" % path,
                  file=sys.stderr)
            return 1
    os.environ["KVSTASH_LIB"] = lib
    sys.path.insert(0, os.path.join(ROOT, "python"))
    # transformers' deprecation notices say nothing about the figures
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        import torch
        import transformers
    except ImportError as e:
        print("attach_bench.py: needs torch and transformers: %s" % e, file=sys.stderr)
        return 1
    import kvstash
    import kvstash.transformers as kt

    device = "cuda" if torch.cuda.is_available() and not a.tiny else "cpu"
    if not a.tiny and device != "cuda":
        print("attach_bench.py: no CUDA device (--tiny runs on the CPU)", file=sys.stderr)
        return 1
    dtype = torch.float16 if device == "cuda" else torch.float32
    shape = TINY if a.tiny else LLAMA3_8B
    kv, heads = shape["num_key_value_heads"], shape["num_attention_heads"]
    head_dim = shape["hidden_size"] // heads
    blocks = a.layers * (a.tokens // R + 2)
    bytes_2bit = blocks * (kv * R * head_dim // 2 + 2 * kv * head_dim * (R // 32) * 4 + 4096)
    bytes_fp16 = a.layers * a.tokens * kv * head_dim * 4 * 1.02
    result = dict(
        machine="%s, %s" % (platform.node(), torch.cuda.get_device_name(0)
                            if device == "cuda" else platform.processor() or "CPU"),
        date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        commit=commit_of(a), tiny=a.tiny, device=device, batch=a.batch,
        model=dict(shape, num_hidden_layers=a.layers, dtype=str(dtype).replace("torch.", "")),
        versions=dict(torch=torch.__version__, transformers=transformers.__version__))
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="kvstash-attach-bench-")
    daemon = None
    t_start = time.perf_counter()
    try:
        daemon = Daemon(kvstashd_exe, tmp, dram=int(3 * bytes_2bit + (256 << 20)),
                        tail=int(bytes_fp16 + (256 << 20)), nvme=1 << 30)
        log("kvstashd on %s; %s, torch %s, transformers %s" % (
            daemon.address, result["machine"], torch.__version__, transformers.__version__))
        result["time_to_ready"] = time_to_ready(a, kvstash_exe, daemon, dict(
            shape, num_hidden_layers=a.layers), device)
        ready = result["time_to_ready"]
        log("2-bit attach %.1f ms, fp16 %.1f ms (median of %d)" % (
            ready["attach_2bit_s"] * 1e3, ready["attach_fp16_s"] * 1e3, a.runs))

        model = build_model(torch, transformers, shape, a.layers, a.tokens, dtype, device)
        g = torch.Generator().manual_seed(5)
        prefix = torch.randint(3, shape["vocab_size"], (1, a.tokens), generator=g).to(device)
        med, runs, ref_cache = recompute(a, torch, transformers, model, prefix, device)
        result["recompute"] = dict(median_s=med, runs_s=runs)
        log("recompute %.1f ms (median of %d)" % (med * 1e3, a.recompute_runs))
        result["ratios"] = dict(
            fp16_over_attach=ready["attach_fp16_s"] / ready["attach_2bit_s"],
            recompute_over_attach=med / ready["attach_2bit_s"],
            targets=dict(fp16_over_attach=4.0, recompute_over_attach=20.0))
        if not a.skip_generate:
            client = kvstash.Client(daemon.address, daemon.key, shared_memory=True,
                                    timeout_ms=120000)
            result["generate"] = generate_part(a, torch, transformers, kvstash, kt, model, prefix,
                                               ref_cache, client, shape, dtype, device)
            client.close()
            gen = result["generate"]
            log("decode at batch %d: kvstash %.1f tokens/s, default cache %.1f tokens/s (%d layers)"
                % (a.batch, gen["kvstash"]["tokens_per_s"], gen["default"]["tokens_per_s"],
                   gen["layers"]))
    except Failure as e:
        print("attach_bench.py: %s" % e, file=sys.stderr)
        return 1
    finally:
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    result["wall_s"] = time.perf_counter() - t_start
    ratios = result["ratios"]
    print("time to ready, %d-token prefix (%s):" % (a.tokens, device))
    print("  kvstash 2-bit attach  %9.1f ms" % (ready["attach_2bit_s"] * 1e3))
    print("  fp16 through kvstashd %9.1f ms   %.2fx the attach (target >= 4)"
          % (ready["attach_fp16_s"] * 1e3, ratios["fp16_over_attach"]))
    print("  recompute (prefill)   %9.1f ms   %.2fx the attach (target >= 20)"
          % (result["recompute"]["median_s"] * 1e3, ratios["recompute_over_attach"]))
    if "generate" in result:
        gen = result["generate"]
        print("decode, batch %d, %d-token context, %d layers:" % (a.batch, a.tokens + SUFFIX,
                                                                  gen["layers"]))
        print("  kvstash.transformers  %9.1f tokens/s" % gen["kvstash"]["tokens_per_s"])
        print("  DynamicCache + SDPA   %9.1f tokens/s   kvstash %.2fx"
              % (gen["default"]["tokens_per_s"], gen["decode_speedup"]))
    with open(os.path.join(a.out, "attach_bench.json"), "w") as f:
        json.dump(result, f, indent=2)
    plot(result, os.path.join(a.out, "attach_bench.png"))
    print("wrote %s/attach_bench.json%s (%.0f s)" % (
        a.out, " and attach_bench.png" if os.path.exists(os.path.join(a.out, "attach_bench.png"))
        else "", result["wall_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
