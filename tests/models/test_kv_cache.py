"""The slot KV cache: incremental == full recompute, rows at mixed positions, isolation of slots."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models.kv_cache import KVCache, PagedKVCache

pytestmark = pytest.mark.exact

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


def test_cache_shapes_and_block_copies(tiny_model):
    cache = tiny_model.allocate_kv(4, 10)
    cfg = tiny_model.cfg.backbone
    assert cache.k.shape == (cfg.num_layers, 5, cfg.num_kv_heads, 10, cfg.head_dim)
    assert (cache.num_slots, cache.dummy_slot, cache.max_len) == (4, 4, 10)
    with pytest.raises(ValueError, match="num_slots"):
        KVCache.allocate(cfg, 0, 10, dtype=torch.float32, device="cpu")
    pages = tiny_model.allocate_paged_kv(6, 4)
    assert pages.k.shape == (cfg.num_layers, 7, cfg.num_kv_heads, 4, cfg.head_dim)
    assert (pages.num_blocks, pages.dummy_block, pages.block_size) == (6, 6, 4)
    pages.k[:, 1], pages.v[:, 2] = 1.0, 2.0
    pages.copy_blocks(torch.tensor([1, 2]), torch.tensor([3, 5]))  # copy-on-write of two blocks at once
    assert torch.equal(pages.k[:, 3], pages.k[:, 1]) and torch.equal(pages.v[:, 5], pages.v[:, 2])
    assert not pages.k[:, [0, 2, 4, 5]].any() and not pages.v[:, [0, 1, 3, 4]].any()
    assert PagedKVCache.block_bytes(cfg, 4, torch.bfloat16) == pages.k[:, 0].numel() * 2 * 2
    with pytest.raises(ValueError, match="num_blocks"):
        PagedKVCache.allocate(cfg, 0, 4, dtype=torch.float32, device="cpu")
