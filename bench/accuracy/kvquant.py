"""Fake quantization (quantize + dequantize) of a K/V cache exactly as
kvstash's CPU reference does it (kvformat/quant_internal.h, DESIGN.md §1-2),
plus the candidate format options measured here: separate bits and group
sizes for Keys and Values, a randomized Hadamard rotation per head,
attention-sink tokens kept in full precision, pre-RoPE Key quantization and
per-layer settings.

The numeric contract, per group of finite fp32 values x (metadata fp16):
  lo, hi = min x, max x                           (fp32)
  origin = fp16_rne(lo); step = fp16_rne((hi - lo) / (2^b - 1))
  constant group (hi == lo or step == 0): step = 1, codes 0
  code   = clamp(rint((x - origin) / step), 0, 2^b - 1)   (fp32, IEEE /, RNE)
  recon  = fmaf(step, code, origin)
Keys: groups along time (one channel, G consecutive tokens, aligned to the
sequence start). Values: groups along channels (one token, G consecutive
channels). step * code is exact in fp32 (an fp16 step has 11 significant
bits and code < 16), so step * code + origin rounds once, like fmaf.
"""

from dataclasses import dataclass, replace

import torch

META_BYTES = 2      # fp16 origin and step
HEADER = 512        # block header bytes (docs/FORMAT.md §2)


@dataclass(frozen=True)
class QConfig:
    """One layer's cache format. bits 16 means "keep in full precision"."""
    kbits: int = 2
    vbits: int = 2
    gk: int = 32          # Key group: tokens per (channel, group)
    gv: int = 32          # Value group: channels per (token, group)
    R: int = 128          # residual; blocks of S = R tokens
    sinks: int = 0        # first N tokens kept in fp16 beside the blocks
    sink_mode: str = "exclude"   # "exclude": sink tokens left out of their Key groups' min/max
    rot_k: bool = False   # randomized Hadamard on each head's Keys
    rot_v: bool = False   # ... and Values
    prerope: bool = False  # quantize Keys before RoPE (the kernel would apply RoPE per token)
    seed: int = 0x6B767374  # "kvst"

    def name(self):
        s = "K%dV%d gK%d gV%d" % (self.kbits, self.vbits, self.gk, self.gv)
        if self.rot_k or self.rot_v:
            s += " rot" + ("K" if self.rot_k else "") + ("V" if self.rot_v else "")
        if self.sinks:
            s += " sink%d" % self.sinks + ("" if self.sink_mode == "exclude" else "(" + self.sink_mode + ")")
        if self.prerope:
            s += " preRoPE"
        if self.R != 128:
            s += " R%d" % self.R
        return s


# ---- the group quantizer ------------------------------------------------------

def _fp16(x):
    return x.to(torch.float16).to(torch.float32)  # round to nearest even


def fake_quant(x, bits, dim):
    """Quantize+dequantize groups of x that run along `dim` (the group axis
    is `dim`, already of length G). x fp32. Returns the reconstruction."""
    if bits >= 16:
        return x
    if not torch.isfinite(x).all():
        raise ValueError("non-finite K/V (kvstash: -KVS_ENONFINITE)")
    levels = float((1 << bits) - 1)
    lo = x.amin(dim=dim, keepdim=True) + 0.0
    hi = x.amax(dim=dim, keepdim=True) + 0.0
    origin = _fp16(lo)
    step = _fp16((hi - lo) / levels)
    const = (hi == lo) | (step == 0)
    step = torch.where(const, torch.ones_like(step), step)
    code = torch.round((x - origin) / step).clamp_(0, levels)  # torch.round: half to even
    code = torch.where(const, torch.zeros_like(code), code)
    return step * code + origin


