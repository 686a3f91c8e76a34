"""kvstash inside vLLM: a KV connector (vLLM's KVConnectorBase_V1).

    from vllm.config import KVTransferConfig
    KVTransferConfig(kv_connector="KvstashConnector", kv_connector_module_path="kvstash.vllm",
                     kv_role="kv_both", kv_load_failure_policy="recompute",
                     kv_connector_extra_config={"address": "127.0.0.1:7070",
                                                "key_file": "/etc/kvstash/tenant.key",
                                                "format": "2bit"})

A request's prompt is cut into vLLM blocks; each full block of each layer
is one kvstash object under (span id, layer), the span ids chained over the
blocks' tokens as everywhere in kvstash, under the namespace and a
fingerprint of the model, its cache and the format (kvstash._paged).

Scheduler side: get_num_new_matched_tokens asks kvstashd (LOOKUP) how many
of the prompt's full blocks past vLLM's own prefix cache it holds for every
layer, leaving at least the prompt's last token to compute.  The LOOKUP
runs on a thread of its own: until it answers, the request is left for a
later scheduler step (extra config "lookup": "async", the default; "sync"
waits in the step).  The matched blocks load in the forward pass that
allocates them, pipelined by layer.

Worker side: start_load_kv starts a loader thread that, layer by layer,
fetches the matched blocks (one GET per layer), checks and decodes them
and writes them into the layer's paged cache; wait_for_layer_load(layer)
waits for that layer only, so loading overlaps the forward pass.
save_kv_layer copies the blocks a step completes out of the layer's cache
and hands them to a saver thread that seals (2-bit or 4-bit, in C, outside
the GIL) and puts them while the next layers compute; wait_for_save waits
for the step's puts (extra config "save": "sync", the default) or not
("async": a later request may miss blocks still in flight).

Roles: kv_both loads and saves (prefix sharing); kv_producer only saves (a
prefill instance publishing), kv_consumer only loads (a decode instance).

Faults: when kvstashd is down, slow (extra config "timeout_ms") or answers
an error, the lookup reports no match and vLLM computes the prompt; a
block that fails to load (a miss, a failed check, a wrong identity) is
reported through get_block_ids_with_load_errors, is never left in the
cache as if loaded, and vLLM recomputes from it (kv_load_failure_policy
"recompute"; with vLLM's default "fail" the request fails instead).  One
line is logged when the daemon becomes unreachable, one when it is back.

Layouts: vLLM's CPU "vec" attention path (float32; bf16/fp16 without AMX)
and its CUDA flash-attention layout; any other (CPU "amx", "vec16", fp8
caches, tensor or pipeline parallel shards) is refused at start.
"""

import concurrent.futures
import hashlib
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.logger import init_logger

from . import _paged
from .client import Client

logger = init_logger("vllm.kvstash")  # under vLLM's own logger and its level

__all__ = ["KvstashConnector", "KvstashConnectorMetadata"]


@dataclass
class BlockMove:
    """One vLLM block of a request: the prompt's block index, its span id
    and parent, and the vLLM block (page) it is in."""

    index: int
    span: bytes
    parent: bytes | None
    page: int


@dataclass
class TailMove:
    """The residual tail of a handed-over request: the first `rows` tokens
    of its prompt's last, partial block (vLLM block `page`, prompt position
    `first_pos`), under the handoff's transfer id."""

    transfer_id: bytes
    page: int
    first_pos: int
    rows: int


@dataclass
class KvstashConnectorMetadata(KVConnectorMetadata):
    loads: dict[str, list[BlockMove]] = field(default_factory=dict)
    saves: dict[str, list[BlockMove]] = field(default_factory=dict)
    tail_loads: dict[str, TailMove] = field(default_factory=dict)
    tail_saves: dict[str, TailMove] = field(default_factory=dict)


def _tail_key(transfer_id, layer):
    """The tail handoff's request id of one layer."""
    return hashlib.sha256(transfer_id + layer.to_bytes(4, "little")).digest()


def _model_shape(vllm_config):
    mc, pc = vllm_config.model_config, vllm_config.parallel_config
    if pc.tensor_parallel_size != 1 or pc.pipeline_parallel_size != 1:
        raise ValueError("kvstash: the vLLM connector stores whole layers: tensor and "
                         "pipeline parallel size 1 only")
    cache_dtype = vllm_config.cache_config.cache_dtype
    if cache_dtype not in ("auto", None) and str(cache_dtype) != "auto":
        raise ValueError("kvstash: a %s KV cache is not supported (kv_cache_dtype auto)"
                         % cache_dtype)
    return (mc.get_num_layers(pc), mc.get_num_kv_heads(pc), mc.get_head_size(),
            vllm_config.cache_config.block_size, mc.dtype)


