"""Checks kvquant's fake quantization and decode masks against the real
libkvstash CPU runtime on random tensors: the dequantized sealed history
must be bit-identical, and every decode step's attention output must agree
to fp32 rounding.

    KVSTASH_LIB=../../build/lib/libkvstash.so PYTHONPATH=../../python \
        python3 check_mimic.py
"""
import sys

import numpy as np
import torch

import kvquant as kq

torch.set_num_threads(1)
from kvstash.runtime import Runtime  # noqa: E402


def one(bits, G, R=128, prefill=128, T=520, Hq=9, H=3, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    # outlier channels in K (as in real models), heavier tails in V
    k = torch.randn(H, T, D, generator=g) * (1 + 8 * (torch.rand(1, 1, D, generator=g) > 0.9))
    k[:, :, 3] += 20.0
    v = torch.randn(H, T, D, generator=g) ** 3
    q = torch.randn(Hq, T, D, generator=g)
    rt = Runtime(1, Hq, H, D, kv_dtype="f32", order="kivi", device="cpu", group=G, bits=bits,
                 residual=R, meta_dtype="f16", max_tokens=1024, pool_pages=64)
    batch = rt.batch(1)
    seq = batch.sequence()
    seq.prefill(0, np.ascontiguousarray(k[:, :prefill].numpy()), np.ascontiguousarray(v[:, :prefill].numpy()))
    outs = []
    for t in range(prefill, T):
        out = seq.step(0, np.ascontiguousarray(q[:, t].numpy()), np.ascontiguousarray(k[:, t].numpy()),
                       np.ascontiguousarray(v[:, t].numpy()))
        outs.append(torch.from_numpy(np.array(out)).reshape(Hq, D))
    lib_out = torch.stack(outs, 1)  # [Hq, T - prefill, D]

    cfg = kq.QConfig(kbits=bits, vbits=bits, gk=G, gv=G, R=R)
    kk, vv = kq.quantized_cache(k, v, cfg, 0)
    hk, hv = seq.history(0)
    hk = torch.from_numpy(np.array(hk)).permute(1, 0, 2, 3).reshape(H, -1, D)
    hv = torch.from_numpy(np.array(hv)).permute(1, 0, 2, 3).reshape(H, -1, D)
    n = hk.shape[1]
    hist_k_exact = torch.equal(hk, kk[:, :n])
    hist_v_exact = torch.equal(hv, vv[:, :n])
    km, vm = kq.decode_masks(T, prefill, cfg)
    mine = kq.attention(q, k, v, kk, vv, km, vm, D ** -0.5, Hq // H)[:, prefill:]
    err = (mine - lib_out).abs().max().item()
    # sanity: the same comparison with the Value boundary one token off
    # (the FIFO holding R instead of R + 1 values) must be far worse
    vm2 = vm | torch.roll(vm, 1, dims=1)
    bad = kq.attention(q, k, v, kk, vv, km, vm2, D ** -0.5, Hq // H)[:, prefill:]
    err_bad = (bad - lib_out).abs().max().item()
    rt.close()
    print("b=%d G=%2d R=%d: history K bit-exact %s, V bit-exact %s (%d tokens); "
          "decode output max |diff| %.2e over %d steps (Value boundary off by one: %.2e)"
          % (bits, G, R, hist_k_exact, hist_v_exact, n, err, T - prefill, err_bad))
    return hist_k_exact and hist_v_exact and err < 1e-4


if __name__ == "__main__":
    ok = True
    for bits, G, R in [(2, 32, 128), (2, 8, 128), (4, 32, 128), (2, 32, 64), (4, 16, 64)]:
        ok &= one(bits, G, R)
    print("OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)