def quant_keys(k, bits, G):
    """k [..., T, D] with T % G == 0: per-channel groups of G tokens."""
    *lead, T, D = k.shape
    x = k.reshape(*lead, T // G, G, D)
    return fake_quant(x, bits, dim=-2).reshape(k.shape)


def quant_values(v, bits, G):
    """v [..., T, D]: per-token groups of G channels."""
    *lead, T, D = v.shape
    x = v.reshape(*lead, T, D // G, G)
    return fake_quant(x, bits, dim=-1).reshape(v.shape)


# ---- the rotation ---------------------------------------------------------------

_M64 = (1 << 64) - 1


def splitmix64(state):
    """One SplitMix64 step: returns (new_state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & _M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return state, z ^ (z >> 31)


def rotation_signs(seed, layer, head, kind, D):
    """The +-1 signs of one head's rotation. kind 0 = Key, 1 = Value.
    state = seed ^ (layer << 32 | head << 16 | kind); channel d takes bit
    (d % 64) of the (d // 64 + 1)-th SplitMix64 output; bit 1 means -1."""
    state = (seed ^ ((layer << 32) | (head << 16) | kind)) & _M64
    signs = []
    for _ in range((D + 63) // 64):
        state, word = splitmix64(state)
        signs.extend(-1.0 if (word >> b) & 1 else 1.0 for b in range(64))
    return torch.tensor(signs[:D], dtype=torch.float32)


def hadamard(D):
    """Sylvester Hadamard matrix, normalized (orthonormal, symmetric)."""
    H = torch.ones(1, 1)
    while H.shape[0] < D:
        H = torch.cat([torch.cat([H, H], 1), torch.cat([H, -H], 1)], 0)
    return H / (D ** 0.5)


def rotation(seed, layer, heads, kind, D):
    """[heads, D, D]: R_h = diag(s_h) H, applied as x' = x R_h (row vectors):
    flip signs, then a fast Walsh-Hadamard transform scaled by 1/sqrt(D).
    Inverse: x = x' R_h^T (FWHT, then the same sign flips)."""
    H = hadamard(D)
    return torch.stack([rotation_signs(seed, layer, h, kind, D)[:, None] * H for h in range(heads)])


# ---- what attention sees ------------------------------------------------------------

def _seal_len(T, R, what):
    return (T // R) * R if what == "k" else T


def quantized_cache(k, v, cfg, layer, k_prerope=None, rope=None):
    """Reconstructions of the sealed K and V of one layer, [H, T, D] each
    (only positions that the runtime ever seals are meaningful: Keys in
    whole R blocks, Values every token). k_prerope / rope: for pre-RoPE
    Key quantization, the Keys before RoPE and a function applying RoPE."""
    H, T, D = k.shape
    kq = v_q = None
    if cfg.kbits < 16:
        src = k_prerope if cfg.prerope else k
        Tk = _seal_len(T, cfg.R, "k")
        x = src[:, :Tk]
        if cfg.sinks and cfg.sink_mode == "exclude" and cfg.sinks < Tk:
            # sink tokens take the value of the first non-sink token, so
            # their Key groups' min/max cover the other tokens only
            x = x.clone()
            x[:, :cfg.sinks] = x[:, cfg.sinks:cfg.sinks + 1]
        if cfg.rot_k:
            Rk = rotation(cfg.seed, layer, H, 0, D)
            xq = quant_keys(x @ Rk, cfg.kbits, cfg.gk) @ Rk.transpose(1, 2)
        else:
            xq = quant_keys(x, cfg.kbits, cfg.gk)
        if cfg.prerope:
            xq = rope(xq, Tk)
        kq = torch.cat([xq, k[:, Tk:]], 1)
    else:
        kq = k
    if cfg.vbits < 16:
        if cfg.rot_v:
            Rv = rotation(cfg.seed, layer, H, 1, D)
            v_q = quant_values(v @ Rv, cfg.vbits, cfg.gv) @ Rv.transpose(1, 2)
        else:
            v_q = quant_values(v, cfg.vbits, cfg.gv)
    else:
        v_q = v
    return kq, v_q


def decode_masks(T, prefill, cfg, device=None):
    """[T, T] bool masks over (query t, key j), True where query t's decode
    step reads position j from the quantized history, following kvstash's
    `kivi` order: Keys [0, R*floor(t/R)) and Values [0, t - R) are
    quantized for a decode query t >= prefill; prefill queries see
    everything in full precision; sink positions j < N are always exact."""
    t = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    dec = t >= prefill
    kmask = dec & (j < (t // cfg.R) * cfg.R) & (j >= cfg.sinks)
    vmask = dec & (j < t - cfg.R) & (j >= cfg.sinks)
    return kmask & (cfg.kbits < 16), vmask & (cfg.vbits < 16)


def attention(q, k, v, kq, vq, kmask, vmask, scale, groups):
    """q [Hq, T, D]; k, v, kq, vq [H, T, D]; masks [T, T]. Causal attention
    where (t, j) uses kq/vq where the masks say, k/v elsewhere; one softmax
    over all keys (the probabilities are split at the Value boundary)."""
    Hq, T, D = q.shape
    rep = lambda x: x.repeat_interleave(groups, 0)
    k, v, kq, vq = rep(k), rep(v), rep(kq), rep(vq)
    s = (q @ k.transpose(1, 2))
    if kmask.any():
        s = torch.where(kmask, q @ kq.transpose(1, 2), s)
    s = s * scale
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    s = s.masked_fill(~causal, float("-inf"))
    p = torch.softmax(s, dim=-1)
    if vmask.any():
        return (p * ~vmask) @ v + (p * vmask) @ vq
    return p @ v


# ---- bytes ---------------------------------------------------------------------------

def block_bytes(cfg, H, D):
    """Bytes of one sealed block (one layer, all heads, S = R tokens):
    header, K and V codes, fp16 origins and steps (sections are 256-aligned)."""
    if cfg.kbits >= 16 and cfg.vbits >= 16:
        return cfg.R * H * D * 4  # fp16 K and V
    S = cfg.R
    pad = lambda n: -(-n // 256) * 256

    def codes(b):
        return H * S * D * b // 8 if b < 16 else H * S * D * 2

    kmeta = 2 * H * (S // cfg.gk) * D * META_BYTES if cfg.kbits < 16 else 0
    vmeta = 2 * H * S * (D // cfg.gv) * META_BYTES if cfg.vbits < 16 else 0
    parts = [codes(cfg.kbits), kmeta // 2, kmeta // 2, codes(cfg.vbits), vmeta // 2, vmeta // 2]
    return HEADER + sum(pad(p) for p in parts)


def layer_bytes(cfg, T, H, D, tail=True):
    """One layer of one request at context T: floor(T/R) blocks, the
    fp16 tail (r_K = T mod R Keys, r_V = min(T, R) Values, 512-byte header)
    and the fp16 sink rows (N Keys and N Values)."""
    R = cfg.R
    b = (T // R) * block_bytes(cfg, H, D)
    if tail:
        rk, rv = T % R, min(T, R)
        b += HEADER + H * (rk + rv) * D * 2
    b += cfg.sinks * H * D * 2 * 2
    return b


def ratio(plan, T, H, D, tail=True):
    """fp16 bytes / kvstash bytes, summed over the layers of a plan."""
    fp16 = len(plan) * T * H * D * 4
    return fp16 / sum(layer_bytes(c, T, H, D, tail) for c in plan)


def steady_ratio(plan, H, D):
    """The same for a long context: sealed blocks only (tails and sinks
    amortized away)."""
    fp16 = sum(c.R * H * D * 4 for c in plan)
    return fp16 / sum(block_bytes(c, H, D) for c in plan)


FP = QConfig(kbits=16, vbits=16)


def uniform(cfg, layers=30):
    return [cfg] * layers


__all__ = ["QConfig", "FP", "uniform", "fake_quant", "quant_keys", "quant_values", "rotation",
           "rotation_signs", "hadamard", "quantized_cache", "decode_masks", "attention",
           "block_bytes", "layer_bytes", "ratio", "steady_ratio", "replace"]
