"""The decode runtime (include/kvstash/runtime.h): Runtime, Batch, Sequence
and the block stores they publish to and attach from.

Arrays are NumPy arrays or torch tensors on the CPU device, torch CUDA
tensors on the CUDA device; layouts are those of the C API:
  prefill  k, v  [kv_heads][n][head_dim]           (a torch [1, kv, n, D]
                                                      slice works as is)
  step     q     [batch][q_heads][head_dim]
           k, v  [batch][kv_heads][head_dim]
           out   [batch][q_heads][head_dim] of out_dtype
"""

import ctypes
import weakref

import numpy as np

from . import _arrays, _lib
from ._lib import KvsError, check, lib

_ORDERS = {"kivi": _lib.ORDER_KIVI, "paper": _lib.ORDER_PAPER}
_DEVICES = {"auto": _lib.DEVICE_AUTO, "cpu": _lib.DEVICE_CPU, "cuda": _lib.DEVICE_CUDA}


def _ids(ids):
    arr = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(-1))
    if arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
        raise ValueError("kvstash: token ids must fit in 32 bits")
    arr = arr.astype(np.uint32)
    return arr, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_uint32))


def _id32(value, what):
    if isinstance(value, str):
        value = value.encode()
    value = bytes(value)
    if len(value) != _lib.ID_SIZE:
        raise ValueError("kvstash: %s must be %d bytes" % (what, _lib.ID_SIZE))
    return value


def _take_malloced(ptr, length):
    try:
        return ctypes.string_at(ptr, length)
    finally:
        _lib.libc.free(ptr)


class _Handle:
    """A C object this Python object owns: .handle while open, close()
    (also on `with` exit and garbage collection) releases it once."""

    _h = None
    _what = "object"

    @property
    def handle(self):
        if not self._h:
            raise ValueError("kvstash: the %s is closed" % self._what)
        return self._h

    def _release(self):
        raise NotImplementedError

    def close(self):
        if self._h:
            self._release()
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class BlockStore(_Handle):
    """A block store the runtime talks to.  BlockStore.local(path) is the
    in-process one over a store directory; kvstash.Client is the one over
    a kvstashd.  close() drops this reference; the runtimes using it keep
    their own."""

    _what = "block store"

    def __init__(self, handle):
        self._h = handle

    @classmethod
    def local(cls, path, dram=256 << 20, nvme=4 << 30, segment=0):
        """The store in directory `path` (created if missing): `dram` bytes
        of DRAM tier, `nvme` bytes of segment files of `segment` bytes
        (0: the store's defaults)."""
        h = ctypes.c_void_p()
        check(lib.kvs_blockstore_local_open(str(path).encode(), dram, nvme, segment, ctypes.byref(h)),
              "opening the store at %s" % path)
        return cls(h)

    def counters(self):
        """What went through this store since it was opened: lookups,
        gets / got / got_bytes / get_missed, puts / put / put_bytes,
        tail_puts / tail_put_bytes, tail_takes / tail_take_bytes, removed."""
        c = _lib.BlockStoreCounters()
        lib.kvs_blockstore_counters(self.handle, ctypes.byref(c))
        return {name: getattr(c, name) for name, _ in _lib.BlockStoreCounters._fields_}

    def remove(self, keys):
        """Deletes blocks, keys (span_id bytes, layer); True for each that
        was there."""
        keys = list(keys)
        arr = (_lib.StoreKey * max(1, len(keys)))()
        for i, (span, layer) in enumerate(keys):
            ctypes.memmove(arr[i].span_id, bytes(span), _lib.ID_SIZE)
            arr[i].layer = layer
        res = (ctypes.c_int * max(1, len(keys)))()
        check(lib.kvs_blockstore_remove(self.handle, arr, len(keys), res), "remove")
        return [res[i] == 0 for i in range(len(keys))]

    def _release(self):
        lib.kvs_blockstore_release(self._h)


