"""kvstash.transformers on small Llama-family models with random weights
(built from configs, nothing downloaded): generate() through the Cache and
the "kvstash" attention.  With R longer than the whole generation nothing
is quantized and the tokens equal transformers' own cache with SDPA (also
for a left-padded batch, and for Qwen2 and Mistral); with quantization on,
each decode step is the attention over exactly what the cache holds; a
second request with the same prompt attaches the published prefix, skips
computing it, and decodes the same way every time it does; namespaces do
not share.  Runs on the GPU with CUDA tensors where one is present (set
KVSTASH_TEST_DEVICE=cpu to force the CPU), on the CPU otherwise; skips
without torch or transformers."""

import copy
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import kvstash  # noqa: E402
import kvstash.transformers as kt  # noqa: E402

DEVICE = os.environ.get("KVSTASH_TEST_DEVICE") or ("cuda" if torch.cuda.is_available() and kvstash.kernels.available() else "cpu")
# CUDA keeps 16-bit residuals: fp16 there, fp32 on the CPU
DTYPE = torch.float16 if DEVICE == "cuda" else torch.float32
TOL = 2e-2 if DEVICE == "cuda" else 1e-4


def small_config(kind="llama", **kw):
    common = dict(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    common.update(kw)
    if kind == "llama":
        return transformers.LlamaConfig(**common)
    if kind == "qwen2":
        return transformers.Qwen2Config(use_sliding_window=False, **common)
    if kind == "mistral":
        return transformers.MistralConfig(sliding_window=None, **common)
    raise ValueError(kind)


def model_of(config, attn, seed=0):
    torch.manual_seed(seed)
    # a config of its own: from_config records the attention in it
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=attn)
    return model.to(device=DEVICE, dtype=DTYPE).eval()


def prompt(n, seed=1, batch=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 1000, (batch, n), generator=g).to(DEVICE)


def generate(model, ids, cache=None, new=24, mask=None):
    kw = dict(max_new_tokens=new, do_sample=False, output_scores=True, return_dict_in_generate=True,
              pad_token_id=0)
    if cache is not None:
        kw["past_key_values"] = cache
    if mask is not None:
        kw["attention_mask"] = mask
    with torch.no_grad():
        out = model.generate(ids, **kw)
    return out.sequences, torch.stack(out.scores).float()


def forced(model, cache, ids, continuation, mask=None):
    """Logits of the prompt's last position and of each forced next token
    (the same tokens for both caches, so a near-tie cannot make them part)."""
    logits = []
    with torch.no_grad():
        out = model(ids, past_key_values=cache, attention_mask=mask, use_cache=True)
        logits.append(out.logits[:, -1].float())
        for t in range(continuation.shape[1]):
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = model(continuation[:, t:t + 1], past_key_values=cache, attention_mask=mask,
                        use_cache=True)
            logits.append(out.logits[:, -1].float())
    return torch.stack(logits)


def compare_with_transformers(cfg, ids, mask=None, new=23):
    ref_model, model = model_of(cfg, "sdpa"), model_of(cfg, "kvstash")
    want_tokens, _ = generate(ref_model, ids, new=new, mask=mask)
    cont = want_tokens[:, ids.shape[1]:]
    want = forced(ref_model, transformers.DynamicCache(), ids, cont, mask)
    cache = kt.Cache(model.config, residual=256, model_id="t")
    got = forced(model, cache, ids, cont, mask)
    assert torch.allclose(got, want, atol=TOL * 10, rtol=TOL)
    if DEVICE == "cpu":
        # fp32 on both sides: greedy decoding agrees token for token
        tokens, _ = generate(model, ids, kt.Cache(model.config, residual=256, model_id="t"),
                             new=new, mask=mask)
        assert torch.equal(tokens, want_tokens)
    return cache


def test_unquantized_equals_transformers():
    ids = prompt(40)
    cache = compare_with_transformers(small_config(), ids)
    assert cache.rt.device == DEVICE
    assert cache.seqs[0].tokens(0) == 40 + 23


def test_padded_batch_equals_transformers():
    ids = prompt(35, seed=4, batch=2)
    mask = torch.ones_like(ids)
    mask[0, :15] = 0  # row 0: a 20-token prompt, left-padded
    ids[0, :15] = 0
    cache = compare_with_transformers(small_config(), ids, mask)
    assert cache.seqs[0].tokens(1) == 20 + 23 and cache.seqs[1].tokens(1) == 35 + 23


@pytest.mark.parametrize("kind", ["qwen2", "mistral"])
def test_other_families(kind):
    compare_with_transformers(small_config(kind), prompt(30, seed=2), new=16)


