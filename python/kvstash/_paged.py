"""vLLM's paged KV cache, a block at a time, and the kvstash objects that
hold those blocks (the vLLM connector's two halves that need no vLLM).

A layout reads the Keys and Values of whole vLLM blocks out of one
layer's cache tensor as [n][kv_heads][block_size][head_dim] and writes them
back; a codec turns one block of one layer into a kvstash object and back:

  "2bit", "4bit"  a sealed block (DESIGN.md: Keys quantized per channel
                  over groups of tokens, Values per token over groups of
                  channels), span = vLLM's block size; decoding dequantizes
  "raw"           the block as it is, a full-precision span (a tail
                  object with block_size Key and Value rows of the cache's
                  dtype): bit for bit

Ids are the rest of kvstash's (DESIGN.md section 3): span ids chained over
vLLM blocks of tokens under a namespace and a model fingerprint; the
fingerprint names the model, its layers, heads, head dimension, the cache
dtype, vLLM's block size and the format, so two formats never share a key.
"""

import ctypes

from . import _lib
from ._lib import KvsError, check, lib
from .blocks import Block, span_id
from .kernels import page_size

FORMATS = ("2bit", "4bit", "raw")


def _torch():
    import torch

    return torch


def dtype_code(dtype):
    torch = _torch()
    codes = {torch.float32: _lib.DTYPE_F32, torch.float16: _lib.DTYPE_F16,
             torch.bfloat16: _lib.DTYPE_BF16}
    if dtype not in codes:
        raise ValueError("kvstash: a vLLM cache of %s is not supported "
                         "(float32, float16 or bfloat16)" % dtype)
    return codes[dtype]


# ---- layouts ------------------------------------------------------------------------

class CpuVecLayout:
    """vLLM's CPU "vec" attention path (fp32; fp16/bf16 without AMX): one
    tensor [num_blocks][kv_heads][block_size][2*head_dim] per layer, each
    (block, head) slice read as 2*block_size*head_dim values: the Keys
    transposed ([head_dim][block_size]), then the Values token-major
    ([block_size][head_dim])."""

    name = "cpu-vec"

    def __init__(self, cache, kv_heads, head_dim, block_size):
        want = (kv_heads, block_size, 2 * head_dim)
        if cache.dim() != 4 or tuple(cache.shape[1:]) != want:
            raise ValueError("kvstash: a CPU cache of shape %s is not the vec layout "
                             "[blocks, %d, %d, %d]" % (tuple(cache.shape), *want))
        self.h, self.d, self.bs = kv_heads, head_dim, block_size

    def read(self, cache, ids):
        torch = _torch()
        x = cache[torch.as_tensor(ids, dtype=torch.long)]
        x = x.reshape(len(ids), self.h, 2, self.bs * self.d)
        k = x[:, :, 0].reshape(len(ids), self.h, self.d, self.bs).transpose(-1, -2)
        v = x[:, :, 1].reshape(len(ids), self.h, self.bs, self.d)
        return k.contiguous(), v.contiguous()

    def write(self, cache, ids, k, v):
        torch = _torch()
        n = len(ids)
        x = torch.empty((n, self.h, 2, self.bs * self.d), dtype=cache.dtype)
        x[:, :, 0] = k.transpose(-1, -2).reshape(n, self.h, self.d * self.bs)
        x[:, :, 1] = v.reshape(n, self.h, self.bs * self.d)
        cache[torch.as_tensor(ids, dtype=torch.long)] = x.reshape(
            n, self.h, self.bs, 2 * self.d)

    def _halves(self, cache, page):
        flat = cache[page].reshape(self.h, 2 * self.bs * self.d)
        kt = flat[:, :self.bs * self.d].reshape(self.h, self.d, self.bs)
        return kt, flat[:, self.bs * self.d:].reshape(self.h, self.bs, self.d)

    def read_rows(self, cache, page, n):
        """The first n tokens of one block: ([kv_heads][n][head_dim]) x 2."""
        kt, v = self._halves(cache, page)
        return kt[:, :, :n].transpose(-1, -2).contiguous(), v[:, :n].contiguous()

    def write_rows(self, cache, page, k, v):
        """Writes the first k.shape[1] tokens of one block in place."""
        n = k.shape[1]
        kt, vv = self._halves(cache, page)
        kt[:, :, :n] = k.transpose(-1, -2)
        vv[:, :n] = v


