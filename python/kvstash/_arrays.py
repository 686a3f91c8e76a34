"""Arrays in and out of the C library: NumPy arrays (host memory), PyTorch
tensors (host or CUDA memory, passed by data_ptr) and anything else that
speaks DLPack (converted to one of the two without a copy)."""

import numpy as np

from . import _lib

_NAMES = {"f32": _lib.DTYPE_F32, "fp32": _lib.DTYPE_F32, "float32": _lib.DTYPE_F32,
          "f16": _lib.DTYPE_F16, "fp16": _lib.DTYPE_F16, "float16": _lib.DTYPE_F16,
          "bf16": _lib.DTYPE_BF16, "bfloat16": _lib.DTYPE_BF16}
_SIZES = {_lib.DTYPE_F32: 4, _lib.DTYPE_F16: 2, _lib.DTYPE_BF16: 2}


def dtype_code(dtype):
    """"f16" / numpy.float16 / torch.float16 ... -> the library's code."""
    if isinstance(dtype, int):
        if dtype in _SIZES:
            return dtype
    name = getattr(dtype, "name", None) or str(dtype)
    name = name.replace("torch.", "")
    if name in _NAMES:
        return _NAMES[name]
    try:
        np_name = np.dtype(dtype).name
        if np_name in _NAMES:
            return _NAMES[np_name]
    except TypeError:
        pass
    raise ValueError("kvstash: unsupported dtype %r (f32, f16 or bf16)" % (dtype,))


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def from_dlpack(x):
    """NumPy arrays and torch tensors as they are; other DLPack producers
    as torch tensors where torch is there, else as NumPy arrays."""
    if isinstance(x, np.ndarray) or _is_torch(x):
        return x
    if hasattr(x, "__dlpack__"):
        t = _torch()
        if t is not None:
            return t.from_dlpack(x)
        return np.from_dlpack(x)
    return np.asarray(x)


def _torch_dtype(code):
    t = _torch()
    return {_lib.DTYPE_F32: t.float32, _lib.DTYPE_F16: t.float16, _lib.DTYPE_BF16: t.bfloat16}[code]


def _np_matches(arr, code):
    if code == _lib.DTYPE_F32:
        return arr.dtype == np.float32
    if code == _lib.DTYPE_F16:
        return arr.dtype == np.float16
    # bf16: NumPy has none; its bits as uint16, or an ml_dtypes bfloat16
    return arr.dtype == np.uint16 or arr.dtype.name == "bfloat16"


class Buffer:
    """A pointer to an array's memory and the array that owns it."""

    __slots__ = ("ptr", "owner")

    def __init__(self, ptr, owner):
        self.ptr = ptr
        self.owner = owner


def as_input(x, code, elements, device, what):
    """@x as a contiguous buffer of @elements elements of dtype @code in
    @device memory ("cpu" or "cuda")."""
    x = from_dlpack(x)
    if _is_torch(x):
        t = _torch()
        if code == _lib.DTYPE_BF16 and x.dtype == getattr(t, "uint16", None):
            x = x.view(t.bfloat16)  # bf16 bits, as with NumPy
        if x.dtype != _torch_dtype(code):
            raise TypeError("kvstash: %s is %s, the runtime takes %s" % (what, x.dtype, _torch_dtype(code)))
        if (x.device.type == "cuda") != (device == "cuda"):
            raise ValueError("kvstash: %s is on %s, the runtime on %s" % (what, x.device, device))
        if x.numel() != elements:
            raise ValueError("kvstash: %s has %d elements, %d expected" % (what, x.numel(), elements))
        x = x.contiguous()
        return Buffer(x.data_ptr(), x)
    if device != "cpu":
        raise ValueError("kvstash: %s is host memory; the CUDA runtime takes CUDA tensors" % what)
    if not _np_matches(x, code):
        raise TypeError("kvstash: %s is %s, the runtime takes %s" % (what, x.dtype, lib_dtype_name(code)))
    if x.size != elements:
        raise ValueError("kvstash: %s has %d elements, %d expected" % (what, x.size, elements))
    x = np.ascontiguousarray(x)
    return Buffer(x.ctypes.data, x)


def empty_like_kind(like, code, shape, device):
    """A new array of @shape and dtype @code of the kind of @like (torch on
    its device, else NumPy)."""
    like = from_dlpack(like)
    if _is_torch(like):
        t = _torch()
        return t.empty(shape, dtype=_torch_dtype(code), device=like.device)
    if code == _lib.DTYPE_BF16:
        return np.empty(shape, dtype=np.uint16)
    return np.empty(shape, dtype={_lib.DTYPE_F32: np.float32, _lib.DTYPE_F16: np.float16}[code])


def as_output(x, code, elements, device, what):
    """@x must be contiguous already: the library writes into it."""
    x = from_dlpack(x)
    if _is_torch(x):
        if not x.is_contiguous():
            raise ValueError("kvstash: %s must be contiguous" % what)
    elif not x.flags["C_CONTIGUOUS"] or not x.flags["WRITEABLE"]:
        raise ValueError("kvstash: %s must be a contiguous writable array" % what)
    buf = as_input(x, code, elements, device, what)
    if buf.owner is not x:
        raise ValueError("kvstash: %s must be contiguous" % what)
    return buf


def lib_dtype_name(code):
    return _lib.lib.kvs_dtype_name(code).decode()


def bf16_to_f32(bits):
    """NumPy uint16 bf16 bits -> float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """float32 -> bf16 bits (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = u + 0x7FFF + ((u >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)
