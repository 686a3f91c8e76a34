"""Hugging Face transformers integration: a Cache whose history lives in
kvstash's 2-bit blocks, and an attention function registered as "kvstash".

    import kvstash.transformers as kt
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="kvstash")
    cache = kt.Cache(model.config, client=kvstash.Client("127.0.0.1:7070", "my.key"))
    cache.attach(input_ids)          # prefix reuse: the cached part is skipped
    model.generate(input_ids, past_key_values=cache, max_new_tokens=64)

How the two cooperate.  Cache.update() keeps the layer's new K/V and
returns what the engine's own attention needs: for a decode step, the new
token alone (the attention function does the rest); for a prompt, the
prompt's K/V after the sequence's history (dequantized 2-bit blocks and
full-precision residuals), laid out at the model's padded positions.  The
attention function then:
  - decode (one query token a row): one fused kvstash step for the whole
    batch -- append, attention over the 2-bit pages and the residuals,
    seal at R, pop -- on the GPU with CUDA (the CPU reference otherwise);
    padding never enters a sequence, so the model's mask is not needed;
  - prompt: the engine's attention (transformers' SDPA) over the K/V that
    update() returned, then the prompt's real tokens (padding dropped, as
    the mask says) go into each row's sequence, sealing blocks; after the
    last layer, rows whose token ids are known publish their blocks.
Llama-family attention (Llama, Mistral, Qwen2; GQA) with full-attention
layers only, on transformers with per-layer caches (4.56 and later).  Beam
search (reorder_cache) and cropping are not supported.
"""

import threading
import weakref

import torch
from transformers.cache_utils import Cache as _HFCache
from transformers.cache_utils import CacheLayerMixin

try:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
except ImportError:  # older layouts
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: F811

from . import _lib
from .runtime import BlockStore, Runtime

ATTN_IMPLEMENTATION = "kvstash"

_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}
_active = threading.local()


def _text_config(config):
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if get is not None else config


class _Layer(CacheLayerMixin):
    """What transformers asks of one layer; the data lives in the runtime."""

    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(self, owner, index):
        super().__init__()
        self._owner = owner
        self._index = index

    def lazy_initialization(self, key_states, value_states):
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        return self._owner._update(key_states, value_states, self._index)

    def get_mask_sizes(self, query_length):
        return self._owner._seen[self._index] + query_length, 0

    def get_seq_length(self):
        return self._owner._seen[self._index]

    def get_max_length(self):
        return -1

    def reset(self):
        pass

    def offload(self):
        pass

    def prefetch(self):
        pass

    def reorder_cache(self, beam_idx):
        raise NotImplementedError("kvstash.transformers.Cache does not support beam search")

    def crop(self, tokens_to_remove):
        raise NotImplementedError("kvstash.transformers.Cache cannot be cropped")

    def batch_repeat_interleave(self, repeats):
        raise NotImplementedError("kvstash.transformers.Cache cannot repeat its batch")

    def batch_select_indices(self, indices):
        raise NotImplementedError("kvstash.transformers.Cache cannot select batch rows")