class CudaFlashLayout:
    """vLLM's CUDA flash-attention layout (NHD): one tensor
    [2][num_blocks][block_size][kv_heads][head_dim] per layer, Keys at 0,
    Values at 1.  Blocks are sealed on the host (read copies them there)."""

    name = "cuda-flash"

    def __init__(self, cache, kv_heads, head_dim, block_size):
        want = (block_size, kv_heads, head_dim)
        if cache.dim() != 5 or cache.shape[0] != 2 or tuple(cache.shape[2:]) != want:
            raise ValueError("kvstash: a CUDA cache of shape %s is not the flash layout "
                             "[2, blocks, %d, %d, %d]" % (tuple(cache.shape), *want))

    def read(self, cache, ids):
        torch = _torch()
        idx = torch.as_tensor(ids, dtype=torch.long, device=cache.device)
        k = cache[0, idx].permute(0, 2, 1, 3).contiguous().cpu()
        v = cache[1, idx].permute(0, 2, 1, 3).contiguous().cpu()
        return k, v

    def write(self, cache, ids, k, v):
        torch = _torch()
        idx = torch.as_tensor(ids, dtype=torch.long, device=cache.device)
        cache[0, idx] = k.to(cache.device, cache.dtype).permute(0, 2, 1, 3)
        cache[1, idx] = v.to(cache.device, cache.dtype).permute(0, 2, 1, 3)

    def read_rows(self, cache, page, n):
        return (cache[0, page, :n].permute(1, 0, 2).contiguous().cpu(),
                cache[1, page, :n].permute(1, 0, 2).contiguous().cpu())

    def write_rows(self, cache, page, k, v):
        n = k.shape[1]
        cache[0, page, :n] = k.to(cache.device, cache.dtype).permute(1, 0, 2)
        cache[1, page, :n] = v.to(cache.device, cache.dtype).permute(1, 0, 2)


# ---- the objects --------------------------------------------------------------------

def _take(out, n):
    """The bytes of an object the library malloc'd, freed."""
    try:
        return ctypes.string_at(out, n.value)
    finally:
        _lib.libc.free(out)


