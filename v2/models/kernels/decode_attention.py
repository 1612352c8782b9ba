"""Decode attention over a KV cache: one query token per row, each row reading only its own keys.

Owns: `paged_decode_attention(q, k_pages, v_pages, tables, lengths, max_context)`, the one-token attention
of a decode step through block tables, `decode_attention(..., slots, ...)` for a contiguous slot cache (a
slot is one block of max_len rows: the same kernel with one-entry tables), and the choice of how they
run. On CUDA (with Triton) it is a split-K ("flash-decoding") Triton kernel that reads the pages in
place: program (row, kv head, split) loads the row's real length from device memory, walks only keys
`split * SPLIT .. min((split + 1) * SPLIT, length) - 1` in tiles of BLOCK_N keys, finds each key's block
through the row's table (key n: block `tables[row, n // block_size]`, offset `n % block_size`), and
stores nothing when its split starts past the row's length; the last program of each (row, kv head) to
finish (a ticket counter: every split takes a ticket after its stores, the one holding the last ticket
merges every split by their log-sum-exp, in split order, and resets the counter for the next launch or
graph replay) writes the output, so a step is one launch per layer. The counters are one set per device:
launches on a device must not overlap (the runtime's steps run on one stream). All query heads of one kv head (GQA)
share each key tile. Lengths and tables live on the
device, so one captured graph serves rows at any positions; `max_context` only sizes the launch grid.
The tiles and their arithmetic do not depend on the block size, so paged and contiguous give the same bits.
Elsewhere the references gather the keys and run SDPA with a per-row length mask.
Must not know: layers, RoPE, requests, graphs, which blocks a request holds. Layout: [blocks + 1,
kv_heads, block_size, head_dim] (a contiguous cache: [slots + 1, kv_heads, max_len, head_dim]).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from v2.models import exact

from v2.models.kernels import kernels_on, tl, triton
from v2.models.kv_cache import gather_pages

SPLIT = 256    # keys per program: one row's long context spreads over several SMs
BLOCK_N = 64   # keys per inner block (SPLIT / BLOCK_N blocks, each masked to the row's length)
_TICKETS: dict[torch.device, Tensor] = {}  # per device: int32 counters, zero between launches (each resets its own)
_OUTGROWN: list[Tensor] = []  # counters replaced by larger ones: kept, as graphs captured earlier still use them


def _tickets(n: int, device: torch.device) -> Tensor:
    """At least n zeroed counters on `device`, made once (grown outside graph capture: warm-up steps run first)."""
    have = _TICKETS.get(device)
    if have is None or have.numel() < n:
        if have is not None:
            _OUTGROWN.append(have)
        have = _TICKETS[device] = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
    return have


def decode_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, slots: Tensor, lengths: Tensor,
                     max_context: int) -> Tensor:
    """Softmax attention of one query per row over keys 0 .. lengths[b] - 1 of slot slots[b].

    q [B, Hq, D]; k_cache, v_cache [S + 1, Hkv, L, D]; slots, lengths [B] (device, lengths >= 1 and
    <= max_context <= L). Returns [B, Hq, D] in q's dtype.
    """
    if kernels_on(q.device):
        return _paged_triton(q, k_cache, v_cache, slots[:, None], lengths, max_context)
    return decode_attention_reference(q, k_cache, v_cache, slots, lengths, max_context)


def paged_decode_attention(q: Tensor, k_pages: Tensor, v_pages: Tensor, tables: Tensor, lengths: Tensor,
                           max_context: int) -> Tensor:
    """Softmax attention of one query per row over keys 0 .. lengths[b] - 1 of its blocks.

    q [B, Hq, D]; k_pages, v_pages [N + 1, Hkv, S, D]; tables [B, W] (key n of row b is row n % S of block
    tables[b, n // S]); lengths [B] (device, 1 <= lengths <= max_context <= W * S). Returns [B, Hq, D].
    """
    if kernels_on(q.device):
        return _paged_triton(q, k_pages, v_pages, tables, lengths, max_context)
    return paged_decode_attention_reference(q, k_pages, v_pages, tables, lengths, max_context)


def decode_attention_reference(q: Tensor, k_cache: Tensor, v_cache: Tensor, slots: Tensor, lengths: Tensor,
                               max_context: int) -> Tensor:
    """The contiguous function through a gather of keys 0 .. max_context - 1 and SDPA with a length mask."""
    return _sdpa(q, k_cache[slots, :, :max_context].to(q.dtype), v_cache[slots, :, :max_context].to(q.dtype),
                 lengths)


def paged_decode_attention_reference(q: Tensor, k_pages: Tensor, v_pages: Tensor, tables: Tensor, lengths: Tensor,
                                     max_context: int) -> Tensor:
    """The paged function through a gather of each row's blocks and SDPA with a length mask."""
    used = tables[:, : -(-max_context // k_pages.shape[2])]  # [B, n]
    return _sdpa(q, gather_pages(k_pages, used, max_context).to(q.dtype),
                 gather_pages(v_pages, used, max_context).to(q.dtype), lengths)


def _sdpa(q: Tensor, k: Tensor, v: Tensor, lengths: Tensor) -> Tensor:
    keys = torch.arange(k.shape[2], device=q.device)
    mask = (keys[None, :] < lengths[:, None])[:, None, None]  # [B, 1, 1, C]
    out = exact.attention(q[:, :, None], k, v, mask)  # [B, Hq, 1, D]
    return out[:, :, 0]


def _decode_attention_triton(q: Tensor, k_cache: Tensor, v_cache: Tensor, slots: Tensor, lengths: Tensor,
                             max_context: int) -> Tensor:
    return _paged_triton(q, k_cache, v_cache, slots[:, None], lengths, max_context)


def _paged_triton(q: Tensor, k_pages: Tensor, v_pages: Tensor, tables: Tensor, lengths: Tensor,
                  max_context: int) -> Tensor:
    b, hq, d = q.shape
    hkv = k_pages.shape[1]
    if (hq % hkv or k_pages.shape[-1] != d or k_pages.stride(-1) != 1 or v_pages.stride(-1) != 1
            or k_pages.dtype != q.dtype or v_pages.dtype != q.dtype):
        raise ValueError(f"decode_attention: q {tuple(q.shape)} {q.dtype} does not fit the cache "
                         f"{tuple(k_pages.shape)} {k_pages.dtype} (heads, head_dim, dtype, unit stride)")
    q, tables, lengths = q.contiguous(), tables.contiguous(), lengths.contiguous()  # the kernels index them densely
    group = hq // hkv
    splits = triton.cdiv(max_context, SPLIT)
    part = torch.empty(b, hq, splits, d, dtype=torch.float32, device=q.device)  # per-split normalised outputs
    lse = torch.empty(b, hq, splits, dtype=torch.float32, device=q.device)      # per-split log-sum-exp
    out = torch.empty(b, hq, d, dtype=q.dtype, device=q.device)
    block_d = max(16, triton.next_power_of_2(d))
    _split_kernel[(b, hkv, splits)](
        q, k_pages, v_pages, tables, lengths, part, lse, _tickets(b * hkv, q.device), out,
        k_pages.stride(0), k_pages.stride(1), k_pages.stride(2),
        v_pages.stride(0), v_pages.stride(1), v_pages.stride(2),
        tables.shape[1], 1.0 / math.sqrt(d), hq, splits,
        GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)), HEAD_DIM=d, BLOCK_D=block_d,
        BLOCK_N=BLOCK_N, SPLIT_LEN=SPLIT, PAGE=k_pages.shape[2], IEEE=q.dtype == torch.float32,
        BLOCK_S=triton.next_power_of_2(splits))
    return out


if triton is not None:

    @triton.jit
    def _split_kernel(q_ptr, k_ptr, v_ptr, table_ptr, len_ptr, part_ptr, lse_ptr, ticket_ptr, out_ptr,
                      sk_s, sk_h, sk_l, sv_s, sv_h, sv_l, table_width, scale, num_heads, num_splits,
                      GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                      BLOCK_N: tl.constexpr, SPLIT_LEN: tl.constexpr, PAGE: tl.constexpr, IEEE: tl.constexpr,
                      BLOCK_S: tl.constexpr):
        row = tl.program_id(0)
        kvh = tl.program_id(1)
        split = tl.program_id(2)
        length = tl.load(len_ptr + row)
        table = table_ptr + row.to(tl.int64) * table_width  # this row's block ids
        g = tl.arange(0, BLOCK_G)
        d = tl.arange(0, BLOCK_D)
        gmask = g < GROUP
        dmask = d < HEAD_DIM
        heads = kvh * GROUP + g  # the query heads that read this kv head
        start = split * SPLIT_LEN
        live = start < length  # a split past the row's length loads and stores nothing
        q = tl.load(q_ptr + (row * num_heads + heads[:, None]) * HEAD_DIM + d[None, :],
                    mask=(gmask[:, None] & dmask[None, :]) & live, other=0.0)  # [G, D]
        m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
        k_head = k_ptr + kvh * sk_h
        v_head = v_ptr + kvh * sv_h
        end = tl.minimum(start + SPLIT_LEN, length)
        for i in range(0, SPLIT_LEN // BLOCK_N):
            n0 = start + i * BLOCK_N
            if n0 < end:  # blocks past the row's length (all of them in a split past it) are skipped
                n = n0 + tl.arange(0, BLOCK_N)
                nmask = n < end
                kv_mask = nmask[:, None] & dmask[None, :]
                block = tl.load(table + n // PAGE, mask=nmask, other=0).to(tl.int64)  # [N] each key's block
                at = n % PAGE  # [N] its row in the block
                k = tl.load(k_head + block[:, None] * sk_s + at[:, None] * sk_l + d[None, :], mask=kv_mask,
                            other=0.0)  # [N, D]
                if IEEE:
                    s = tl.dot(q, tl.trans(k), input_precision="ieee")
                else:
                    s = tl.dot(q, tl.trans(k))
                s = tl.where(nmask[None, :], s * scale, float("-inf"))  # [G, N]
                m_new = tl.maximum(m_i, tl.max(s, 1))
                alpha = tl.exp(m_i - m_new)  # m_new is finite: the block holds key n0
                p = tl.exp(s - m_new[:, None])
                v = tl.load(v_head + block[:, None] * sv_s + at[:, None] * sv_l + d[None, :], mask=kv_mask,
                            other=0.0)  # [N, D]
                if IEEE:
                    pv = tl.dot(p, v, input_precision="ieee")
                else:
                    pv = tl.dot(p.to(v.dtype), v)
                acc = acc * alpha[:, None] + pv
                l_i = l_i * alpha + tl.sum(p, 1)
                m_i = m_new
        out = acc / tl.where(live, l_i, 1.0)[:, None]
        lse = m_i + tl.log(tl.where(live, l_i, 1.0))
        at = (row * num_heads + heads) * num_splits + split  # [G] index into [B, Hq, splits]
        tl.store(lse_ptr + at, lse, mask=gmask & live)
        tl.store(part_ptr + at[:, None] * HEAD_DIM + d[None, :], out, mask=(gmask[:, None] & dmask[None, :]) & live)
        # the last split of this (row, kv head) to finish merges them all: its ticket is taken after every
        # thread's stores (barrier, then an acquire-release atomic at GPU scope); it reads the others' stores
        # past the L1 cache and resets the counter for the next launch
        tl.debug_barrier()
        counter = ticket_ptr + row * tl.num_programs(1) + kvh
        if tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") == num_splits - 1:
            used = tl.minimum((length + SPLIT_LEN - 1) // SPLIT_LEN, num_splits)  # splits that stored (>= 1)
            first = (row * num_heads + heads) * num_splits  # [G] split 0 of each head
            gd = gmask[:, None] & dmask[None, :]
            top = tl.full([BLOCK_G], float("-inf"), tl.float32)
            for i in range(0, BLOCK_S):  # a constant bound (the interpreter runs it too); splits past `used` masked
                stored = gmask & (i < used)
                top = tl.maximum(top, tl.load(lse_ptr + first + i, mask=stored, other=float("-inf"),
                                              cache_modifier=".cg"))
            total = tl.zeros([BLOCK_G], tl.float32)
            merged = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
            for i in range(0, BLOCK_S):  # in split order, whichever program merges: the same bits
                stored = gmask & (i < used)
                lse_i = tl.load(lse_ptr + first + i, mask=stored, other=0.0, cache_modifier=".cg")
                w = tl.where(stored, tl.exp(lse_i - tl.where(gmask, top, 0.0)), 0.0)
                part = tl.load(part_ptr + (first + i)[:, None] * HEAD_DIM + d[None, :],
                               mask=stored[:, None] & dmask[None, :], other=0.0, cache_modifier=".cg")
                merged += w[:, None] * part
                total += w
            tl.store(out_ptr + (row * num_heads + heads[:, None]) * HEAD_DIM + d[None, :],
                     (merged / tl.where(gmask, total, 1.0)[:, None]).to(out_ptr.dtype.element_ty), mask=gd)
            tl.atomic_xchg(counter, 0)