class Cache(_HFCache):
    """A transformers Cache over a kvstash runtime.

    config      the model's config (layers, heads, head_dim)
    client      a kvstash.Client: publish to and attach from that kvstashd
                (and hand requests over through it)
    store       a kvstash.BlockStore, a directory for a local one, or None
                (no publish, no attach); give one of client and store
    namespace   the tenant's cache salt: prefixes never match across them
    residual    R (= the span S of a block), group G, bits, order ("kivi"
                or "paper"): the quantisation, part of the block ids
    max_tokens  per row; pool_pages: the page pool (default: every row's
                max_tokens in every layer)
    device      "auto" (CUDA for CUDA tensors), "cpu" or "cuda"
    publish     publish each row's prompt blocks once its prefill is done
                (rows whose token ids are known: see attach / set_prompt)
    model_id    what the fingerprint names the model by (default: the
                config's name_or_path and model_type)
    """

    def __init__(self, config, store=None, namespace="", residual=128, group=32, bits=2,
                 order="kivi", max_tokens=None, pool_pages=None, device="auto", publish=True,
                 model_id=None, meta_dtype="f16", client=None):
        cfg = _text_config(config)
        types = getattr(cfg, "layer_types", None)
        sliding = (any(t != "full_attention" for t in types) if types
                   else bool(getattr(cfg, "sliding_window", None))
                   and getattr(cfg, "use_sliding_window", True))
        if sliding:
            raise ValueError("kvstash.transformers.Cache supports full-attention layers only "
                             "(no sliding window)")
        self.num_layers = cfg.num_hidden_layers
        super().__init__(layers=[_Layer(self, i) for i in range(self.num_layers)])
        self.q_heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.q_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scale = self.head_dim ** -0.5
        self.residual, self.group, self.bits, self.order = residual, group, bits, order
        self.max_tokens = max_tokens or min(getattr(cfg, "max_position_embeddings", 4096), 4096)
        self.pool_pages = pool_pages
        self.device_kind = device
        self.publish = publish
        self.namespace = namespace
        self.meta_dtype = meta_dtype
        self.model_id = model_id or "%s:%s" % (getattr(cfg, "_name_or_path", "") or "",
                                               getattr(cfg, "model_type", ""))
        if client is not None:
            if store is not None:
                raise ValueError("kvstash: give the Cache a client or a store, not both")
            store = client
        if isinstance(store, (str, bytes)) or hasattr(store, "__fspath__"):
            store = BlockStore.local(store)
        self.store = store
        self.rt = None
        self.batch = None
        self.seqs = []
        self._seen = [0] * self.num_layers
        self._valid = None  # [B, seen] bool: which padded positions are tokens
        self._pending = [None] * self.num_layers
        self._returned = [None] * self.num_layers
        self._ids_known = []
        self.attached = 0
        dtype = getattr(cfg, "dtype", None) or getattr(cfg, "torch_dtype", None) or torch.float32
        self.config_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype

    # ---- runtime ---------------------------------------------------------

    def _ensure(self, batch, dtype, device):
        if self.rt is not None:
            if batch != len(self.seqs):
                raise ValueError("kvstash: the batch changed from %d to %d rows" % (len(self.seqs), batch))
            return
        if dtype not in _DTYPES:
            raise TypeError("kvstash: K/V of %s; f16, bf16 or (CPU) f32 are supported" % dtype)
        kind = self.device_kind
        if kind == "auto":
            kind = "cuda" if device.type == "cuda" else "cpu"
        if kind == "cuda" and dtype == torch.float32:
            raise TypeError("kvstash: the CUDA runtime keeps f16 or bf16 K/V, not float32 (before "
                            "generate(), attach() takes the model's dtype from its config unless "
                            "given dtype=)")
        stream = None
        if kind == "cuda":
            stream = torch.cuda.current_stream(device).cuda_stream
        spans = -(-self.max_tokens // self.residual)
        pages = self.pool_pages or batch * self.num_layers * spans
        self.rt = Runtime(self.num_layers, self.q_heads, self.kv_heads, self.head_dim,
                          kv_dtype=_DTYPES[dtype], order=self.order, device=kind, group=self.group,
                          bits=self.bits, residual=self.residual, meta_dtype=self.meta_dtype,
                          scale=self.scale, max_tokens=self.max_tokens, pool_pages=pages,
                          model_id=self.model_id, namespace=self.namespace, store=self.store,
                          stream=stream)
        self.batch = self.rt.batch(batch)
        self.seqs = [self.batch.sequence() for _ in range(batch)]
        self._ids_known = [False] * batch
        self.dtype, self.torch_device = dtype, device
        self._valid = torch.zeros((batch, 0), dtype=torch.bool)

    # ---- token ids: prefix reuse and publishing ----------------------------

    def _rows(self, input_ids, attention_mask):
        ids = torch.as_tensor(input_ids)
        if ids.dim() == 1:
            ids = ids[None]
        rows = []
        for b in range(ids.shape[0]):
            row = ids[b]
            if attention_mask is not None:
                row = row[torch.as_tensor(attention_mask)[b].to(torch.bool).cpu()]
            rows.append(row.cpu().numpy())
        return ids, rows

    def set_prompt(self, input_ids, attention_mask=None, dtype=None, device=None):
        """Records each row's prompt token ids (padding dropped), which name
        its blocks when they are published.  Before generate()."""
        ids, rows = self._rows(input_ids, attention_mask)
        self._ensure(ids.shape[0], dtype or _config_dtype(self), device or ids.device)
        for seq, row, b in zip(self.seqs, rows, range(len(rows))):
            if seq.id_count == 0:
                seq.append_ids(row)
            self._ids_known[b] = True

    def attach(self, input_ids, dtype=None, device=None):
        """Records the prompt ids and attaches the longest cached prefix all
        rows share (unpadded prompts of one length); returns the tokens
        attached, which generate() then skips.  Before generate().  @dtype
        is the model's K/V dtype (default: its config's, which a model cast
        with .to() does not change), @device its device (default: the
        ids')."""
        ids, rows = self._rows(input_ids, None)
        if any(self._seen):
            raise ValueError("kvstash: attach() is for a fresh cache")
        self._ensure(ids.shape[0], dtype or _config_dtype(self), device or ids.device)
        limit = min(self.rt.lookup_prefix(row) for row in rows) if self.store is not None else 0
        while True:
            kept = []
            for seq, row in zip(self.seqs, rows):
                seq.reset()
                seq.attach_prefix(row, limit=limit)
                kept.append(seq.attach_finish())
            if min(kept) == max(kept):
                break
            limit = min(kept)  # a block went missing in some row: all take the shorter prefix
        self._ids_known = [True] * len(rows)
        self.attached = kept[0]
        self._seen = [self.attached] * self.num_layers
        self._valid = torch.ones((len(rows), self.attached), dtype=torch.bool)
        return self.attached

    # ---- what transformers calls -----------------------------------------

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        return self._update(key_states, value_states, layer_idx)

    def _update(self, key_states, value_states, layer):
        B, _, q_len, _ = key_states.shape
        if self._pending[layer] is not None:
            raise RuntimeError("kvstash: the model's attention did not consume the last update of "
                               "layer %d; load the model with attn_implementation=\"kvstash\"" % layer)
        self._ensure(B, key_states.dtype, key_states.device)
        self._pending[layer] = (key_states, value_states)
        if q_len == 1 and self._seen[layer] > 0:
            keys, values = key_states, value_states
        else:
            past = self._past(layer, key_states)
            if past is None:
                keys, values = key_states, value_states
            else:
                keys = torch.cat([past[0], key_states], dim=2)
                values = torch.cat([past[1], value_states], dim=2)
        self._returned[layer] = keys
        _active.cache = weakref.ref(self)
        return keys, values

    def get_seq_length(self, layer_idx=0):
        return self._seen[layer_idx] if layer_idx < self.num_layers else 0

    def get_mask_sizes(self, query_length, layer_idx=0):
        return self._seen[layer_idx] + query_length, 0

    def get_max_length(self, layer_idx=None):
        return -1

    def reorder_cache(self, beam_idx):
        raise NotImplementedError("kvstash.transformers.Cache does not support beam search")

    def crop(self, tokens_to_remove):
        raise NotImplementedError("kvstash.transformers.Cache cannot be cropped")

    def reset(self):
        for seq in self.seqs:
            seq.reset()
        self._seen = [0] * self.num_layers
        self._valid = torch.zeros((len(self.seqs), 0), dtype=torch.bool)
        self._ids_known = [False] * len(self.seqs)
        self.attached = 0

    def close(self):
        if self.rt is not None:
            try:
                self.rt.flush()
            except _lib.KvsError as e:
                # an unreachable kvstashd: the blocks were not kept (the
                # library logged the outage); generation went on
                if e.code != _lib.ECONN:
                    raise
            self.rt.close()
            self.rt = None
            self.batch = None
            self.seqs = []

    # ---- the sequence's history for the engine's prompt attention ---------

    def _past(self, layer, like):
        """[B, kv, seen, D] of the history at the padded positions (zeros
        at padding), or None when empty."""
        seen = self._seen[layer]
        if seen == 0:
            return None
        B = len(self.seqs)
        k = torch.zeros((B, self.kv_heads, seen, self.head_dim), dtype=like.dtype, device=like.device)
        v = torch.zeros_like(k)
        for b, seq in enumerate(self.seqs):
            rk, rv = _row_history(seq, layer, like)
            where = self._valid[b, :seen].nonzero().flatten().to(like.device)
            k[b][:, where, :] = rk
            v[b][:, where, :] = rv
        return k, v

    # ---- the attention ------------------------------------------------------

    def _attention(self, module, query, key, value, attention_mask, dropout, scaling, **kwargs):
        layer = module.layer_idx
        k_new, v_new = self._pending[layer]
        self._pending[layer] = None
        if scaling is not None and abs(scaling - self.scale) > 1e-6 * self.scale:
            raise ValueError("kvstash: attention scaling %g, the cache was built for %g" % (scaling, self.scale))
        B, Hq, q_len, D = query.shape
        if q_len == 1 and self._seen[layer] > 0:
            q = query[:, :, 0, :].contiguous()
            out = torch.empty((B, Hq, D), dtype=query.dtype, device=query.device)
            self.batch.step(layer, q, k_new[:, :, 0, :].contiguous(), v_new[:, :, 0, :].contiguous(), out)
            self._advance(layer, torch.ones((B, 1), dtype=torch.bool))
            return out.unsqueeze(1), None

        out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                        scaling=scaling, **kwargs)
        valid = _new_tokens(attention_mask, B, q_len)
        for b, seq in enumerate(self.seqs):
            sel = valid[b]
            kb, vb = k_new[b], v_new[b]
            if not bool(sel.all()):
                idx = sel.nonzero().flatten().to(kb.device)
                kb, vb = kb[:, idx, :], vb[:, idx, :]
            if kb.shape[1]:
                seq.prefill(layer, kb.contiguous(), vb.contiguous())
        self._advance(layer, valid)
        if layer == self.num_layers - 1 and self.publish and self.store is not None:
            for b, seq in enumerate(self.seqs):
                if self._ids_known[b]:
                    seq.publish()
        return out, None

    def _advance(self, layer, valid):
        self._seen[layer] += valid.shape[1]
        if layer == 0:
            self._valid = torch.cat([self._valid, valid.cpu()], dim=1)


