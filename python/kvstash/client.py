"""The client of kvstashd (include/kvstash/client.h): Client.

    client = kvstash.Client("127.0.0.1:7070", "/etc/kvstash/my.key")
    rt = kvstash.Runtime(..., store=client)          # publish / attach / handoff
    client.stat()["store"]["hits"]

A Client is one authenticated connection with its own progress thread.  It
is also a block store: a Runtime given `store=client` publishes to,
attaches from and hands tails over through the daemon (the runtime keeps
the connection open as long as it needs it, also after client.close()).

Keys are (span_id, layer) pairs: span_id 32 bytes (or 64 hex digits), as
kvstash.span_id() computes them; the daemon maps them into the tenant's
namespace.  Objects are encoded blocks (bytes).
"""

import ctypes

from . import _lib
from ._lib import KvsError, check, lib
from .runtime import BlockStore

_DURABILITY = {"memory": 0, "written": 1, "durable": 2}


def _need_client():
    if not _lib.client_available:
        raise OSError("kvstash: %s was built without the client (UCX)" % _lib.lib_path)


def _keys(keys):
    keys = list(keys)
    arr = (_lib.StoreKey * max(1, len(keys)))()
    for i, (span, layer) in enumerate(keys):
        if isinstance(span, str):
            span = bytes.fromhex(span)
        span = bytes(span)
        if len(span) != _lib.ID_SIZE:
            raise ValueError("kvstash: a span id is %d bytes" % _lib.ID_SIZE)
        ctypes.memmove(arr[i].span_id, span, _lib.ID_SIZE)
        arr[i].layer = int(layer)
    return arr, len(keys)


def _request_id(value):
    if isinstance(value, str):
        value = value.encode()
    value = bytes(value)
    if len(value) != _lib.ID_SIZE:
        raise ValueError("kvstash: a request id is %d bytes" % _lib.ID_SIZE)
    return value


def _at(arr, i):
    """The address of element i of a ctypes array."""
    return ctypes.addressof(arr) + i * ctypes.sizeof(arr._type_)


def _struct_dict(st):
    out = {}
    for name, _ in st._fields_:
        value = getattr(st, name)
        out[name] = _struct_dict(value) if isinstance(value, ctypes.Structure) else value
    return out


