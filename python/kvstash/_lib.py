"""Loading libkvstash and declaring its C functions (ctypes).

The library is looked for, in order: the path in the environment variable
KVSTASH_LIB; a libkvstash.so* next to this module (a wheel or an install
that copied it there); the system's search path (ctypes.util.find_library).
The structures below mirror include/kvstash/*.h field by field.
"""

import ctypes
import ctypes.util
import glob
import os

ID_SIZE = 32
SECTION_MAX = 8
BLOCK_SECTIONS = 6
HEADER_SIZE = 512

DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 1, 2, 3
KIND_BLOCK, KIND_TAIL = 1, 2
ORDER_KIVI, ORDER_PAPER = 0, 1
DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA = 0, 1, 2

c_u8p = ctypes.POINTER(ctypes.c_uint8)


class Shape(ctypes.Structure):
    _fields_ = [
        ("kv_heads", ctypes.c_uint16),
        ("head_dim", ctypes.c_uint16),
        ("group", ctypes.c_uint16),
        ("bits", ctypes.c_uint8),
        ("meta_type", ctypes.c_uint8),
        ("span", ctypes.c_uint32),
        ("residual", ctypes.c_uint32),
    ]


class Ident(ctypes.Structure):
    _fields_ = [
        ("block_id", ctypes.c_uint8 * ID_SIZE),
        ("parent_id", ctypes.c_uint8 * ID_SIZE),
        ("model_fp", ctypes.c_uint8 * ID_SIZE),
        ("layer", ctypes.c_uint32),
        ("first_pos", ctypes.c_uint64),
    ]


class Section(ctypes.Structure):
    _fields_ = [
        ("offset", ctypes.c_uint32),
        ("stored_len", ctypes.c_uint32),
        ("logical_len", ctypes.c_uint32),
        ("codec", ctypes.c_uint8),
        ("checksum", ctypes.c_uint64),
    ]


class Header(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint16),
        ("kind", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("layout", ctypes.c_uint8),
        ("tail_dtype", ctypes.c_uint8),
        ("shape", Shape),
        ("tokens", ctypes.c_uint32),
        ("r_k", ctypes.c_uint32),
        ("r_v", ctypes.c_uint32),
        ("total_size", ctypes.c_uint64),
        ("ident", Ident),
        ("section_count", ctypes.c_uint32),
        ("section", Section * SECTION_MAX),
    ]


class View(ctypes.Structure):
    _fields_ = [
        ("hdr", Header),
        ("section", c_u8p * SECTION_MAX),
        ("owned", c_u8p),
    ]


class ModelDesc(ctypes.Structure):
    _fields_ = [
        ("model_id", ctypes.c_char_p),
        ("layers", ctypes.c_uint32),
        ("kv_dtype", ctypes.c_int),
        ("shape", Shape),
        ("layout", ctypes.c_uint8),
    ]