def _where_name(where):
    """The daemon or cluster a connector talks to, for the log."""
    return where.get("address") or where.get("servers") or "%s (%s)" % (
        where.get("cluster"), where.get("etcd"))


class _Daemon:
    """A connection to kvstashd made when first needed, made again after
    a failure at most every `retry_s`, and logged once per outage."""

    def __init__(self, where, what):
        self.where, self.what = where, what
        self.address = _where_name(where)
        self.client = None
        self.down_since = None
        self.next_try = 0.0
        self.retry_s = 2.0

    def get(self):
        if self.client is None and time.monotonic() >= self.next_try:
            w = self.where
            try:
                if w.get("address"):
                    self.client = Client(w["address"], w["key_file"], timeout_ms=w["timeout_ms"],
                                         connect_timeout_ms=min(w["timeout_ms"], 2000))
                else:
                    self.client = Client.cluster(w["key_file"], etcd=w.get("etcd"),
                                                 cluster=w.get("cluster"),
                                                 servers=w.get("servers"),
                                                 timeout_ms=w["timeout_ms"],
                                                 node_timeout_ms=min(w["timeout_ms"], 2000),
                                                 replicas=int(w.get("replicas", 1)))
            except Exception as e:  # the daemon is down or refuses us
                self.failed(e)
        return self.client

    def failed(self, err):
        if self.down_since is None:
            self.down_since = time.monotonic()
            logger.warning("kvstash: kvstashd at %s unreachable from the %s (%s): "
                           "computing instead of loading", self.address, self.what, err)
        self.next_try = time.monotonic() + self.retry_s

    def ok(self):
        if self.down_since is not None:
            logger.warning("kvstash: kvstashd at %s reachable again from the %s after %.1f s",
                           self.address, self.what, time.monotonic() - self.down_since)
            self.down_since = None

    def close(self):
        if self.client is not None:
            self.client.close()
            self.client = None


@dataclass
class _Req:
    tokens: list[int]
    spans: list[bytes]
    pages: list[int] = field(default_factory=list)
    load_from: int = 0  # prompt blocks [load_from, load_to) come from kvstash
    load_to: int = 0
    match_from: int = 0  # the lookup's first block (past vLLM's own prefix cache)
    held_to: int = 0  # blocks kvstash already holds (the lookup said so)
    saved_to: int = 0  # blocks saved or known to be saved
    load_pending: bool = False
    tail_id: bytes | None = None  # the handoff's transfer id
    tail_rows: int = 0  # consumer: tail tokens matched
    tail_pending: bool = False  # consumer: the tail loads in the next step
    lookup: Any = None  # (first block, future) of a LOOKUP in flight


