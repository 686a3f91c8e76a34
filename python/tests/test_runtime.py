"""The bindings on the CPU device with NumPy arrays: a batch step equals each
sequence stepped alone; the tail handoff and a prefix attach through a
local block store decode bit for bit as the sequence that computed it all;
namespaces do not share; blocks open, verify and dequantize as the runtime
holds them; bad arrays are refused with a clear error."""

import numpy as np
import pytest

import kvstash
from kvstash import _arrays

L, HQ, KV, D, R = 2, 4, 2, 64, 32


def runtime(dtype="f32", **kw):
    kw.setdefault("max_tokens", 1024)
    kw.setdefault("pool_pages", 256)
    return kvstash.Runtime(L, HQ, KV, D, kv_dtype=dtype, out_dtype="f32", device="cpu",
                           residual=R, model_id="py-test", **kw)


def token(seed, layer, pos, dtype=np.float32):
    """q [HQ][D], k, v [KV][D] of one position: the same for every caller."""
    rng = np.random.default_rng([seed, layer, pos])
    q = (rng.standard_normal((HQ, D)) * 1.5).astype(dtype)
    k = rng.standard_normal((KV, D))
    k[:, ::13] *= 6.0  # channel outliers, as real Keys have
    v = rng.standard_normal((KV, D))
    return q, k.astype(dtype), v.astype(dtype)


def prefill(seq, seed, first, n, dtype=np.float32):
    for layer in range(L):
        ks, vs = [], []
        for pos in range(first, first + n):
            _, k, v = token(seed, layer, pos, dtype)
            ks.append(k)
            vs.append(v)
        seq.prefill(layer, np.stack(ks, axis=1), np.stack(vs, axis=1))


def decode(seq, seed, first, steps, dtype=np.float32):
    outs = []
    for pos in range(first, first + steps):
        for layer in range(L):
            q, k, v = token(seed, layer, pos, dtype)
            outs.append(seq.step(layer, q, k, v))
        seq.append_ids([pos % 1000])
    return np.stack(outs)


def ids_of(seed, n):
    return np.random.default_rng(seed).integers(0, 32000, n)


def test_batch_equals_alone():
    rt = runtime()
    batch = rt.batch(3)
    prompts, seeds = [3, 45, 100], [1, 2, 3]
    seqs = [batch.sequence() for _ in prompts]
    alone = [rt.batch(1).sequence() for _ in prompts]
    for s, a, n, seed in zip(seqs, alone, prompts, seeds):
        prefill(s, seed, 0, n)
        prefill(a, seed, 0, n)
    assert len(batch) == 3 and batch[1] is seqs[1] and seqs[2].index == 2
    for step in range(40):
        for layer in range(L):
            qs, ks, vs = zip(*(token(seed, layer, n + step) for n, seed in zip(prompts, seeds)))
            out = batch.step(layer, np.stack(qs), np.stack(ks), np.stack(vs))
            for i, a in enumerate(alone):
                np.testing.assert_array_equal(out[i], a.step(layer, qs[i], ks[i], vs[i]))
    assert seqs[2].tokens(1) == 140 and seqs[2].block_count(1) == 140 // R
    rt.close()


def test_handoff_bit_exact(tmp_path):
    store = kvstash.BlockStore.local(tmp_path / "store", dram=64 << 20, nvme=64 << 20, segment=8 << 20)
    pre, dec = runtime("f16", store=store, namespace="t"), runtime("f16", store=store, namespace="t")
    a, b = pre.batch(1).sequence(), dec.batch(1).sequence()
    ids = ids_of(5, 150)
    a.append_ids(ids)
    prefill(a, 9, 0, 150, np.float16)
    a.export_tail(b"r" * 32)
    b.import_tail(ids, b"r" * 32)
    assert b.tokens(0) == 150 and b.block_count(1) == 150 // R
    np.testing.assert_array_equal(decode(b, 9, 150, 40, np.float16), decode(a, 9, 150, 40, np.float16))
    with pytest.raises(kvstash.KvsError) as e:
        dec.batch(1).sequence().import_tail(ids, b"r" * 32)
    assert e.value.code == kvstash._lib.ENOTFOUND
    pre.close()
    dec.close()
    store.close()


