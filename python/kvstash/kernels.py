"""The CUDA kernels (include/kvstash/kernels.h) on torch CUDA tensors,
passed by data_ptr (or any DLPack producer, taken as a torch tensor).
Present where libkvstash was built with CUDA; available() says whether a
device is usable too.  Calls run on torch's current stream."""

import ctypes

from . import _arrays, _lib
from ._lib import KvsError, check, lib


def available():
    return _lib.cuda_available is not None and lib.kvs_cuda_available() == 0


def _require():
    if _lib.cuda_available is None:
        raise RuntimeError("kvstash: libkvstash was built without CUDA")
    check(lib.kvs_cuda_available(), "CUDA")


def _torch():
    import torch

    return torch


def _stream():
    return ctypes.c_void_p(_torch().cuda.current_stream().cuda_stream)


def shape(kv_heads, head_dim, group=32, bits=2, span=128, residual=128, meta_dtype="f16"):
    s = _lib.Shape()
    lib.kvs_shape_default(ctypes.byref(s), kv_heads, head_dim)
    s.group, s.bits, s.span, s.residual = group, bits, span, residual
    s.meta_type = _arrays.dtype_code(meta_dtype)
    return s


def page_size(s):
    """Bytes of one block image, and the page stride (a multiple of 256)."""
    lay = (ctypes.c_uint32 * (2 * _lib.SECTION_MAX + 2))()
    check(lib.kvs_block_layout(ctypes.byref(s), lay), "layout")
    total = lay[2 * _lib.SECTION_MAX + 1]
    return total, (total + 255) // 256 * 256


def _cuda(x, what):
    x = _arrays.from_dlpack(x)
    if not hasattr(x, "is_cuda") or not x.is_cuda:
        raise ValueError("kvstash: %s must be a CUDA tensor" % what)
    return x.contiguous()


def seal(keys, values, s):
    """Quantize and pack [blocks][kv][S][D] f16/bf16 K/V into block images:
    a uint8 tensor [blocks][page_stride] whose sections are at their
    canonical offsets (the header is left zero)."""
    _require()
    torch = _torch()
    keys, values = _cuda(keys, "keys"), _cuda(values, "values")
    blocks = keys.shape[0]
    _, stride = page_size(s)
    images = torch.zeros((blocks, stride), dtype=torch.uint8, device=keys.device)
    status = torch.zeros(1, dtype=torch.int32, device=keys.device)
    a = _lib.CudaSeal()
    a.shape = s
    a.in_dtype = _arrays.dtype_code(keys.dtype)
    a.keys, a.values = keys.data_ptr(), values.data_ptr()
    a.block_stride = s.kv_heads * s.span * s.head_dim
    a.token_stride = s.head_dim
    a.head_stride = s.span * s.head_dim
    a.blocks = blocks
    a.images = images.data_ptr()
    a.image_stride = stride
    a.status = status.data_ptr()
    a.stream = _stream()
    check(lib.kvs_cuda_seal_blocks(ctypes.byref(a)), "seal")
    check(lib.kvs_cuda_status_check(status.data_ptr(), _stream()), "seal")
    return images


def dequantize(images, s, dtype="f32"):
    """Block images [n][page_stride] (uint8 CUDA) -> (k, v) [n][kv][S][D]."""
    _require()
    torch = _torch()
    images = _cuda(images, "images")
    n = images.shape[0]
    code = _arrays.dtype_code(dtype)
    tdt = {_lib.DTYPE_F32: torch.float32, _lib.DTYPE_F16: torch.float16,
           _lib.DTYPE_BF16: torch.bfloat16}[code]
    out_shape = (n, s.kv_heads, s.span, s.head_dim)
    k = torch.empty(out_shape, dtype=tdt, device=images.device)
    v = torch.empty(out_shape, dtype=tdt, device=images.device)
    pages = torch.arange(n, dtype=torch.int32, device=images.device)
    check(lib.kvs_cuda_dequantize(ctypes.byref(s), images.data_ptr(), images.stride(0),
                                  pages.data_ptr(), n, code, k.data_ptr(), v.data_ptr(), _stream()),
          "dequantize")
    return k, v


def attend(q, pool, page_table, seqs, k_resid, v_resid, s, scale=None, out_dtype=None,
           max_tokens=None, flags=0):
    """Fused decode attention over paged 2-bit history and residuals.

    q [B][Hq][D]; pool uint8 [pages][page_stride]; page_table int32
    [B][max_pages]; seqs int32 [B][6] (k_quant_len, v_quant_len,
    k_resid_len, v_resid_len, v_resid_start, 0); k_resid [B][kv][ks][D];
    v_resid [B][kv][vs][D].  Returns out [B][Hq][D]."""
    _require()
    torch = _torch()
    q, pool = _cuda(q, "q"), _cuda(pool, "pool")
    page_table, seqs = _cuda(page_table, "page_table"), _cuda(seqs, "seqs")
    k_resid, v_resid = _cuda(k_resid, "k_resid"), _cuda(v_resid, "v_resid")
    B, Hq, D = q.shape
    code = _arrays.dtype_code(q.dtype)
    ocode = _arrays.dtype_code(out_dtype) if out_dtype is not None else code
    tdt = {_lib.DTYPE_F32: torch.float32, _lib.DTYPE_F16: torch.float16,
           _lib.DTYPE_BF16: torch.bfloat16}[ocode]
    out = torch.empty((B, Hq, D), dtype=tdt, device=q.device)
    if max_tokens is None:
        lens = seqs.to("cpu")
        max_tokens = int((lens[:, 0] + lens[:, 2]).max().item()) if B else 0
    a = _lib.CudaAttn()
    a.shape = s
    a.batch, a.q_heads = B, Hq
    a.dtype, a.out_dtype = code, ocode
    a.scale = D ** -0.5 if scale is None else scale
    a.max_tokens = max(1, max_tokens)
    a.q, a.pool, a.page_stride = q.data_ptr(), pool.data_ptr(), pool.stride(0)
    a.page_table, a.max_pages = page_table.data_ptr(), page_table.shape[1]
    a.seqs = seqs.data_ptr()
    a.k_resid, a.v_resid = k_resid.data_ptr(), v_resid.data_ptr()
    a.k_resid_stride, a.v_resid_stride = k_resid.shape[2], v_resid.shape[2]
    a.out = out.data_ptr()
    a.flags = flags
    a.stream = _stream()
    size = lib.kvs_cuda_attn_workspace(ctypes.byref(a))
    ws = torch.empty(max(size, 16), dtype=torch.uint8, device=q.device)
    a.workspace, a.workspace_size = ws.data_ptr(), size
    err = lib.kvs_cuda_attend(ctypes.byref(a))
    if err:
        raise KvsError(err, "attend")
    return out