class RtConfig(ctypes.Structure):
    _fields_ = [
        ("model_id", ctypes.c_char_p),
        ("layers", ctypes.c_uint32),
        ("q_heads", ctypes.c_uint32),
        ("shape", Shape),
        ("kv_dtype", ctypes.c_int),
        ("out_dtype", ctypes.c_int),
        ("order", ctypes.c_int),
        ("device", ctypes.c_int),
        ("scale", ctypes.c_float),
        ("max_tokens", ctypes.c_uint32),
        ("pool_pages", ctypes.c_uint32),
        ("name_space", ctypes.c_char_p),
        ("store", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class RtStats(ctypes.Structure):
    _fields_ = [
        ("pages_total", ctypes.c_uint32),
        ("pages_free", ctypes.c_uint32),
        ("published", ctypes.c_uint64),
        ("publish_skipped", ctypes.c_uint64),
        ("publish_failed", ctypes.c_uint64),
        ("attached", ctypes.c_uint64),
        ("fetch_missed", ctypes.c_uint64),
        ("fetch_corrupt", ctypes.c_uint64),
        ("sealed", ctypes.c_uint64),
        ("fetch_get_us", ctypes.c_uint64),
        ("fetch_copy_us", ctypes.c_uint64),
    ]


class CudaSeq(ctypes.Structure):
    _fields_ = [
        ("k_quant_len", ctypes.c_uint32),
        ("v_quant_len", ctypes.c_uint32),
        ("k_resid_len", ctypes.c_uint32),
        ("v_resid_len", ctypes.c_uint32),
        ("v_resid_start", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class CudaSeal(ctypes.Structure):
    _fields_ = [
        ("shape", Shape),
        ("in_dtype", ctypes.c_int),
        ("keys", ctypes.c_void_p),
        ("values", ctypes.c_void_p),
        ("block_stride", ctypes.c_int64),
        ("token_stride", ctypes.c_int64),
        ("head_stride", ctypes.c_int64),
        ("src", ctypes.c_void_p),
        ("blocks", ctypes.c_uint32),
        ("images", ctypes.c_void_p),
        ("image_stride", ctypes.c_uint64),
        ("dst", ctypes.c_void_p),
        ("status", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("v_head_stride", ctypes.c_int64),
    ]


class CudaAttn(ctypes.Structure):
    _fields_ = [
        ("shape", Shape),
        ("batch", ctypes.c_uint32),
        ("q_heads", ctypes.c_uint32),
        ("dtype", ctypes.c_int),
        ("out_dtype", ctypes.c_int),
        ("scale", ctypes.c_float),
        ("max_tokens", ctypes.c_uint32),
        ("q", ctypes.c_void_p),
        ("pool", ctypes.c_void_p),
        ("page_stride", ctypes.c_uint64),
        ("page_table", ctypes.c_void_p),
        ("max_pages", ctypes.c_uint32),
        ("seqs", ctypes.c_void_p),
        ("k_resid", ctypes.c_void_p),
        ("v_resid", ctypes.c_void_p),
        ("k_resid_stride", ctypes.c_uint32),
        ("v_resid_stride", ctypes.c_uint32),
        ("out", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("stream", ctypes.c_void_p),
        ("max_resid_rows", ctypes.c_uint32),
    ]


class StoreKey(ctypes.Structure):
    _fields_ = [("span_id", ctypes.c_uint8 * ID_SIZE), ("layer", ctypes.c_uint32)]


class ClientOpts(ctypes.Structure):
    _fields_ = [
        ("address", ctypes.c_char_p),
        ("key_file", ctypes.c_char_p),
        ("connect_timeout_ms", ctypes.c_uint32),
        ("timeout_ms", ctypes.c_uint32),
        ("shared_memory", ctypes.c_bool),
    ]


class ClusterOpts(ctypes.Structure):
    _fields_ = [
        ("etcd", ctypes.c_char_p),
        ("cluster", ctypes.c_char_p),
        ("servers", ctypes.c_char_p),
        ("key_file", ctypes.c_char_p),
        ("timeout_ms", ctypes.c_uint32),
        ("node_timeout_ms", ctypes.c_uint32),
        ("backoff_ms", ctypes.c_uint32),
        ("etcd_timeout_ms", ctypes.c_uint32),
        ("replicas", ctypes.c_uint),
        ("repair_replicas", ctypes.c_bool),
        ("shared_memory", ctypes.c_bool),
    ]


class ClientLimits(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in
                ("max_batch", "max_object", "max_payload", "max_inflight")]


class TierStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("blocks", "bytes", "capacity")]


class StoreStats(ctypes.Structure):
    _fields_ = [("dram", TierStats), ("nvme", TierStats)] + [
        (name, ctypes.c_uint64) for name in
        ("hits", "misses", "dram_hits", "nvme_hits", "evictions", "spills", "promotions",
         "carried", "corrupt_dropped", "torn_dropped", "lost_segments", "compactions",
         "tombstones",
         "segments", "nvme_file_bytes")
    ] + [(name, ctypes.c_bool) for name in ("direct_io", "hugepages", "registered", "host_pinned")]


class ClientStat(ctypes.Structure):
    _fields_ = [("store", StoreStats)] + [
        (name, ctypes.c_uint64) for name in
        ("tails", "tail_bytes", "tails_expired", "connections", "uptime_s")
    ]


class BlockStoreCounters(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("lookups", "gets", "got", "got_bytes", "get_missed", "puts", "put",
                 "put_bytes", "tail_puts", "tail_put_bytes", "tail_takes",
                 "tail_take_bytes", "removed")]


def _candidates():
    env = os.environ.get("KVSTASH_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for path in sorted(glob.glob(os.path.join(here, "libkvstash.so*"))):
        yield path
    found = ctypes.util.find_library("kvstash")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise OSError(
        "kvstash: libkvstash not found; set KVSTASH_LIB to its path "
        "(build: meson setup build && ninja -C build; the library is "
        "build/lib/libkvstash.so)" + ("; tried " + ", ".join(tried) if tried else "")
    )


lib, lib_path = _load()

# The package, the library and the wire must be one release: a package
# over another build's library would read its structures wrongly.
VERSION = "0.1.0"  # meson.build's project version
WIRE_VERSION = 1  # docs/PROTOCOL.md


def _check_versions():
    try:
        lib.kvs_version.restype = ctypes.c_char_p
        lib.kvs_wire_version.restype = ctypes.c_uint32
    except AttributeError:
        raise ImportError("kvstash %s: %s is an older libkvstash (no kvs_version); "
                          "use the library of this release" % (VERSION, lib_path)) from None
    have = lib.kvs_version().decode()
    wire = lib.kvs_wire_version()
    if have != VERSION or wire != WIRE_VERSION:
        raise ImportError("kvstash %s (wire %d): %s is libkvstash %s (wire %d); "
                          "use the library of this release" % (VERSION, WIRE_VERSION, lib_path,
                                                              have, wire))


_check_versions()

_I, _U32, _U64, _SZ, _P = (
    ctypes.c_int,
    ctypes.c_uint32,
    ctypes.c_uint64,
    ctypes.c_size_t,
    ctypes.c_void_p,
)
_SZP = ctypes.POINTER(ctypes.c_size_t)
_U32P = ctypes.POINTER(ctypes.c_uint32)
_PP = ctypes.POINTER(ctypes.c_void_p)


def _fn(name, restype, *argtypes, optional=False):
    try:
        f = getattr(lib, name)
    except AttributeError:
        if optional:
            return None
        raise
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


# common / kvformat
_fn("kvs_strerror", ctypes.c_char_p, _I)
_fn("kvs_check_name", ctypes.c_char_p, _I)
_fn("kvs_shape_default", None, ctypes.POINTER(Shape), ctypes.c_uint16, ctypes.c_uint16)
_fn("kvs_shape_check", _I, ctypes.POINTER(Shape))
_fn("kvs_object_verify", _I, _P, _SZ, ctypes.c_uint)
_fn("kvs_object_open", _I, _P, _SZ, ctypes.c_uint, ctypes.POINTER(View))
_fn("kvs_view_release", None, ctypes.POINTER(View))
_fn("kvs_block_dequantize", _I, ctypes.POINTER(View), _P, _P)
_fn("kvs_block_layout", _I, ctypes.POINTER(Shape), _P)
_fn("kvs_tail_layout", _I, ctypes.POINTER(Shape), _I, _U32, _U32, _P)
_fn("kvs_block_seal", _I, ctypes.POINTER(Shape), ctypes.POINTER(Ident), _I, _P, _P,
    ctypes.c_uint, ctypes.POINTER(c_u8p), _SZP)
_fn("kvs_tail_encode", _I, ctypes.POINTER(Shape), ctypes.POINTER(Ident), _I, _U32, _U32, _P, _P,
    ctypes.c_uint, ctypes.POINTER(c_u8p), _SZP)
_fn("kvs_model_fingerprint", _I, ctypes.POINTER(ModelDesc), _P)
_fn("kvs_span_id", _I, ctypes.c_char_p, _P, _P, _U32P, _SZ, _P)
_fn("kvs_id_to_hex", None, _P, ctypes.c_char_p)
_fn("kvs_dtype_name", ctypes.c_char_p, _I)
_fn("kvs_log_set_level", None, _I)

# runtime
_fn("kvs_blockstore_local_open", _I, ctypes.c_char_p, _U64, _U64, _U64, _PP)
_fn("kvs_blockstore_release", None, _P)
_fn("kvs_blockstore_ref", _P, _P)
_fn("kvs_blockstore_counters", None, _P, ctypes.POINTER(BlockStoreCounters))
_fn("kvs_blockstore_remove", _I, _P, ctypes.POINTER(StoreKey), _SZ, ctypes.POINTER(ctypes.c_int))
_fn("kvs_rt_config_default", None, ctypes.POINTER(RtConfig), _U32, _U32, ctypes.c_uint16,
    ctypes.c_uint16)
_fn("kvs_rt_create", _I, ctypes.POINTER(RtConfig), _PP)
_fn("kvs_rt_destroy", None, _P)
_fn("kvs_rt_device", _I, _P)
_fn("kvs_rt_model_fp", _P, _P)
_fn("kvs_rt_sync", _I, _P)
_fn("kvs_rt_flush", _I, _P)
_fn("kvs_rt_lookup_prefix", _I, _P, _U32P, _SZ, _U32P)
_fn("kvs_rt_stats", None, _P, ctypes.POINTER(RtStats))
_fn("kvs_rt_tail_key", _I, _P, _P, _U32, _P)
_fn("kvs_batch_create", _I, _P, _U32, _PP)
_fn("kvs_batch_destroy", None, _P)
_fn("kvs_batch_size", _U32, _P)
_fn("kvs_batch_step", _I, _P, _U32, _P, _P, _P, _P)
_fn("kvs_seq_create", _I, _P, _PP)
_fn("kvs_seq_destroy", None, _P)
_fn("kvs_seq_index", _U32, _P)
_fn("kvs_seq_tokens", _U32, _P, _U32)
_fn("kvs_seq_id_count", _U32, _P)
_fn("kvs_seq_reset", _I, _P)
_fn("kvs_seq_append_ids", _I, _P, _U32P, _SZ)
_fn("kvs_seq_prefill", _I, _P, _U32, _P, _P, _U32)
_fn("kvs_seq_step", _I, _P, _U32, _P, _P, _P, _P)
_fn("kvs_seq_publish", _I, _P)
_fn("kvs_seq_attach_prefix", _I, _P, _U32P, _SZ, _U32, _U32P)
_fn("kvs_seq_attach_wait", _I, _P, _U32)
_fn("kvs_seq_attach_finish", _I, _P, _U32P)
_fn("kvs_seq_tail_encode", _I, _P, _U32, ctypes.POINTER(c_u8p), _SZP)
_fn("kvs_seq_tail_load", _I, _P, _U32, _P, _SZ)
_fn("kvs_seq_export_tail", _I, _P, _P, _U32)
_fn("kvs_seq_import_tail", _I, _P, _U32P, _SZ, _P)
_fn("kvs_seq_block", _I, _P, _U32, _U32, ctypes.POINTER(c_u8p), _SZP)
_fn("kvs_seq_block_count", _U32, _P, _U32)
_fn("kvs_seq_history", _I, _P, _U32, _U32, _U32, _I, _P, _P)

# the client of kvstashd: present where the library was built with UCX
client_available = _fn("kvs_client_connect", _I, ctypes.POINTER(ClientOpts), _PP,
                       optional=True) is not None
if client_available:
    # arrays by address (slices of a batch are offsets into them)
    _fn("kvs_client_opts_default", None, ctypes.POINTER(ClientOpts))
    _fn("kvs_client_close", None, _P)
    _fn("kvs_client_cluster_opts_default", None, ctypes.POINTER(ClusterOpts))
    _fn("kvs_client_connect_cluster", _I, ctypes.POINTER(ClusterOpts), _PP)
    _fn("kvs_client_limits", None, _P, ctypes.POINTER(ClientLimits))
    _fn("kvs_client_lookup", _I, _P, _P, _SZ, _P, _SZ, _SZP)
    _fn("kvs_client_exists", _I, _P, _P, _SZ, _P)
    _fn("kvs_client_get", _I, _P, _P, _SZ, _P, _P, _P, _P)
    _fn("kvs_client_put", _I, _P, _P, _P, _SZ, _I, _P)
    _fn("kvs_client_delete", _I, _P, _P, _SZ, _P)
    _fn("kvs_client_tail_put", _I, _P, _P, _P, _SZ, _U32)
    _fn("kvs_client_tail_take", _I, _P, _P, _P, _SZ, _SZP)
    _fn("kvs_client_stat", _I, _P, ctypes.POINTER(ClientStat))
    _fn("kvs_blockstore_remote", _I, _P, _PP)
    _fn("kvs_blockstore_remote_lanes", _I, _P, ctypes.c_uint, _PP)
    _fn("kvs_blockstore_remote_client", _P, _P)

# the C library's free(), for buffers the library malloc'd
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.free.argtypes = [_P]
libc.free.restype = None

# kernels: present where the library was built with CUDA
cuda_available = _fn("kvs_cuda_available", _I, optional=True)
if cuda_available is not None:
    _fn("kvs_cuda_seal_blocks", _I, ctypes.POINTER(CudaSeal))
    _fn("kvs_cuda_status_check", _I, _P, _P)
    _fn("kvs_cuda_dequantize", _I, ctypes.POINTER(Shape), _P, _U64, _P, _U32, _I, _P, _P, _P)
    _fn("kvs_cuda_attn_workspace", _U64, ctypes.POINTER(CudaAttn))
    _fn("kvs_cuda_attend", _I, ctypes.POINTER(CudaAttn))


class KvsError(RuntimeError):
    """A kvstash call failed; .code is its (negative) return value."""

    def __init__(self, code, what=""):
        self.code = code
        name = lib.kvs_strerror(code).decode()
        super().__init__("%s: %s (%d)" % (what, name, code) if what else "%s (%d)" % (name, code))


def check(code, what=""):
    if code < 0:
        raise KvsError(code, what)
    return code


KVS_ERROR_BASE = 4096
(
    EPARAM,
    ENONFINITE,
    ERANGE,
    ETRUNC,
    EMAGIC,
    EVERSION,
    EHDRSUM,
    EBOUNDS,
    ESECTSUM,
    ELZ4,
    EMETA,
    EKIND,
    EBOUNDARY,
    ECORRUPT,
    ENOTFOUND,
) = [-(KVS_ERROR_BASE + i) for i in range(15)]
ECONN = -(KVS_ERROR_BASE + 26)  # connection lost or refused (error.h)