def test_prefix_attach_and_namespaces(tmp_path):
    store = kvstash.BlockStore.local(tmp_path / "store", dram=64 << 20, nvme=64 << 20, segment=8 << 20)
    ids = ids_of(7, 200)
    writer = runtime(store=store, namespace="a")
    first = writer.batch(1).sequence()
    first.append_ids(ids)
    prefill(first, 3, 0, 200)
    first.publish()
    writer.flush()
    assert writer.stats()["published"] == (200 // R) * L
    want = decode(first, 3, 200, 30)

    reader = runtime(store=store, namespace="a")
    assert reader.lookup_prefix(ids) == 192
    seq = reader.batch(1).sequence()
    attached = seq.attach_prefix(ids)
    assert attached == 160  # the last R tokens stay to compute
    assert seq.attach_finish() == 160
    prefill(seq, 3, attached, 200 - attached)
    np.testing.assert_array_equal(decode(seq, 3, 200, 30), want)
    for i in range(200 // R):
        assert seq.block(1, i) == first.block(1, i)

    other = runtime(store=store, namespace="b")
    assert other.lookup_prefix(ids) == 0
    assert other.batch(1).sequence().attach_prefix(ids) == 0
    for rt in (writer, reader, other):
        rt.close()
    store.close()


def test_block_inspection():
    rt = runtime("f16", namespace="n")
    seq = rt.batch(1).sequence()
    seq.append_ids(ids_of(1, 70))
    prefill(seq, 4, 0, 70, np.float16)
    data = seq.block(0, 1)
    kvstash.verify(data)
    blk = kvstash.Block(data)
    assert blk.kind == "block" and blk.layer == 0 and blk.first_pos == R
    assert blk.shape["span"] == R and blk.shape["bits"] == 2
    assert blk.model_fp == rt.model_fp.hex()
    k, v = blk.dequantize()
    hk, hv = seq.history(0, 1, 1, dtype="f32")
    np.testing.assert_array_equal(k, hk[0])
    np.testing.assert_array_equal(v, hv[0])
    # the block's id is the span id of its tokens after span 0
    span0 = kvstash.span_id("n", rt.model_fp, None, ids_of(1, 70)[:R])
    assert blk.parent_id == span0.hex()
    assert blk.block_id == kvstash.span_id("n", rt.model_fp, span0, ids_of(1, 70)[R:2 * R]).hex()

    bad = bytearray(data)
    bad[600] ^= 0x20
    with pytest.raises(kvstash.KvsError) as e:
        kvstash.verify(bytes(bad))
    assert "checksum" in str(e.value)

    tail = kvstash.Block(seq.tail(1))
    assert tail.kind == "tail" and (tail.r_k, tail.r_v) == (70 % R, R)
    tk, tv = tail.residuals()
    _, k_last, v_last = token(4, 1, 69, np.float16)
    np.testing.assert_array_equal(tk[:, -1, :], k_last.astype(np.float32))
    np.testing.assert_array_equal(tv[:, -1, :], v_last.astype(np.float32))
    rt.close()


def test_bf16_bits_and_dlpack():
    rt = runtime("bf16")
    seq = rt.batch(1).sequence()
    k = _arrays.f32_to_bf16(np.random.default_rng(0).standard_normal((KV, 40, D)))
    seq.prefill(0, k, k)

    class Producer:
        """Anything that speaks DLPack."""

        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    q = _arrays.f32_to_bf16(np.ones((HQ, D), np.float32))
    row = _arrays.f32_to_bf16(np.ones((KV, D), np.float32))
    out = seq.step(0, Producer(q), Producer(row), Producer(row))
    assert out.shape == (HQ, D) and np.isfinite(np.asarray(out)).all()
    rt.close()


def test_bad_arrays():
    rt = runtime()
    seq = rt.batch(1).sequence()
    q, k, v = token(0, 0, 0)
    with pytest.raises(TypeError):
        seq.step(0, q.astype(np.float16), k, v)
    with pytest.raises(ValueError):
        seq.step(0, q[:2], k, v)
    k_bad = k.copy()
    k_bad[0, 0] = np.nan
    with pytest.raises(kvstash.KvsError) as e:
        seq.step(0, q, k_bad, v)
    assert e.value.code == kvstash._lib.ENONFINITE
    assert seq.tokens(0) == 0
    with pytest.raises(kvstash.KvsError):
        kvstash.Runtime(L, 3, KV, D, device="cpu")
    rt.close()


def test_torch_cpu_tensors_match_numpy():
    torch = pytest.importorskip("torch")
    rt = runtime("f16")
    a, b = rt.batch(1).sequence(), rt.batch(1).sequence()
    prefill(a, 2, 0, 50, np.float16)
    for layer in range(L):
        ks = np.stack([token(2, layer, p, np.float16)[1] for p in range(50)], axis=1)
        vs = np.stack([token(2, layer, p, np.float16)[2] for p in range(50)], axis=1)
        b.prefill(layer, torch.from_numpy(ks)[None][0], torch.from_numpy(vs))
    q, k, v = token(2, 0, 50, np.float16)
    want = a.step(0, q, k, v)
    got = b.step(0, torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v))
    assert isinstance(got, torch.Tensor)
    np.testing.assert_array_equal(got.numpy(), want)
    rt.close()