def _config_dtype(cache):
    return cache.config_dtype


def _row_history(seq, layer, like):
    """One row's [kv, T, D] Keys and Values as the decode attention sees
    them: sealed spans dequantized, then the full-precision residuals."""
    rt = seq.rt
    blocks = seq.block_count(layer)
    parts_k, parts_v = [], []
    tail = None
    from .blocks import Block

    tail = Block(seq.tail(layer))
    rk, rv = tail.residuals()
    T = seq.tokens(layer)
    k_quant, v_quant = T - tail.r_k, T - tail.r_v
    if blocks:
        hk, hv = seq.history(layer, 0, blocks, like=like)
        hk = hk.permute(1, 0, 2, 3).reshape(rt.kv_heads, blocks * rt.span, rt.head_dim)
        hv = hv.permute(1, 0, 2, 3).reshape(rt.kv_heads, blocks * rt.span, rt.head_dim)
        parts_k.append(hk[:, :k_quant])
        parts_v.append(hv[:, :v_quant])
    parts_k.append(torch.from_numpy(rk).to(device=like.device, dtype=like.dtype))
    parts_v.append(torch.from_numpy(rv).to(device=like.device, dtype=like.dtype))
    tail.close()
    return torch.cat(parts_k, dim=1), torch.cat(parts_v, dim=1)


