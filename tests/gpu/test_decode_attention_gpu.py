"""On a GPU: the decode attention kernel at the release's head layout, in bf16, and under graph replay."""

from __future__ import annotations

import pytest
import torch

from v2.models.kernels import decode_attention as da

pytestmark = pytest.mark.gpu


def _cache(seed: int, slots: int, max_len: int, dtype: torch.dtype = torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    k = torch.randn(slots + 1, 8, max_len, 128, generator=g, device="cuda").to(dtype)
    v = torch.randn(slots + 1, 8, max_len, 128, generator=g, device="cuda").to(dtype)
    return k, v


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 1e-2), (torch.float32, 1e-5)])
def test_kernel_matches_float64_reference_at_release_heads(dtype, tol):
    k, v = _cache(0, 16, 6144, dtype)
    q = torch.randn(16, 32, 128, device="cuda").to(dtype)
    slots = torch.randperm(16, device="cuda")
    lengths = torch.tensor([6144, 1, 255, 256, 257, 3000] + list(range(40, 400, 36)), device="cuda")
    out = da.decode_attention(q, k, v, slots, lengths, 6144)
    ref = da.decode_attention_reference(q.double(), k.double(), v.double(), slots, lengths, 6144)
    assert out.dtype == dtype and _rel_err(out, ref) < tol


def test_kernel_reads_only_each_rows_keys():
    k, v = _cache(1, 4, 2048)
    q = torch.randn(3, 32, 128, device="cuda").bfloat16()
    slots, lengths = torch.tensor([0, 2, 3], device="cuda"), torch.tensor([2048, 700, 1], device="cuda")
    want = da.decode_attention(q, k, v, slots, lengths, 2048)
    for s, n in zip(slots.tolist(), lengths.tolist()):
        k[s, :, n:], v[s, :, n:] = float("nan"), float("nan")
    k[[1, 4]], v[[1, 4]] = float("nan"), float("nan")
    assert torch.equal(da.decode_attention(q, k, v, slots, lengths, 2048), want)


def test_one_captured_graph_serves_any_lengths():
    k, v = _cache(2, 8, 1024)
    q = torch.randn(8, 32, 128, device="cuda").bfloat16()
    slots = torch.arange(8, device="cuda")
    lengths = torch.ones(8, dtype=torch.long, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        da.decode_attention(q, k, v, slots, lengths, 1024)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = da.decode_attention(q, k, v, slots, lengths, 1024)
    for trial in range(3):
        lengths.copy_(torch.randint(1, 1025, (8,), device="cuda"))
        graph.replay()
        assert torch.equal(out, da.decode_attention(q, k, v, slots, lengths, 1024)), trial


def _paged(k: torch.Tensor, v: torch.Tensor, size: int, seed: int):
    """The same keys in scattered blocks: [S + 1, Hkv, L, D] -> pages [(S + 1) * W, Hkv, size, D], tables [S + 1, W]."""
    s, hkv, length, d = k.shape
    width = length // size
    order = torch.randperm(s * width, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
    pages = []
    for x in (k, v):
        p = torch.empty(s * width, hkv, size, d, device="cuda", dtype=x.dtype)
        # [S, Hkv, W, size, D] -> [S, W, Hkv, size, D] -> [S * W, Hkv, size, D]
        p[order] = x.view(s, hkv, width, size, d).transpose(1, 2).reshape(-1, hkv, size, d)
        pages.append(p)
    return pages[0], pages[1], order.view(s, width)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_paged_kernel_gives_the_contiguous_kernels_bits_at_release_heads(dtype):
    k, v = _cache(3, 16, 6144, dtype)
    q = torch.randn(16, 32, 128, device="cuda").to(dtype)
    slots = torch.randperm(16, device="cuda")
    lengths = torch.tensor([6144, 1, 15, 16, 17, 3000] + list(range(40, 400, 36)), device="cuda")
    pk, pv, tables = _paged(k, v, 16, 0)
    paged = da.paged_decode_attention(q, pk, pv, tables[slots], lengths, 6144)
    assert torch.equal(paged, da.decode_attention(q, k, v, slots, lengths, 6144))
    ref = da.decode_attention_reference(q.double(), k.double(), v.double(), slots, lengths, 6144)
    assert _rel_err(paged, ref) < (1e-2 if dtype == torch.bfloat16 else 1e-5)


def test_one_captured_graph_serves_any_lengths_and_block_tables():
    k, v = _cache(4, 8, 1024)
    pk, pv, tables = _paged(k, v, 16, 1)
    q = torch.randn(8, 32, 128, device="cuda").bfloat16()
    table = tables[:8].clone()  # the static input the graph reads
    lengths = torch.ones(8, dtype=torch.long, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        da.paged_decode_attention(q, pk, pv, table, lengths, 1024)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = da.paged_decode_attention(q, pk, pv, table, lengths, 1024)
    for trial in range(3):
        lengths.copy_(torch.randint(1, 1025, (8,), device="cuda"))
        table.copy_(tables[torch.randperm(9, device="cuda")[:8]])  # other rows' blocks, in place
        graph.replay()
        assert torch.equal(out, da.paged_decode_attention(q, pk, pv, table, lengths, 1024)), trial


def test_the_last_split_merges_the_same_bits_every_launch():
    """The merge happens in whichever split program finishes last: over many launches (and under graph
    replay) the output is the same bits, and the ticket counters are back at zero after each."""
    k, v = _cache(3, 8, 4096)
    q = torch.randn(8, 32, 128, device="cuda").bfloat16()
    slots = torch.arange(8, device="cuda")
    lengths = torch.tensor([4096, 4000, 2049, 1024, 513, 257, 256, 1], device="cuda")
    first = da.decode_attention(q, k, v, slots, lengths, 4096)
    for _ in range(50):
        assert torch.equal(da.decode_attention(q, k, v, slots, lengths, 4096), first)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = da.decode_attention(q, k, v, slots, lengths, 4096)
    for _ in range(20):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, first)
    assert not da._TICKETS[q.device].any()
    ref = da.decode_attention_reference(q.double(), k.double(), v.double(), slots, lengths, 4096)
    assert _rel_err(first, ref) < 1e-2
