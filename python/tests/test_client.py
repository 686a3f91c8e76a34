"""kvstash.Client against a real kvstashd (conftest.Daemon): put, get,
exists, lookup, delete and the tail handoff through the bindings; the
runtime publishing to and attaching from the daemon (a Client as its
store), across two runtimes, bit for bit as the recompute, with a block
deleted between the lookup and the fetch degrading to a shorter prefix;
tenants in other namespaces see nothing; bad input is a clear error."""

import numpy as np
import pytest

import kvstash
from test_runtime import R, L, decode, ids_of, prefill, runtime


def blocks_of(seed, n_spans, namespace="n"):
    """Encoded blocks of a prompt's spans (layers 0 and 1) and their keys."""
    rt = runtime("f16", namespace=namespace)
    seq = rt.batch(1).sequence()
    ids = ids_of(seed, n_spans * R)
    seq.append_ids(ids)
    prefill(seq, seed, 0, n_spans * R, np.float16)
    objs, keys = [], []
    for layer in range(L):
        for i in range(n_spans):
            data = seq.block(layer, i)
            blk = kvstash.Block(data)
            objs.append(data)
            keys.append((bytes.fromhex(blk.block_id), layer))
    rt.close()
    return objs, keys


def test_put_get_exists_delete(daemon):
    c = daemon.client()
    objs, keys = blocks_of(1, 3)
    assert c.put(objs) == [0] * len(objs)
    assert c.exists(keys) == [True] * len(keys)
    got = c.get(keys + [(b"\x01" * 32, 0)])
    assert got[:-1] == objs and got[-1] is None
    assert c.get(keys[:1], cap=1024) == objs[:1]  # grows to what it needs
    spans = [k[0] for k in keys[:3]]
    assert c.lookup(spans, [0, 1]) == 3
    assert c.delete([keys[4]]) == [True]
    assert c.delete([keys[4]]) == [False]
    assert c.lookup(spans, [0, 1]) == 1  # layer 1 of span 1 is gone
    # another namespace sees none of it; a tenant bound to the same one does
    assert daemon.client("bob").exists(keys) == [False] * len(keys)
    assert daemon.client("carol").exists(keys[:1]) == [True]
    st = c.stat()
    assert st["store"]["hits"] >= len(objs) and st["connections"] >= 1
    assert c.limits()["max_batch"] > 0
    # a corrupt block is refused by the daemon, alone
    bad = bytearray(objs[0])
    bad[600] ^= 0x20
    res = c.put([bytes(bad), objs[1]])
    assert res[0] < 0 and res[1] == 0
    c.close()
    with pytest.raises(ValueError):
        c.exists(keys)


def test_spill_and_back(tmp_path):
    """Blocks beyond the daemon's DRAM tier go to its NVMe tier and come
    back from there; its counters say so."""
    from conftest import Daemon

    d = Daemon(tmp_path, dram="256K")
    try:
        c = d.client()
        objs, keys = [], []
        for seed in range(5):
            o, k = blocks_of(100 + seed, 30)
            objs += o
            keys += k
        assert sum(len(o) for o in objs) > 2 * (256 << 10)
        assert c.put(objs) == [0] * len(objs)
        st = c.stat()["store"]
        assert st["spills"] > 0 and st["nvme"]["blocks"] > 0
        assert c.get(keys) == objs
        st = c.stat()["store"]
        assert st["nvme_hits"] > 0 and st["nvme_hits"] + st["dram_hits"] == st["hits"]
        c.close()
    finally:
        assert d.stop() == 0


def test_tail_handoff(daemon):
    c = daemon.client()
    rt = runtime("f16")
    seq = rt.batch(1).sequence()
    prefill(seq, 2, 0, 40, np.float16)
    tail = seq.tail(0)
    c.tail_put(b"q" * 32, tail, ttl_ms=60000)
    assert c.tail_take(b"q" * 32) == tail
    assert c.tail_take(b"q" * 32) is None  # taken once
    with pytest.raises(ValueError):
        c.tail_put(b"short", tail)
    rt.close()


def test_bad_connect(daemon, tmp_path):
    wrong = tmp_path / "wrong"
    wrong.write_text("alice 0f0e0d0c0b0a09080706050403020100\n")
    with pytest.raises(kvstash.KvsError) as e:
        kvstash.Client(daemon.address, wrong)
    assert "auth" in str(e.value)
    with pytest.raises(kvstash.KvsError):
        kvstash.Client("127.0.0.1:1", daemon.key("alice"), connect_timeout_ms=500)
    with pytest.raises(kvstash.KvsError):
        daemon.client(lanes=0)