def _new_tokens(attention_mask, B, q_len):
    """[B, q_len] bool: which of the new positions are tokens (not padding),
    from the mask the engine's attention got (None: all)."""
    if attention_mask is None or attention_mask.dim() != 4:
        return torch.ones((B, q_len), dtype=torch.bool)
    last = attention_mask[:, 0, -1, -q_len:]
    if last.dtype == torch.bool:
        valid = last
    else:
        valid = last == 0
    if valid.shape[0] != B:
        valid = valid.expand(B, -1)
    return valid.cpu()


def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """The "kvstash" attention: decode steps through the runtime's fused
    attention when `key` came from a kvstash Cache's update, otherwise
    transformers' SDPA."""
    ref = getattr(_active, "cache", None)
    cache = ref() if ref is not None else None
    layer = getattr(module, "layer_idx", None)
    if cache is None or layer is None or layer >= cache.num_layers or cache._returned[layer] is not key:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    cache._returned[layer] = None
    kwargs.pop("is_causal", None)
    return cache._attention(module, query, key, value, attention_mask, dropout, scaling, **kwargs)


def register():
    """Registers "kvstash" with transformers' attention interface (and its
    masks as SDPA's).  Done on import; harmless to repeat."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_IMPLEMENTATION, attention)
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)
    except ImportError:
        pass


register()

__all__ = ["ATTN_IMPLEMENTATION", "Cache", "attention", "register"]
