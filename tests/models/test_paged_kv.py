"""The paged KV cache: the same bits as the contiguous slot cache, through block tables, on both the torch
path and the Triton kernels (run in Triton's interpreter without CUDA)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models import kernels
from v2.models.kernels import decode_attention as da

pytestmark = pytest.mark.exact


def _tables(rng: torch.Generator, lengths: list[int], size: int, width: int, num_blocks: int) -> torch.Tensor:
    """Scattered, disjoint block tables (rows padded with block 0, which no row uses)."""
    order = (torch.randperm(num_blocks - 1, generator=rng) + 1).tolist()
    tables = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        need = -(-n // size)
        tables[i, :need] = torch.tensor(order[:need])
        order = order[need:]
    return tables


@torch.no_grad()
@pytest.mark.parametrize("force", [False, True])
def test_paged_prefill_and_decode_equal_the_contiguous_cache_bit_for_bit(tiny_model, monkeypatch, force):
    """Three sequences prefilled in chunks, then decoded at mixed positions with a padding row: outputs and
    stored keys/values through 16-row blocks are the contiguous slot cache's exactly. `force`: the decode
    steps run the Triton kernels (the K/V write and the decode attention; prefill stays on torch, whose
    writes the kernel shares, since the interpreter is slow over many tokens)."""
    h, size, width = tiny_model.cfg.hidden_size, 16, 6
    g = torch.Generator().manual_seed(5)
    lengths = [40, 7, 77]
    seqs = [torch.randn(n + 3, h, generator=g) for n in lengths]
    slots = torch.tensor([2, 0, 1])
    contiguous = tiny_model.allocate_kv(3, width * size)
    paged = tiny_model.allocate_paged_kv(24, size)
    tables = _tables(g, [n + 3 for n in lengths], size, width, 24)
    for cache, index in ((contiguous, slots), (paged, tables)):
        outs = []
        for start, end in ((0, 5), (5, 33), (33, 80)):  # chunked prefill, right-padded
            n = [max(0, min(end, L) - start) for L in lengths]
            x = torch.stack([torch.nn.functional.pad(s[start:start + k], (0, 0, 0, end - start - k))
                             for s, k in zip(seqs, n)])
            pos = torch.arange(start, end).expand(3, -1)
            valid = torch.arange(end - start)[None] < torch.tensor(n)[:, None]
            outs.append(tiny_model.transformer.forward_cached(x, cache, index, pos, valid, end))
        monkeypatch.setattr(kernels, "FORCE", force)
        for step in range(2):  # decode, one padding row aimed at the dummy
            x = torch.cat([torch.stack([s[L + step] for s, L in zip(seqs, lengths)]), torch.zeros(1, h)])[:, None]
            pos = torch.tensor(lengths + [0])[:, None] + step
            dummy = torch.full_like(index[:1], cache.dummy_block)
            valid = torch.tensor([[True]] * 3 + [[False]])
            outs.append(tiny_model.transformer.forward_cached(x, cache, torch.cat([index, dummy]), pos, valid,
                                                              max(lengths) + step + 1)[:3])
        monkeypatch.setattr(kernels, "FORCE", False)
        if cache is contiguous:
            want = [o.clone() for o in outs]
        else:
            for got, expected in zip(outs, want):
                assert torch.equal(got, expected)
    for i, (slot, n) in enumerate(zip(slots.tolist(), lengths)):
        stored = paged.k[:, tables[i]].transpose(1, 2).flatten(2, 3)[:, :, : n + 3]  # [layers, Hkv, n + 3, D]
        assert torch.equal(stored, contiguous.k[:, slot, :, : n + 3])
        stored = paged.v[:, tables[i]].transpose(1, 2).flatten(2, 3)[:, :, : n + 3]
        assert torch.equal(stored, contiguous.v[:, slot, :, : n + 3])
    assert not paged.k[:, 0].any()  # block 0 belongs to no row: nothing wrote it


def _pages(seed: int, blocks: int, hkv: int, size: int, d: int):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(blocks + 1, hkv, size, d, generator=g), torch.randn(blocks + 1, hkv, size, d, generator=g),
            g)


@pytest.mark.skipif(da.triton is None, reason="needs triton")
@settings(max_examples=10, deadline=None)
@given(st.data())
def test_paged_kernel_equals_the_reference_and_reads_only_its_own_blocks(data):
    size = data.draw(st.sampled_from([1, 5, 16, 64, 100]), label="block size")
    hkv, group = data.draw(st.integers(1, 2), label="kv heads"), data.draw(st.sampled_from([1, 4]), label="group")
    context = data.draw(st.sampled_from([1, 63, 256, 300]), label="context")
    b = data.draw(st.integers(1, 3), label="rows")
    lengths = data.draw(st.lists(st.integers(1, context), min_size=b, max_size=b), label="lengths")
    width = -(-context // size)
    k, v, g = _pages(data.draw(st.integers(0, 99), label="seed"), width * b + 2, hkv, size, 16)
    tables = _tables(g, lengths, size, width, width * b + 2)
    q = torch.randn(b, hkv * group, 16, generator=g) * 2
    lens = torch.tensor(lengths)
    want = da.paged_decode_attention_reference(q.double(), k.double(), v.double(), tables, lens, context).float()
    owned = torch.zeros(k.shape[0], size, dtype=torch.bool)  # [blocks, rows] each key some row may read
    for i, n in enumerate(lengths):
        for p in range(n):
            owned[tables[i, p // size], p % size] = True
    k[~owned[:, None, :, None].expand_as(k)] = float("nan")  # poison every key no row may read
    v[~owned[:, None, :, None].expand_as(v)] = float("nan")
    out = da._paged_triton(q, k, v, tables, lens, context)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, want, atol=2e-5, rtol=2e-5)


@pytest.mark.skipif(da.triton is None, reason="needs triton")
def test_paged_kernel_gives_the_contiguous_kernels_bits():
    """The same keys laid out in 16-row blocks or in one slot: the kernel's tiles and sums are the same."""
    k, v, g = _pages(3, 3, 2, 700, 16)
    q = torch.randn(3, 8, 16, generator=g)
    slots, lengths = torch.tensor([1, 3, 0]), torch.tensor([700, 300, 1])
    want = da._decode_attention_triton(q, k, v, slots, lengths, 700)
    size, width = 16, -(-700 // 16)
    perm = torch.randperm(4 * width, generator=g)  # slot s's block j -> page perm[s * width + j]
    pk = torch.zeros(4 * width + 1, 2, size, 16)
    pv = torch.zeros_like(pk)
    padded_k = torch.nn.functional.pad(k, (0, 0, 0, width * size - 700))  # [4, Hkv, width * 16, D]
    padded_v = torch.nn.functional.pad(v, (0, 0, 0, width * size - 700))
    # [4, Hkv, width, 16, D] -> [4, width, Hkv, 16, D] -> [4 * width, Hkv, 16, D]
    pk[perm] = padded_k.view(4, 2, width, size, 16).transpose(1, 2).reshape(-1, 2, size, 16)
    pv[perm] = padded_v.view(4, 2, width, size, 16).transpose(1, 2).reshape(-1, 2, size, 16)
    tables = perm.view(4, width)[slots]
    assert torch.equal(da._paged_triton(q, pk, pv, tables, lengths, 700), want)
    torch.testing.assert_close(da.paged_decode_attention_reference(q, pk, pv, tables, lengths, 700),
                               da.decode_attention_reference(q, k, v, slots, lengths, 700), atol=0, rtol=0)