class Codec:
    """kvstash objects for one model's vLLM blocks in format `fmt`."""

    def __init__(self, fmt, model_id, layers, kv_heads, head_dim, block_size, dtype,
                 namespace="default", group=32):
        if fmt not in FORMATS:
            raise ValueError("kvstash: format %r (one of %s)" % (fmt, ", ".join(FORMATS)))
        group = min(group, block_size)
        if head_dim % group or block_size % group:
            raise ValueError("kvstash: head_dim %d and block_size %d must be multiples of "
                             "the group %d" % (head_dim, block_size, group))
        self.fmt, self.layers, self.namespace = fmt, layers, namespace
        self.h, self.d, self.bs = kv_heads, head_dim, block_size
        self.dtype = dtype
        self.code = dtype_code(dtype)
        shape = _lib.Shape()
        lib.kvs_shape_default(ctypes.byref(shape), kv_heads, head_dim)
        shape.group = group
        shape.span = shape.residual = block_size
        shape.bits = 4 if fmt == "4bit" else 2
        if fmt == "raw":
            # a tail holds fewer Key rows than R: R spans two blocks
            shape.span = shape.residual = 2 * block_size
        check(lib.kvs_shape_check(ctypes.byref(shape)), "block shape")
        self.shape = shape
        # the residual tail of a handed-over request: up to a whole block of
        # full-precision rows (R two blocks: a tail holds fewer Key rows than R)
        self.tail_shape = _lib.Shape.from_buffer_copy(shape)
        self.tail_shape.span = self.tail_shape.residual = 2 * block_size
        check(lib.kvs_shape_check(ctypes.byref(self.tail_shape)), "tail shape")
        desc = _lib.ModelDesc()
        self._model_id = ("%s|vllm|%s|block %d" % (model_id, fmt, block_size)).encode()
        desc.model_id = self._model_id
        desc.layers = layers
        desc.kv_dtype = self.code
        desc.shape = shape
        desc.layout = 1
        fp = ctypes.create_string_buffer(_lib.ID_SIZE)
        check(lib.kvs_model_fingerprint(ctypes.byref(desc), fp), "model fingerprint")
        self.model_fp = fp.raw
        # the bytes of one object: what a GET's buffers hold (a tail grows
        # them to its size when it needs more)
        if fmt == "raw":
            self.object_size = self._tail_size(block_size)
        else:
            self.object_size = page_size(shape)[0]
        self.tail_size = self._tail_size(block_size)

    def _tail_size(self, rows):
        shape = self.tail_shape if self.fmt != "raw" else self.shape
        lay = (ctypes.c_uint32 * (2 * _lib.SECTION_MAX + 2))()
        check(lib.kvs_tail_layout(ctypes.byref(shape), self.code, rows, rows, lay), "tail layout")
        return lay[2 * _lib.SECTION_MAX + 1]

    def span_ids(self, tokens, n_blocks):
        """The chained span ids of the first n_blocks vLLM blocks of tokens."""
        out, parent = [], None
        for b in range(n_blocks):
            parent = span_id(self.namespace, self.model_fp, parent,
                             tokens[b * self.bs:(b + 1) * self.bs])
            out.append(parent)
        return out

    def _ident(self, layer, index, span, parent):
        ident = _lib.Ident()
        ctypes.memmove(ident.block_id, span, _lib.ID_SIZE)
        if parent is not None:
            ctypes.memmove(ident.parent_id, parent, _lib.ID_SIZE)
        ctypes.memmove(ident.model_fp, self.model_fp, _lib.ID_SIZE)
        ident.layer = layer
        ident.first_pos = index * self.bs
        return ident

    def encode(self, layer, index, span, parent, k, v):
        """The object of block `index` (span id `span`, after `parent`) of
        `layer` from k, v: contiguous CPU tensors [kv_heads][block_size][head_dim]
        of the cache's dtype.  Raises KvsError (non-finite values, ...)."""
        ident = self._ident(layer, index, span, parent)
        out = _lib.c_u8p()
        n = ctypes.c_size_t()
        if self.fmt == "raw":
            err = lib.kvs_tail_encode(ctypes.byref(self.shape), ctypes.byref(ident), self.code,
                                      self.bs, self.bs, k.data_ptr(), v.data_ptr(), 0,
                                      ctypes.byref(out), ctypes.byref(n))
        else:
            err = lib.kvs_block_seal(ctypes.byref(self.shape), ctypes.byref(ident), self.code,
                                     k.data_ptr(), v.data_ptr(), 0, ctypes.byref(out),
                                     ctypes.byref(n))
        if err:
            raise KvsError(err, "sealing block %d of layer %d" % (index, layer))
        return _take(out, n)

    def encode_tail(self, layer, first_pos, transfer_id, k, v):
        """A residual tail: the n = k.shape[1] full-precision tokens of a
        prompt's last, partial block (k, v: [kv_heads][n][head_dim])."""
        ident = self._ident(layer, 0, transfer_id, None)
        ident.first_pos = first_pos
        out = _lib.c_u8p()
        size = ctypes.c_size_t()
        n = k.shape[1]
        err = lib.kvs_tail_encode(ctypes.byref(self.tail_shape), ctypes.byref(ident), self.code,
                                  n, n, k.data_ptr(), v.data_ptr(), 0, ctypes.byref(out),
                                  ctypes.byref(size))
        if err:
            raise KvsError(err, "encoding the tail of layer %d" % layer)
        return _take(out, size)

    def decode_tail(self, data, layer, first_pos, n):
        """The first n rows of a residual tail (k, v) in the cache's dtype."""
        torch = _torch()
        blk = Block(data)
        try:
            if (blk.kind != "tail" or blk.layer != layer or blk.first_pos != first_pos
                    or blk.model_fp != self.model_fp.hex() or blk.r_k < n or blk.r_v < n
                    or blk.shape["kv_heads"] != self.h or blk.shape["head_dim"] != self.d):
                raise ValueError("kvstash: the tail is not %d rows of layer %d at %d"
                                 % (n, layer, first_pos))
            k, v = blk.residuals()
        finally:
            blk.close()
        return (torch.from_numpy(k[:, :n].copy()).to(self.dtype),
                torch.from_numpy(v[:, :n].copy()).to(self.dtype))

    def decode(self, data, layer, index):
        """(k, v) CPU tensors [kv_heads][block_size][head_dim] of the cache's
        dtype from an object; KvsError or ValueError where the object fails
        a check or is not this codec's block `index` of `layer`."""
        torch = _torch()
        blk = Block(data)
        try:
            want = "tail" if self.fmt == "raw" else "block"
            s = blk.shape
            if (blk.kind != want or blk.layer != layer or blk.first_pos != index * self.bs
                    or blk.model_fp != self.model_fp.hex() or s["kv_heads"] != self.h
                    or s["head_dim"] != self.d or s["bits"] != self.shape.bits):
                raise ValueError("kvstash: the object is not block %d of layer %d in %s"
                                 % (index, layer, self.fmt))
            if self.fmt == "raw":
                if blk.r_k != self.bs or blk.r_v != self.bs:
                    raise ValueError("kvstash: a raw block of %d/%d rows" % (blk.r_k, blk.r_v))
                k, v = blk.residuals()
            else:
                k, v = blk.dequantize()
        finally:
            blk.close()
        return (torch.from_numpy(k).to(self.dtype), torch.from_numpy(v).to(self.dtype))