class Runtime(_Handle):
    """One model's runtime: shape, quantisation, device, page pool, store
    (a BlockStore, e.g. a kvstash.Client, or None)."""

    _what = "runtime"

    def __init__(self, layers, q_heads, kv_heads, head_dim, *, kv_dtype="f16", out_dtype=None,
                 order="kivi", device="auto", group=32, bits=2, residual=128, meta_dtype="f16",
                 scale=None, max_tokens=4096, pool_pages=1024, model_id="", namespace="",
                 store=None, stream=None):
        cfg = _lib.RtConfig()
        lib.kvs_rt_config_default(ctypes.byref(cfg), layers, q_heads, kv_heads, head_dim)
        cfg.shape.group = group
        cfg.shape.bits = bits
        cfg.shape.meta_type = _arrays.dtype_code(meta_dtype)
        cfg.shape.span = residual
        cfg.shape.residual = residual
        cfg.kv_dtype = _arrays.dtype_code(kv_dtype)
        cfg.out_dtype = _arrays.dtype_code(out_dtype) if out_dtype is not None else 0
        if order not in _ORDERS:
            raise ValueError("kvstash: order is 'kivi' or 'paper'")
        cfg.order = _ORDERS[order]
        if device not in _DEVICES:
            raise ValueError("kvstash: device is 'auto', 'cpu' or 'cuda'")
        cfg.device = _DEVICES[device]
        cfg.scale = 0.0 if scale is None else float(scale)
        cfg.max_tokens = max_tokens
        cfg.pool_pages = pool_pages
        self._model_id = model_id.encode()
        self._namespace = namespace.encode()
        cfg.model_id = self._model_id
        cfg.name_space = self._namespace
        cfg.store = store.handle if store is not None else None
        self.store = store
        cfg.stream = stream
        h = ctypes.c_void_p()
        check(lib.kvs_rt_create(ctypes.byref(cfg), ctypes.byref(h)), "creating the runtime")
        self._h = h
        self._batches = weakref.WeakSet()
        self.layers, self.q_heads, self.kv_heads, self.head_dim = layers, q_heads, kv_heads, head_dim
        self.residual = residual
        self.span = residual
        self.kv_dtype = cfg.kv_dtype
        self.out_dtype = cfg.out_dtype or cfg.kv_dtype
        self.max_tokens = max_tokens
        self.device = "cuda" if lib.kvs_rt_device(h) == _lib.DEVICE_CUDA else "cpu"

    @property
    def model_fp(self):
        return ctypes.string_at(lib.kvs_rt_model_fp(self.handle), _lib.ID_SIZE)

    def batch(self, capacity):
        return Batch(self, capacity)

    def sync(self):
        check(lib.kvs_rt_sync(self.handle), "sync")

    def flush(self):
        """Waits for the publishes queued so far; raises the first failure."""
        check(lib.kvs_rt_flush(self.handle), "publish")

    def lookup_prefix(self, ids):
        arr, ptr = _ids(ids)
        tokens = ctypes.c_uint32()
        check(lib.kvs_rt_lookup_prefix(self.handle, ptr, arr.size, ctypes.byref(tokens)), "lookup")
        return tokens.value

    def stats(self):
        st = _lib.RtStats()
        lib.kvs_rt_stats(self.handle, ctypes.byref(st))
        return {name: getattr(st, name) for name, _ in _lib.RtStats._fields_}

    def _release(self):
        for b in list(self._batches):
            b.close()
        lib.kvs_rt_destroy(self._h)


class Batch(_Handle):
    """Up to `capacity` sequences decoded together: one fused attention
    call per layer and step for all of them."""

    _what = "batch"

    def __init__(self, rt, capacity):
        h = ctypes.c_void_p()
        check(lib.kvs_batch_create(rt.handle, capacity, ctypes.byref(h)), "creating a batch")
        self._h = h
        self.rt = rt
        self.capacity = capacity
        self._seqs = []
        rt._batches.add(self)

    def sequence(self):
        return Sequence(self)

    def __len__(self):
        return lib.kvs_batch_size(self.handle)

    def __getitem__(self, i):
        return self._seqs[i]

    def step(self, layer, q, k, v, out=None):
        """One decode step of `layer` for every sequence, in order."""
        rt = self.rt
        n = len(self)
        qb = _arrays.as_input(q, rt.kv_dtype, n * rt.q_heads * rt.head_dim, rt.device, "q")
        kb = _arrays.as_input(k, rt.kv_dtype, n * rt.kv_heads * rt.head_dim, rt.device, "k")
        vb = _arrays.as_input(v, rt.kv_dtype, n * rt.kv_heads * rt.head_dim, rt.device, "v")
        if out is None:
            out = _arrays.empty_like_kind(q, rt.out_dtype, (n, rt.q_heads, rt.head_dim), rt.device)
        ob = _arrays.as_output(out, rt.out_dtype, n * rt.q_heads * rt.head_dim, rt.device, "out")
        check(lib.kvs_batch_step(self.handle, layer, qb.ptr, kb.ptr, vb.ptr, ob.ptr), "step")
        return out

    def _release(self):
        for s in self._seqs:
            s._h = None
        self._seqs = []
        # a closed runtime destroyed its batches already
        if self.rt._h:
            lib.kvs_batch_destroy(self._h)