def test_quantized_step_is_attention_over_the_cache():
    """With R = 32 the history is 2-bit: the next step's logits through the
    fused attention equal transformers' attention over the K/V the cache
    holds (dequantized spans and full-precision residuals)."""
    cfg = small_config()
    model = model_of(cfg, "kvstash")
    ref_model = model_of(cfg, "sdpa")
    ids = prompt(100, seed=3)
    cache = kt.Cache(model.config, residual=32, model_id="t")
    seqs, _ = generate(model, ids, cache, new=20)
    assert cache.seqs[0].block_count(0) == (100 + 19) // 32
    assert cache.rt.stats()["sealed"] == cache.num_layers * ((100 + 19) // 32)

    held = transformers.DynamicCache()
    like = torch.empty(0, dtype=DTYPE, device=DEVICE)
    for layer in range(cache.num_layers):
        k, v = kt._row_history(cache.seqs[0], layer, like)
        held.update(k[None], v[None], layer)
    nxt = seqs[:, -1:]
    with torch.no_grad():
        got = model(nxt, past_key_values=cache).logits.float()
        want = ref_model(nxt, past_key_values=held).logits.float()
    assert torch.allclose(got, want, atol=TOL * 10, rtol=TOL)


def test_prefix_reuse(tmp_path):
    cfg = small_config()
    model = model_of(cfg, "kvstash")
    store = kvstash.BlockStore.local(tmp_path / "store", dram=64 << 20, nvme=64 << 20, segment=8 << 20)
    ids = prompt(150, seed=5)

    first = kt.Cache(model.config, store=store, residual=32, namespace="a", model_id="t")
    assert first.attach(ids, dtype=DTYPE) == 0  # nothing cached yet; records the ids
    generate(model, ids, first, new=8)
    first.rt.flush()
    assert first.rt.stats()["published"] == cfg.num_hidden_layers * (150 // 32)

    seen = []
    hook = model.model.embed_tokens.register_forward_hook(lambda m, i, o: seen.append(i[0].shape[1]))
    runs = []
    for _ in range(2):
        cache = kt.Cache(model.config, store=store, residual=32, namespace="a", model_id="t")
        attached = cache.attach(ids, dtype=DTYPE)
        assert attached == 96  # 4 spans cached; the last R + 22 tokens computed
        seen.clear()
        runs.append(generate(model, ids, cache, new=8))
        assert seen[0] == 150 - attached  # the prefill skipped the attached part
        assert cache.rt.stats()["attached"] == cfg.num_hidden_layers * 3
    hook.remove()
    assert torch.equal(runs[0][0], runs[1][0])
    assert torch.equal(runs[0][1], runs[1][1])

    other = kt.Cache(model.config, store=store, residual=32, namespace="b", model_id="t")
    assert other.attach(ids, dtype=DTYPE) == 0
    for c in (first, cache, other):
        c.close()
    store.close()


def test_prefix_reuse_through_kvstashd(daemon):
    """The same through a daemon: Cache(client=...) publishes there, a
    Cache of another connection attaches it, another tenant's does not."""
    cfg = small_config()
    model = model_of(cfg, "kvstash")
    ids = prompt(150, seed=6)
    first = kt.Cache(model.config, client=daemon.client(), residual=32, model_id="t")
    first.attach(ids, dtype=DTYPE)
    want = generate(model, ids, first, new=8)
    first.rt.flush()
    assert daemon.client().stat()["store"]["dram"]["blocks"] == cfg.num_hidden_layers * (150 // 32)

    runs = []
    for tenant in ("alice", "carol"):  # carol is bound to alice's namespace
        reader = daemon.client(tenant)
        cache = kt.Cache(model.config, client=reader, residual=32, model_id="t")
        assert cache.attach(ids, dtype=DTYPE) == 96
        runs.append(generate(model, ids, cache, new=8))
        assert reader.counters()["got"] == cfg.num_hidden_layers * 3
        cache.close()
    assert torch.equal(runs[0][0], runs[1][0])
    assert torch.equal(runs[0][1], runs[1][1])
    assert runs[0][0].shape == want[0].shape

    other = kt.Cache(model.config, client=daemon.client("bob"), residual=32, model_id="t")
    assert other.attach(ids, dtype=DTYPE) == 0
    with pytest.raises(ValueError):
        kt.Cache(model.config, client=reader, store=reader)
    for c in (first, other):
        c.close()


def test_wrong_attention_is_refused():
    model = model_of(small_config(), "sdpa")
    with pytest.raises(RuntimeError, match="kvstash"):
        generate(model, prompt(10), kt.Cache(model.config, residual=256), new=4)


def test_unsupported_layouts():
    with pytest.raises(ValueError):
        kt.Cache(transformers.MistralConfig(sliding_window=64, num_hidden_layers=2))
    cache = kt.Cache(small_config(), residual=256)
    with pytest.raises(NotImplementedError):
        cache.reorder_cache(torch.tensor([0]))


@pytest.mark.skipif(DEVICE != "cuda", reason="the CUDA runtime's dtypes (runs on the GPU machine)")
def test_float32_on_cuda_is_refused_with_the_remedy():
    cfg = small_config()
    cache = kt.Cache(cfg, residual=32, model_id="t")
    with pytest.raises(TypeError, match="dtype="):
        cache.attach(prompt(40), dtype=torch.float32)
