"""The CUDA kernels and the CUDA runtime from Python, with torch CUDA
tensors: the seal kernel's blocks dequantize exactly as the CPU runtime's
blocks of the same tokens; the fused attention over residuals alone
equals a softmax reference; the CUDA runtime steps within 1e-3 of the CPU
runtime.  Skips without torch, a CUDA build of libkvstash or a device."""

import numpy as np
import pytest

import kvstash

torch = pytest.importorskip("torch")
if not (torch.cuda.is_available() and kvstash.kernels.available()):
    pytest.skip("no CUDA device, or libkvstash built without CUDA", allow_module_level=True)

KV, HQ, D, R = 2, 8, 128, 128


def rel_err(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def test_seal_matches_cpu_blocks():
    g = torch.Generator().manual_seed(0)
    k = torch.randn(KV, R, D, generator=g).half()
    v = torch.randn(KV, R, D, generator=g).half()
    k[:, :, 5] *= 8
    rt = kvstash.Runtime(1, HQ, KV, D, kv_dtype="f16", device="cpu", residual=R)
    seq = rt.batch(1).sequence()
    seq.prefill(0, k.numpy(), v.numpy())
    ck, cv = kvstash.Block(seq.block(0, 0)).dequantize()
    s = kvstash.kernels.shape(KV, D, span=R, residual=R)
    images = kvstash.kernels.seal(k[None].cuda(), v[None].cuda(), s)
    gk, gv = kvstash.kernels.dequantize(images, s)
    assert torch.equal(gk[0].cpu(), torch.from_numpy(ck))
    assert torch.equal(gv[0].cpu(), torch.from_numpy(cv))
    rt.close()


def test_attend_residuals_only():
    g = torch.Generator().manual_seed(1)
    T = 37
    q = torch.randn(1, HQ, D, generator=g).half().cuda()
    k = torch.randn(1, KV, R + 2, D, generator=g).half().cuda()
    v = torch.randn(1, KV, 2 * R + 2, D, generator=g).half().cuda()
    s = kvstash.kernels.shape(KV, D, span=R, residual=R)
    _, stride = kvstash.kernels.page_size(s)
    pool = torch.zeros(1, stride, dtype=torch.uint8, device="cuda")
    table = torch.zeros(1, 1, dtype=torch.int32, device="cuda")
    seqs = torch.tensor([[0, 0, T, T, 0, 0]], dtype=torch.int32, device="cuda")
    out = kvstash.kernels.attend(q, pool, table, seqs, k, v, s, out_dtype="f32")
    kr = k[0, :, :T].float().repeat_interleave(HQ // KV, 0)
    vr = v[0, :, :T].float().repeat_interleave(HQ // KV, 0)
    p = torch.softmax((q[0].float()[:, None, :] * kr).sum(-1) / D ** 0.5, -1)
    want = (p[:, :, None] * vr).sum(1)
    assert rel_err(out[0], want) < 1e-3


def test_cuda_runtime_matches_cpu():
    g = torch.Generator().manual_seed(2)
    rts = [kvstash.Runtime(2, HQ, KV, D, kv_dtype="f16", out_dtype="f32", device=d,
                           residual=R, max_tokens=1024) for d in ("cuda", "cpu")]
    seqs = [rt.batch(1).sequence() for rt in rts]
    for layer in range(2):
        k = torch.randn(KV, 300, D, generator=g).half()
        v = torch.randn(KV, 300, D, generator=g).half()
        seqs[0].prefill(layer, k.cuda(), v.cuda())
        seqs[1].prefill(layer, k.numpy(), v.numpy())
    for _ in range(150):
        for layer in range(2):
            q = torch.randn(HQ, D, generator=g).half()
            k = torch.randn(KV, D, generator=g).half()
            v = torch.randn(KV, D, generator=g).half()
            got = seqs[0].step(layer, q.cuda(), k.cuda(), v.cuda())
            want = seqs[1].step(layer, q.numpy(), k.numpy(), v.numpy())
            assert rel_err(got.cpu(), torch.from_numpy(want)) < 1e-3
    rts[0].sync()
    for i in range(seqs[0].block_count(1)):
        assert seqs[0].block(1, i) == seqs[1].block(1, i)
    for rt in rts:
        rt.close()