class Sequence(_Handle):
    """One request in a batch: per layer its pages, Key residual and Value
    FIFO; its token ids.  The batch owns it: close() takes it out early."""

    _what = "sequence"

    def __init__(self, batch):
        h = ctypes.c_void_p()
        check(lib.kvs_seq_create(batch.handle, ctypes.byref(h)), "creating a sequence")
        self._h = h
        self.batch = batch
        self.rt = batch.rt
        batch._seqs.append(self)

    @property
    def index(self):
        return lib.kvs_seq_index(self.handle)

    def tokens(self, layer=0):
        return lib.kvs_seq_tokens(self.handle, layer)

    def block_count(self, layer=0):
        return lib.kvs_seq_block_count(self.handle, layer)

    @property
    def id_count(self):
        return lib.kvs_seq_id_count(self.handle)

    def append_ids(self, ids):
        arr, ptr = _ids(ids)
        check(lib.kvs_seq_append_ids(self.handle, ptr, arr.size), "token ids")

    def prefill(self, layer, k, v):
        """Full-precision K/V of n prompt tokens, [kv_heads][n][D]."""
        rt = self.rt
        k = _arrays.from_dlpack(k)
        per_token = rt.kv_heads * rt.head_dim
        n = (k.numel() if hasattr(k, "numel") else k.size) // per_token
        kb = _arrays.as_input(k, rt.kv_dtype, n * per_token, rt.device, "k")
        vb = _arrays.as_input(v, rt.kv_dtype, n * per_token, rt.device, "v")
        check(lib.kvs_seq_prefill(self.handle, layer, kb.ptr, vb.ptr, n), "prefill")

    def step(self, layer, q, k, v, out=None):
        rt = self.rt
        qb = _arrays.as_input(q, rt.kv_dtype, rt.q_heads * rt.head_dim, rt.device, "q")
        kb = _arrays.as_input(k, rt.kv_dtype, rt.kv_heads * rt.head_dim, rt.device, "k")
        vb = _arrays.as_input(v, rt.kv_dtype, rt.kv_heads * rt.head_dim, rt.device, "v")
        if out is None:
            out = _arrays.empty_like_kind(q, rt.out_dtype, (rt.q_heads, rt.head_dim), rt.device)
        ob = _arrays.as_output(out, rt.out_dtype, rt.q_heads * rt.head_dim, rt.device, "out")
        check(lib.kvs_seq_step(self.handle, layer, qb.ptr, kb.ptr, vb.ptr, ob.ptr), "step")
        return out

    def publish(self):
        check(lib.kvs_seq_publish(self.handle), "publish")

    def attach_prefix(self, ids, limit=None):
        """Attaches the longest usable cached prefix of the prompt `ids`;
        returns the tokens attached (prefill the rest)."""
        arr, ptr = _ids(ids)
        attached = ctypes.c_uint32()
        check(lib.kvs_seq_attach_prefix(self.handle, ptr, arr.size,
                                        0xFFFFFFFF if limit is None else limit,
                                        ctypes.byref(attached)), "attach")
        return attached.value

    def attach_wait(self, layer):
        check(lib.kvs_seq_attach_wait(self.handle, layer), "attach of layer %d" % layer)

    def attach_finish(self):
        attached = ctypes.c_uint32()
        check(lib.kvs_seq_attach_finish(self.handle, ctypes.byref(attached)), "attach")
        return attached.value

    def tail(self, layer):
        """The residual tail object of `layer` (bytes)."""
        ptr = ctypes.POINTER(ctypes.c_uint8)()
        n = ctypes.c_size_t()
        check(lib.kvs_seq_tail_encode(self.handle, layer, ctypes.byref(ptr), ctypes.byref(n)), "tail")
        return _take_malloced(ptr, n.value)

    def load_tail(self, layer, data):
        data = bytes(data)
        check(lib.kvs_seq_tail_load(self.handle, layer, data, len(data)), "loading a tail")

    def export_tail(self, request_id, ttl_ms=60000):
        check(lib.kvs_seq_export_tail(self.handle, _id32(request_id, "request_id"), ttl_ms), "export")

    def import_tail(self, ids, request_id):
        arr, ptr = _ids(ids)
        check(lib.kvs_seq_import_tail(self.handle, ptr, arr.size, _id32(request_id, "request_id")),
              "import")

    def block(self, layer, index):
        """The sealed block of `layer` covering span `index`, encoded."""
        ptr = ctypes.POINTER(ctypes.c_uint8)()
        n = ctypes.c_size_t()
        check(lib.kvs_seq_block(self.handle, layer, index, ctypes.byref(ptr), ctypes.byref(n)), "block")
        return _take_malloced(ptr, n.value)

    def history(self, layer, first=0, count=None, dtype=None, like=None):
        """Sealed spans dequantized: (k, v) each [count][kv_heads][S][D]."""
        rt = self.rt
        if count is None:
            count = self.block_count(layer) - first
        code = _arrays.dtype_code(dtype) if dtype is not None else rt.kv_dtype
        shape = (count, rt.kv_heads, rt.span, rt.head_dim)
        if like is None:
            like = np.empty(0, np.float32)
        k = _arrays.empty_like_kind(like, code, shape, rt.device)
        v = _arrays.empty_like_kind(like, code, shape, rt.device)
        n = count * rt.kv_heads * rt.span * rt.head_dim
        kb = _arrays.as_output(k, code, n, rt.device, "k")
        vb = _arrays.as_output(v, code, n, rt.device, "v")
        check(lib.kvs_seq_history(self.handle, layer, first, count, code, kb.ptr, vb.ptr), "history")
        return k, v

    def reset(self):
        check(lib.kvs_seq_reset(self.handle), "reset")

    def _release(self):
        lib.kvs_seq_destroy(self._h)
        self.batch._seqs.remove(self)

    def __del__(self):
        pass  # the batch owns the sequence


__all__ = ["BlockStore", "Runtime", "Batch", "Sequence", "KvsError"]