def test_runtime_through_the_daemon(daemon):
    ids = ids_of(11, 200)
    writer_client = daemon.client()
    writer = runtime(store=writer_client)
    writer_client.close()  # the runtime holds the connection on its own
    first = writer.batch(1).sequence()
    first.append_ids(ids)
    prefill(first, 5, 0, 200)
    first.publish()
    writer.flush()
    want = decode(first, 5, 200, 30)
    assert writer.stats()["published"] == (200 // R) * L
    assert daemon.client().stat()["store"]["dram"]["blocks"] == (200 // R) * L

    # the attach's gets over three connections
    reader_client = daemon.client(lanes=3)
    reader = runtime(store=reader_client)
    seq = reader.batch(1).sequence()
    assert seq.attach_prefix(ids) == 160
    assert seq.attach_finish() == 160
    prefill(seq, 5, 160, 40)
    np.testing.assert_array_equal(decode(seq, 5, 200, 30), want)
    counters = reader_client.counters()
    assert counters["got"] == 5 * L and counters["got_bytes"] > 0

    # a block deleted between lookup and fetch: a shorter prefix, the same outputs
    span_ids = []
    for i in range(200 // R):
        span_ids.append(kvstash.span_id("", reader.model_fp, span_ids[-1] if span_ids else None,
                                        ids[i * R:(i + 1) * R]))
    assert daemon.client("carol").delete([(span_ids[3], 0)]) == [True]
    again = reader.batch(1).sequence()
    assert again.attach_prefix(ids) == 96
    assert again.attach_finish() == 96
    prefill(again, 5, 96, 104)
    np.testing.assert_array_equal(decode(again, 5, 200, 30), want)

    other = runtime(store=daemon.client("bob"))
    assert other.lookup_prefix(ids) == 0
    for rt in (writer, reader, other):
        rt.close()


def test_cluster_of_two_daemons(tmp_path):
    """Client.cluster over a fixed list: the same calls, the blocks spread
    over both nodes by rendezvous hashing, each found where it was put."""
    from conftest import Daemon

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = Daemon(tmp_path / "a"), Daemon(tmp_path / "b")
    try:
        c = kvstash.Client.cluster(a.key("alice"), servers="%s,%s" % (a.address, b.address),
                                   timeout_ms=5000)
        objs, keys = blocks_of(2, 8)
        assert c.put(objs) == [0] * len(objs)
        assert c.get(keys) == objs
        assert c.lookup([k[0] for k in keys[::2]], [0, 1]) == 8
        held = [sum(x.client().exists(keys)) for x in (a, b)]
        assert sum(held) == len(keys) and min(held) > 0, held
        c.close()
        with pytest.raises(ValueError):
            kvstash.Client.cluster(a.key("alice"))
    finally:
        assert a.stop() == 0 and b.stop() == 0


def test_full_precision_span_under_a_store_key(daemon):
    """A tail object (full-precision rows: the vLLM connector's raw format)
    is put and got under a store key like a block, bytes as put; a
    damaged one is refused."""
    import ctypes

    from kvstash import _lib

    shape = _lib.Shape()
    _lib.lib.kvs_shape_default(ctypes.byref(shape), 2, 64)
    shape.span = shape.residual = 256
    ident = _lib.Ident()
    span = kvstash.span_id("n", b"\x07" * 32, None, list(range(128)))
    ctypes.memmove(ident.block_id, span, 32)
    ident.layer = 3
    k = np.random.default_rng(3).standard_normal((2, 128, 64), dtype=np.float32)
    v = -k
    out, n = _lib.c_u8p(), ctypes.c_size_t()
    assert _lib.lib.kvs_tail_encode(ctypes.byref(shape), ctypes.byref(ident), _lib.DTYPE_F32,
                                    128, 128, k.ctypes.data, v.ctypes.data, 0,
                                    ctypes.byref(out), ctypes.byref(n)) == 0
    obj = ctypes.string_at(out, n.value)
    _lib.libc.free(out)
    c = daemon.client()
    assert c.put([obj]) == [0]
    got = c.get([(span, 3)])[0]
    assert got == obj
    rk, rv = kvstash.Block(got).residuals()
    np.testing.assert_array_equal(rk, k)
    np.testing.assert_array_equal(rv, v)
    bad = bytearray(obj)
    bad[-5] ^= 1
    assert c.put([bytes(bad)])[0] < 0
