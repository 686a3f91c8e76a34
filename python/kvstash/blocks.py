"""Block inspection: open an encoded object (sealed block or residual tail)
with every check of the format, read its header, dequantize it."""

import ctypes

import numpy as np

from . import _arrays, _lib
from ._lib import KvsError, lib


def check_name(code):
    """The format check an error code stands for ("magic", "section
    checksum", ...)."""
    return lib.kvs_check_name(code).decode()


def verify(data):
    """Raises KvsError (naming the check) unless `data` is a valid object."""
    data = bytes(data)
    err = lib.kvs_object_verify(data, len(data), 0)
    if err:
        raise KvsError(err, "%s check" % check_name(err))


def _hex(arr):
    return bytes(arr).hex()


class Block:
    """An opened object.  Attributes: kind ("block" or "tail"), version,
    shape (dict), layer, first_pos, tokens, r_k, r_v, tail_dtype,
    block_id / parent_id / model_fp (hex), size."""

    def __init__(self, data):
        self._data = ctypes.create_string_buffer(bytes(data), len(data))
        self._view = _lib.View()
        err = lib.kvs_object_open(self._data, len(data), 0, ctypes.byref(self._view))
        if err:
            raise KvsError(err, "%s check" % check_name(err))
        h = self._view.hdr
        self.kind = {_lib.KIND_BLOCK: "block", _lib.KIND_TAIL: "tail"}[h.kind]
        self.version = h.version
        self.shape = {name: getattr(h.shape, name) for name, _ in _lib.Shape._fields_}
        self.layer = h.ident.layer
        self.first_pos = h.ident.first_pos
        self.tokens = h.tokens
        self.r_k, self.r_v = h.r_k, h.r_v
        self.tail_dtype = _arrays.lib_dtype_name(h.tail_dtype) if h.tail_dtype else None
        self.block_id = _hex(h.ident.block_id)
        self.parent_id = _hex(h.ident.parent_id)
        self.model_fp = _hex(h.ident.model_fp)
        self.size = h.total_size

    def dequantize(self):
        """(keys, values), float32 [kv_heads][span][head_dim] each."""
        if self.kind != "block":
            raise ValueError("kvstash: a tail holds no quantized codes; see residuals()")
        s = self.shape
        k = np.empty((s["kv_heads"], s["span"], s["head_dim"]), np.float32)
        v = np.empty_like(k)
        err = lib.kvs_block_dequantize(ctypes.byref(self._view), k.ctypes.data, v.ctypes.data)
        if err:
            raise KvsError(err, "dequantize")
        return k, v

    def residuals(self):
        """A tail's (keys [kv][r_k][D], values [kv][r_v][D]) as float32."""
        if self.kind != "tail":
            raise ValueError("kvstash: not a tail")
        s = self.shape
        code = self._view.hdr.tail_dtype
        out = []
        for sec, rows in ((0, self.r_k), (1, self.r_v)):
            n = s["kv_heads"] * rows * s["head_dim"]
            size = {_lib.DTYPE_F32: 4, _lib.DTYPE_F16: 2, _lib.DTYPE_BF16: 2}[code]
            raw = ctypes.string_at(self._view.section[sec], n * size) if n else b""
            if code == _lib.DTYPE_F32:
                arr = np.frombuffer(raw, np.float32).copy()
            elif code == _lib.DTYPE_F16:
                arr = np.frombuffer(raw, np.float16).astype(np.float32)
            else:
                arr = _arrays.bf16_to_f32(np.frombuffer(raw, np.uint16))
            out.append(arr.reshape(s["kv_heads"], rows, s["head_dim"]))
        return tuple(out)

    def close(self):
        """Releases the view (the decompressed sections, if any)."""
        if self._view is not None:
            lib.kvs_view_release(ctypes.byref(self._view))
            self._view = None

    __del__ = close


def span_id(namespace, model_fp, parent, token_ids):
    """SHA-256 span id (DESIGN.md §3) of `token_ids` after `parent` (bytes
    or None) under `namespace` and `model_fp` (32 bytes)."""
    ids = np.ascontiguousarray(np.asarray(token_ids, dtype=np.uint32))
    out = ctypes.create_string_buffer(_lib.ID_SIZE)
    err = lib.kvs_span_id(namespace.encode(), bytes(model_fp), None if parent is None else bytes(parent),
                          ids.ctypes.data_as(ctypes.POINTER(ctypes.c_uint32)), ids.size, out)
    if err:
        raise KvsError(err, "span id")
    return out.raw