class KvstashConnector(KVConnectorBase_V1):
    """The kvstash KV connector; see the module's documentation."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        tc = self._kv_transfer_config
        extra = dict(tc.kv_connector_extra_config or {})
        if not extra.get("key_file"):
            raise ValueError("kvstash: kv_connector_extra_config needs 'key_file'")
        ways = [bool(extra.get("address")), bool(extra.get("servers")),
                bool(extra.get("etcd") and extra.get("cluster"))]
        if sum(ways) != 1:
            raise ValueError("kvstash: kv_connector_extra_config names one kvstashd ('address'), "
                             "or a cluster: 'etcd' and 'cluster', or 'servers'")
        unknown = set(extra) - {"address", "etcd", "cluster", "servers", "replicas", "key_file",
                                "namespace", "format", "timeout_ms", "save", "lookup"}
        if unknown:
            raise ValueError("kvstash: unknown kv_connector_extra_config keys: %s"
                             % ", ".join(sorted(unknown)))
        self.fmt = extra.get("format", "2bit")
        self.save_mode = extra.get("save", "sync")
        self.lookup_mode = extra.get("lookup", "async")
        if self.save_mode not in ("sync", "async") or self.lookup_mode not in ("sync", "async"):
            raise ValueError("kvstash: save and lookup are sync or async")
        timeout_ms = int(extra.get("timeout_ms", 2000))
        layers, kv_heads, head_dim, bs, dtype = _model_shape(vllm_config)
        self.layers, self.bs = layers, bs
        self.codec = _paged.Codec(self.fmt, vllm_config.model_config.model, layers, kv_heads,
                                  head_dim, bs, dtype, namespace=extra.get("namespace", "default"))
        self.loads = tc.is_kv_consumer
        self.saves = tc.is_kv_producer
        # a prefill instance hands each request's residual tail over
        self.hands_over = tc.kv_role == "kv_producer"
        if self.loads and getattr(tc, "kv_load_failure_policy", "recompute") != "recompute":
            logger.warning("kvstash: kv_load_failure_policy is %r: a block that fails to "
                           "load fails its request; \"recompute\" recomputes it",
                           tc.kv_load_failure_policy)
        where = {k: extra[k] for k in ("address", "etcd", "cluster", "servers", "replicas",
                                        "key_file") if extra.get(k)}
        where["timeout_ms"] = timeout_ms
        args = (where,)
        if role == KVConnectorRole.SCHEDULER:
            self._daemon = _Daemon(where, "scheduler")
            self._reqs: dict[str, _Req] = {}
            self._lookups = concurrent.futures.ThreadPoolExecutor(1, "kvstash-lookup")
        else:
            self._worker = _Worker(self, args)
        logger.info("kvstash: connector (%s) for %s: format %s, %d layers, %d KV heads x %d, "
                    "block %d, %s", "scheduler" if role == KVConnectorRole.SCHEDULER else "worker",
                    _where_name(where), self.fmt, layers, kv_heads, head_dim, bs, dtype)

    # ---- scheduler side ----------------------------------------------------------

    def _state(self, request):
        st = self._reqs.get(request.request_id)
        if st is None:
            tokens = list(request.prompt_token_ids or [])
            full = max(0, len(tokens) - 1) // self.bs  # the last token is always computed
            st = _Req(tokens, self.codec.span_ids(tokens, full))
            self._reqs[request.request_id] = st
        return st

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        st = self._state(request)
        first = num_computed_tokens // self.bs
        params = getattr(request, "kv_transfer_params", None) or {}
        tail = params.get("kvstash_tail") if isinstance(params, dict) else None
        if not self.loads or (first >= len(st.spans) and not tail):
            return 0, False
        if self.lookup_mode == "async":
            # the LOOKUP runs on the lookup thread; until it answers the
            # scheduler is told to ask again (None) and schedules others
            if st.lookup is None or st.lookup[0] != first:
                st.lookup = (first, self._lookups.submit(self._lookup, st.spans[first:]))
                return None, False
            if not st.lookup[1].done():
                return None, False
            held = st.lookup[1].result()
            st.lookup = None
        else:
            held = self._lookup(st.spans[first:])
        if held is None:
            return 0, False
        st.match_from, st.held_to = first, first + held
        st.tail_rows = 0
        if tail and st.held_to == len(st.spans):
            # the handed-over tail: the prompt's last partial block but its
            # last token, which vLLM computes
            st.tail_id = bytes.fromhex(tail)
            st.tail_rows = len(st.tokens) - 1 - len(st.spans) * self.bs
        return held * self.bs + st.tail_rows, False

    def _lookup(self, spans):
        """How many leading spans every layer holds; None when kvstashd is
        unreachable or answers an error (logged by _Daemon)."""
        if not spans:
            return 0
        client = self._daemon.get()
        if client is None:
            return None
        try:
            held = client.lookup(spans, range(self.layers))
        except Exception as e:
            self._daemon.failed(e)
            return None
        self._daemon.ok()
        return held

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        st = self._state(request)
        if num_external_tokens > 0:
            st.load_from = st.match_from
            st.load_to = st.load_from + num_external_tokens // self.bs
            st.load_pending = True
            st.tail_pending = st.tail_rows > 0 and num_external_tokens % self.bs == st.tail_rows
        st.saved_to = max(st.saved_to, st.held_to)

    def _moves(self, st, lo, hi):
        return [BlockMove(i, st.spans[i], st.spans[i - 1] if i else None, st.pages[i])
                for i in range(lo, hi)]

    def _plan(self, meta, req_id, st, done_tokens):
        n = len(st.spans)
        if st.load_pending:
            meta.loads[req_id] = self._moves(st, st.load_from, st.load_to)
            st.load_pending = False
        if st.tail_pending and n < len(st.pages):
            meta.tail_loads[req_id] = TailMove(st.tail_id, st.pages[n], n * self.bs, st.tail_rows)
            st.tail_pending = False
        if self.saves:
            full = min(done_tokens // self.bs, n, len(st.pages))
            if full > st.saved_to:
                meta.saves[req_id] = self._moves(st, st.saved_to, full)
                st.saved_to = full
        if (self.hands_over and st.tail_id is None and done_tokens >= len(st.tokens)
                and n < len(st.pages)):
            st.tail_id = os.urandom(32)
            meta.tail_saves[req_id] = TailMove(st.tail_id, st.pages[n], n * self.bs,
                                               len(st.tokens) - n * self.bs)

    def build_connector_meta(self, scheduler_output):
        meta = KvstashConnectorMetadata()
        sched = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            st = self._reqs.get(new.req_id)
            if st is None:
                continue
            st.pages = list(new.block_ids[0])
            self._plan(meta, new.req_id, st, new.num_computed_tokens + sched.get(new.req_id, 0))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self._reqs.get(req_id)
            if st is None:
                continue
            pages = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                st.pages = list(pages[0]) if pages else []
            elif pages:
                st.pages.extend(pages[0])
            self._plan(meta, req_id, st, cached.num_computed_tokens[i] + sched.get(req_id, 0))
        return meta

    def request_finished(self, request, block_ids):
        st = self._reqs.pop(request.request_id, None)
        if self.hands_over and st is not None and st.tail_id is not None:
            # for the decode instance's request: kv_transfer_params
            return False, {"kvstash_tail": st.tail_id.hex()}
        return False, None

    # ---- worker side -------------------------------------------------------------

    def register_kv_caches(self, kv_caches):
        self._worker.register(kv_caches)

    def start_load_kv(self, forward_context, **kwargs: Any):
        meta = self._get_connector_metadata()
        if meta.loads or meta.tail_loads:
            self._worker.start_load(meta.loads, meta.tail_loads)

    def wait_for_layer_load(self, layer_name):
        self._worker.wait_layer(layer_name)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs: Any):
        meta = self._get_connector_metadata()
        if meta.saves or meta.tail_saves:
            self._worker.save_layer(layer_name, kv_layer, meta.saves, meta.tail_saves)

    def wait_for_save(self):
        if self.save_mode == "sync":
            self._worker.wait_saves()

    def get_block_ids_with_load_errors(self):
        return self._worker.take_load_errors()

    def shutdown(self):
        if self.role == KVConnectorRole.SCHEDULER:
            self._lookups.shutdown(wait=True)
            self._daemon.close()
        else:
            self._worker.close()


def _layer_index(name):
    from vllm.model_executor.models.utils import extract_layer_index

    return extract_layer_index(name)


def _layout_for(cache, connector):
    c = connector.codec
    if cache.device.type == "cpu":
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

        isa = _get_attn_isa(cache.dtype, c.bs, c.d)
        if isa != "vec":
            raise ValueError("kvstash: vLLM's CPU attention here uses the %r cache layout; "
                             "the connector reads the \"vec\" layout only (float32, or a "
                             "block size that is a multiple of 32 on a CPU without AMX)" % isa)
        return _paged.CpuVecLayout(cache, c.h, c.d, c.bs)
    if cache.device.type == "cuda":
        return _paged.CudaFlashLayout(cache, c.h, c.d, c.bs)
    raise ValueError("kvstash: a KV cache on %s is not supported" % cache.device)


class _Worker:
    """The worker half: the paged caches, a loader and a saver thread,
    each with its own connection."""

    def __init__(self, connector, args):
        self.c = connector
        self.codec = connector.codec
        self.load_daemon = _Daemon(*args, "worker's loads")
        self.save_daemon = _Daemon(*args, "worker's saves")
        self.caches = {}
        self.index = {}
        self.layout = None
        self.load_errors = set()
        self.load_thread = None
        self.layer_ready = {}
        self.saves = queue.Queue()
        self.saves_busy = 0
        self.saves_cv = threading.Condition()
        self.saver = threading.Thread(target=self._save_loop, name="kvstash-save", daemon=True)
        self.saver.start()

    def register(self, kv_caches):
        for name, cache in kv_caches.items():
            self.index[name] = _layer_index(name)
            self.caches[name] = cache
            if self.layout is None:
                self.layout = _layout_for(cache, self.c)
            else:
                type(self.layout)(cache, self.codec.h, self.codec.d, self.codec.bs)
        got = sorted(self.index.values())
        if got != list(range(self.codec.layers)):
            raise ValueError("kvstash: the model has %d layers, the KV caches name %s"
                             % (self.codec.layers, got))
        logger.info("kvstash: %d layers in vLLM's %s layout", len(got), self.layout.name)

    # loads

    def start_load(self, loads, tails):
        self.wait_load()
        self.layer_ready = {name: threading.Event() for name in self.caches}
        self.load_thread = threading.Thread(target=self._load, args=(loads, tails),
                                            name="kvstash-load", daemon=True)
        self.load_thread.start()

    def _load_tails(self, client, name, layer, tails, failed):
        for t in tails:
            if t.page in failed:
                continue
            try:
                obj = client.tail_take(_tail_key(t.transfer_id, layer),
                                       cap=self.codec.tail_size)
                if obj is None:
                    raise KeyError("no tail")
                k, v = self.codec.decode_tail(obj, layer, t.first_pos, t.rows)
                self.layout.write_rows(self.caches[name], t.page, k, v)
            except Exception:
                failed.add(t.page)

    def _load(self, loads, tails):
        moves = [m for ms in loads.values() for m in ms]
        tails = list(tails.values())
        failed = set()
        client = self.load_daemon.get()
        for name in sorted(self.caches, key=self.index.get):
            layer = self.index[name]
            try:
                if client is None:
                    raise OSError("not connected")
                todo = [m for m in moves if m.page not in failed]
                objs = client.get([(m.span, layer) for m in todo], cap=self.codec.object_size)
                good, ks, vs = [], [], []
                for m, obj in zip(todo, objs):
                    try:
                        if obj is None:
                            raise KeyError("a miss")
                        k, v = self.codec.decode(obj, layer, m.index)
                    except Exception:
                        failed.add(m.page)
                        continue
                    good.append(m.page)
                    ks.append(k)
                    vs.append(v)
                if good:
                    self.layout.write(self.caches[name], good, torch.stack(ks), torch.stack(vs))
                self._load_tails(client, name, layer, tails, failed)
                self.load_daemon.ok()
            except Exception as e:
                self.load_daemon.failed(e)
                failed.update(m.page for m in moves)
                failed.update(t.page for t in tails)
            finally:
                self.layer_ready[name].set()
        if failed:
            logger.warning("kvstash: %d of %d blocks failed to load: recomputed",
                           len(failed), len(moves) + len(tails))
        self.load_errors |= failed

    def wait_layer(self, name):
        ev = self.layer_ready.get(name)
        if ev is not None:
            ev.wait()

    def wait_load(self):
        if self.load_thread is not None:
            self.load_thread.join()
            self.load_thread = None

    def take_load_errors(self):
        self.wait_load()
        out, self.load_errors = self.load_errors, set()
        return out

    # saves

    def save_layer(self, name, cache, saves, tails):
        layer = self.index[name]
        moves = [m for ms in saves.values() for m in ms]
        if moves:
            k, v = self.layout.read(cache, [m.page for m in moves])
            self._queue(self._save_blocks, layer, moves, k, v)
        for t in tails.values():
            k, v = self.layout.read_rows(cache, t.page, t.rows)
            self._queue(self._save_tail, layer, t, k, v)

    def _queue(self, *job):
        with self.saves_cv:
            self.saves_busy += 1
        self.saves.put(job)

    def _save_loop(self):
        while True:
            job = self.saves.get()
            if job is None:
                return
            try:
                job[0](*job[1:])
            finally:
                with self.saves_cv:
                    self.saves_busy -= 1
                    self.saves_cv.notify_all()

    def _save_tail(self, layer, t, k, v):
        try:
            obj = self.codec.encode_tail(layer, t.first_pos, t.transfer_id, k, v)
        except Exception as e:
            logger.warning("kvstash: the tail of layer %d not handed over: %s", layer, e)
            return
        client = self.save_daemon.get()
        if client is None:
            return
        try:
            client.tail_put(_tail_key(t.transfer_id, layer), obj, ttl_ms=60000)
            self.save_daemon.ok()
        except Exception as e:
            self.save_daemon.failed(e)

    def _save_blocks(self, layer, moves, k, v):
        objs = []
        for j, m in enumerate(moves):
            try:
                objs.append(self.codec.encode(layer, m.index, m.span, m.parent, k[j], v[j]))
            except Exception as e:
                logger.warning("kvstash: block %d of layer %d not saved: %s", m.index, layer, e)
        client = self.save_daemon.get()
        if client is None or not objs:
            return
        try:
            bad = [r for r in client.put(objs) if r]
            self.save_daemon.ok()
        except Exception as e:
            self.save_daemon.failed(e)
            return
        if bad:
            logger.warning("kvstash: %d of %d blocks of layer %d refused (error %d)",
                           len(bad), len(objs), layer, bad[0])

    def wait_saves(self):
        with self.saves_cv:
            while self.saves_busy:
                self.saves_cv.wait()

    def close(self):
        self.wait_load()
        self.wait_saves()
        self.saves.put(None)
        self.saver.join(5)
        self.load_daemon.close()
        self.save_daemon.close()