class Client(BlockStore):
    """A connection to the kvstashd at `address` ("HOST:PORT"), authenticated
    with the key file `key_file` ("TENANT HEXKEY" or "HEXKEY").  `lanes`
    connections (1 to 16) share the gets of an attach; everything else goes
    over the first."""

    _what = "client"

    def __init__(self, address, key_file, *, timeout_ms=10000, connect_timeout_ms=5000,
                 shared_memory=False, lanes=1, _cluster=None):
        _need_client()
        c = ctypes.c_void_p()
        if _cluster is not None:
            check(lib.kvs_client_connect_cluster(ctypes.byref(_cluster), ctypes.byref(c)),
                  "connecting to the cluster %s" % address)
        else:
            opts = _lib.ClientOpts()
            lib.kvs_client_opts_default(ctypes.byref(opts))
            self._address = str(address).encode()
            self._key_file = str(key_file).encode()
            opts.address = self._address
            opts.key_file = self._key_file
            opts.timeout_ms = timeout_ms
            opts.connect_timeout_ms = connect_timeout_ms
            opts.shared_memory = bool(shared_memory)
            check(lib.kvs_client_connect(ctypes.byref(opts), ctypes.byref(c)),
                  "connecting to %s" % address)
        bs = ctypes.c_void_p()
        err = lib.kvs_blockstore_remote_lanes(c, int(lanes), ctypes.byref(bs))
        if err:
            lib.kvs_client_close(c)
            raise KvsError(err, "block store")
        super().__init__(bs)
        self.address = address

    @classmethod
    def cluster(cls, key_file, *, etcd=None, cluster=None, servers=None, timeout_ms=10000,
                node_timeout_ms=2000, replicas=1, repair_replicas=False):
        """A client of many kvstashd nodes through the same calls
        (docs/CLUSTER.md): the members of `cluster` in etcd (`etcd`: its
        client URLs "http://H:P[,...]"), or the fixed list `servers`
        ("HOST:PORT[,HOST:PORT...]"); each block on the members that
        rendezvous hashing ranks first, `replicas` copies."""
        if bool(servers) == bool(etcd and cluster):
            raise ValueError("kvstash: a cluster is etcd and cluster, or servers")
        opts = _lib.ClusterOpts()
        lib.kvs_client_cluster_opts_default(ctypes.byref(opts))
        keep = [str(x).encode() if x else None for x in (etcd, cluster, servers, key_file)]
        opts.etcd, opts.cluster, opts.servers, opts.key_file = keep
        opts.timeout_ms = timeout_ms
        opts.node_timeout_ms = node_timeout_ms
        opts.replicas = replicas
        opts.repair_replicas = bool(repair_replicas)
        self = cls(servers or "%s/%s" % (etcd, cluster), key_file, _cluster=opts)
        self._keep = keep
        return self

    @property
    def _c(self):
        return lib.kvs_blockstore_remote_client(self.handle)

    def block_store(self):
        """A BlockStore reference to this connection (for code that wants
        the plain type; a Client is one already)."""
        return BlockStore(lib.kvs_blockstore_ref(self.handle))

    def limits(self):
        lim = _lib.ClientLimits()
        lib.kvs_client_limits(self._c, ctypes.byref(lim))
        return _struct_dict(lim)

    def stat(self):
        """The daemon's counters: {"store": {"dram": {...}, "hits": ...,
        "spills": ...}, "tails": ..., "connections": ..., "uptime_s": ...}."""
        st = _lib.ClientStat()
        check(lib.kvs_client_stat(self._c, ctypes.byref(st)), "stat")
        return _struct_dict(st)

    def lookup(self, span_ids, layers):
        """How many leading spans of `span_ids` are held for every layer."""
        span_ids = [bytes.fromhex(s) if isinstance(s, str) else bytes(s) for s in span_ids]
        if not span_ids or not layers:
            return 0
        ids = b"".join(span_ids)
        lay = (ctypes.c_uint32 * len(layers))(*layers)
        prefix = ctypes.c_size_t()
        check(lib.kvs_client_lookup(self._c, ids, len(span_ids), ctypes.addressof(lay),
                                    len(layers), ctypes.byref(prefix)), "lookup")
        return prefix.value

    def _batches(self, n):
        step = self.limits()["max_batch"]
        return [(i, min(n, i + step)) for i in range(0, n, step)]

    def exists(self, keys):
        arr, n = _keys(keys)
        present = (ctypes.c_bool * max(1, n))()
        for a, b in self._batches(n):
            check(lib.kvs_client_exists(self._c, _at(arr, a), b - a, _at(present, a)), "exists")
        return [bool(present[i]) for i in range(n)]

    def get(self, keys, cap=1 << 20):
        """The objects of `keys` (bytes), None for a miss (or an object that
        failed the client's checks)."""
        arr, n = _keys(keys)
        out = [None] * n
        todo = list(range(n))
        while todo:
            m = len(todo)
            sub = (_lib.StoreKey * m)(*[arr[i] for i in todo])
            bufs = [ctypes.create_string_buffer(cap) for _ in range(m)]
            ptrs = (ctypes.c_void_p * m)(*[ctypes.addressof(b) for b in bufs])
            caps = (ctypes.c_size_t * m)(*([cap] * m))
            lens = (ctypes.c_size_t * m)()
            res = (ctypes.c_int * m)()
            for a, b in self._batches(m):
                check(lib.kvs_client_get(self._c, _at(sub, a), b - a, _at(ptrs, a), _at(caps, a),
                                         _at(lens, a), _at(res, a)), "get")
            again = []
            for j, i in enumerate(todo):
                if res[j] == 0:
                    out[i] = bufs[j].raw[:lens[j]]
                elif res[j] == -28:  # ENOSPC: lens[j] is what it needs
                    cap = max(cap, lens[j])
                    again.append(i)
            todo = again
        return out

    def put(self, objs, durability="memory"):
        """Puts encoded blocks; returns each one's result (0 or a negative
        error: a refused check, no space, ...)."""
        objs = [bytes(o) for o in objs]
        if durability not in _DURABILITY:
            raise ValueError("kvstash: durability is memory, written or durable")
        n = len(objs)
        bufs = [ctypes.create_string_buffer(o, len(o)) for o in objs]
        ptrs = (ctypes.c_void_p * max(1, n))(*[ctypes.addressof(b) for b in bufs])
        lens = (ctypes.c_size_t * max(1, n))(*[len(o) for o in objs])
        res = (ctypes.c_int * max(1, n))()
        for a, b in self._batches(n):
            check(lib.kvs_client_put(self._c, _at(ptrs, a), _at(lens, a), b - a,
                                     _DURABILITY[durability], _at(res, a)), "put")
        return [res[i] for i in range(n)]

    def delete(self, keys):
        """Deletes objects; True for each that was there."""
        arr, n = _keys(keys)
        res = (ctypes.c_int * max(1, n))()
        for a, b in self._batches(n):
            check(lib.kvs_client_delete(self._c, _at(arr, a), b - a, _at(res, a)), "delete")
        return [res[i] == 0 for i in range(n)]

    def tail_put(self, request_id, tail, ttl_ms=60000):
        """Hands a residual tail over under a 32-byte request id."""
        tail = bytes(tail)
        check(lib.kvs_client_tail_put(self._c, _request_id(request_id), tail, len(tail), ttl_ms),
              "tail put")

    def tail_take(self, request_id, cap=None):
        """Takes (and so deletes) the tail of a request id; None when there
        is none (never put, expired or taken).  `cap`: room for it (default
        the server's largest object; a tail over `cap` is lost)."""
        if cap is None:
            cap = self.limits()["max_object"]
        buf = ctypes.create_string_buffer(cap)
        n = ctypes.c_size_t()
        err = lib.kvs_client_tail_take(self._c, _request_id(request_id), buf, cap, ctypes.byref(n))
        if err == _lib.ENOTFOUND:
            return None
        check(err, "tail take")
        return buf.raw[:n.value]


def connect(address, key_file, **kw):
    """Client(address, key_file, **kw)."""
    return Client(address, key_file, **kw)


__all__ = ["Client", "connect"]
