"""The slot KV cache: incremental == full recompute, rows at mixed positions, isolation of slots."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models.qwen3 import KVCache

TOL = dict(atol=1e-5, rtol=1e-5)


def embeds(model, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, model.cfg.hidden_size, generator=g)


@torch.no_grad()
def test_incremental_decode_equals_full_recompute(tiny_model):
    x = embeds(tiny_model, 20, 0)
    full = tiny_model.transformer(x[None])[0]
    cache = tiny_model.allocate_kv(2, 32)
    slot = torch.tensor([1])
    out = tiny_model.transformer.forward_cached(x[None, :12], cache, slot, torch.arange(12)[None])[0]
    steps = [out]
    for t in range(12, 20):
        steps.append(tiny_model.transformer.forward_cached(x[None, t : t + 1], cache, slot, torch.tensor([[t]]))[0])
    torch.testing.assert_close(torch.cat(steps), full, **TOL)


@torch.no_grad()
@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=4))
def test_chunked_prefill_equals_whole(tiny_model, chunks):
    x = embeds(tiny_model, sum(chunks), 1)
    full = tiny_model.transformer(x[None])[0]
    cache = tiny_model.allocate_kv(1, 40)
    outs, start = [], 0
    for n in chunks:
        pos = torch.arange(start, start + n)[None]
        outs.append(tiny_model.transformer.forward_cached(x[None, start : start + n], cache, torch.tensor([0]), pos)[0])
        start += n
    torch.testing.assert_close(torch.cat(outs), full, **TOL)


@torch.no_grad()
def test_batched_decode_rows_at_different_positions_equals_each_alone(tiny_model):
    lengths = [3, 11, 7, 1]
    seqs = [embeds(tiny_model, n + 1, 10 + i) for i, n in enumerate(lengths)]
    alone = [tiny_model.transformer(s[None])[0, -1] for s in seqs]
    cache = tiny_model.allocate_kv(6, 16)
    slots = torch.tensor([4, 0, 2, 5])  # any slot order
    for s, slot, n in zip(seqs, slots, lengths):
        tiny_model.transformer.forward_cached(s[None, :n], cache, slot[None], torch.arange(n)[None])
    x = torch.stack([s[-1] for s in seqs])[:, None]  # [B, 1, H]
    out = tiny_model.transformer.forward_cached(x, cache, slots, torch.tensor(lengths)[:, None], context_len=12)
    torch.testing.assert_close(out[:, 0], torch.stack(alone), **TOL)


@torch.no_grad()
def test_padded_rows_write_only_the_dummy_slot(tiny_model):
    cache = tiny_model.allocate_kv(3, 8)
    x = embeds(tiny_model, 4, 3)
    valid = torch.tensor([[True, True, False, False], [True, True, True, True]])
    slots = torch.tensor([0, 2])
    tiny_model.transformer.forward_cached(torch.stack([x, x]), cache, slots, torch.arange(4).expand(2, 4), valid)
    assert cache.k[:, 1].abs().sum() == 0 and cache.v[:, 1].abs().sum() == 0  # untouched slot
    assert cache.k[:, 0, :, 2:].abs().sum() == 0  # row 0 wrote only its 2 valid positions
    assert cache.k[:, 0, :, :2].abs().sum() > 0 and cache.k[:, 2, :, :4].abs().sum() > 0
    assert cache.k[:, cache.dummy_slot].abs().sum() > 0  # padding landed in the dummy slot


def test_cache_shape_and_copy_slot(tiny_model):
    cache = tiny_model.allocate_kv(4, 10)
    cfg = tiny_model.cfg.backbone
    assert cache.k.shape == (cfg.num_layers, 5, cfg.num_kv_heads, 10, cfg.head_dim)
    assert (cache.num_slots, cache.dummy_slot, cache.max_len) == (4, 4, 10)
    cache.k[:, 1, :, :6] = 1.0
    cache.copy_slot(1, 3, 6)
    assert torch.equal(cache.k[:, 3], cache.k[:, 1])
    with pytest.raises(ValueError, match="num_slots"):
        KVCache.allocate(cfg, 0, 10, dtype=torch.float32, device="cpu")
