"""Causal local-window attention whose result for a query does not depend on the chunk it is computed in.

Owns: `window_attention` (each query over exactly its own `window` keys: the exact per-query form on a CPU,
where a chunk of n frames must give the samples of the whole utterance bit for bit; SDPA with a band mask
elsewhere), its two forms `exact_window_attention` and `banded_window_attention`, and their block sizes.
Used by the codecs' transformers (a streaming codec decodes chunk by chunk over per-slot key history).
Must not know: any codec, checkpoints, stream slots, the runtime.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

QUERY_BLOCK = 256  # queries per attention block (bounds the [.., D, window] products)
# elements of one block's [rows, H, queries, D, window] product: small enough to stay in a CPU's cache (a
# batch of 16 streams in one block ran ~3x slower per row than one at a time); large on a GPU
BLOCK_ELEMENTS = {"cpu": 1 << 20}
GPU_BLOCK_ELEMENTS = 1 << 26


def window_attention(q: Tensor, keys: Tensor, values: Tensor, first_pos: Tensor, window: int) -> Tensor:
    """Causal local attention (arguments as in `exact_window_attention`): the exact per-query form on a CPU,
    where chunked decoding must equal whole decoding bit for bit; `scaled_dot_product_attention` over each
    query block's key span with a band mask elsewhere, whose memory does not grow with the window."""
    if q.device.type == "cpu":
        return exact_window_attention(q, keys, values, first_pos, window)
    return banded_window_attention(q, keys, values, first_pos, window)


def banded_window_attention(q: Tensor, keys: Tensor, values: Tensor, first_pos: Tensor, window: int) -> Tensor:
    """Window attention through SDPA: each block of queries attends its contiguous key span under a band mask."""
    b, h, n, d = q.shape
    out = torch.empty_like(q)
    for s in range(0, n, QUERY_BLOCK):
        e = min(n, s + QUERY_BLOCK)
        span = torch.arange(s, e + window - 1, device=q.device)  # key indices this block can see
        rows = torch.arange(s, e, device=q.device)[:, None]
        band = (span[None] >= rows) & (span[None] <= rows + window - 1)  # [q, span]
        started = (first_pos[:, None] - window + 1 + span[None]) >= 0  # [B, span]: keys from the stream
        mask = band[None, None] & started[:, None, None, :]  # [B, 1, q, span]
        out[:, :, s:e] = F.scaled_dot_product_attention(q[:, :, s:e], keys[:, :, s : e + window - 1],
                                                       values[:, :, s : e + window - 1], attn_mask=mask)
    return out


def exact_window_attention(q: Tensor, keys: Tensor, values: Tensor, first_pos: Tensor, window: int) -> Tensor:
    """Causal local attention for n new queries per row, with the same arithmetic for a query whatever the chunk.

    q [B, H, n, D] sits at positions first_pos[b] + i. keys/values [B, H, window - 1 + n, D] hold
    positions first_pos - window + 1 ... first_pos + n - 1 (history, then the new keys). A query at p sees
    keys p - window + 1 .. p; keys at negative positions (before the stream began) are masked.
    Returns [B, H, n, D].
    """
    b, h, n, d = q.shape
    key_win = keys.unfold(2, window, 1)  # [B, H, n, D, window]: query i's keys, oldest first
    val_win = values.unfold(2, window, 1)  # [B, H, n, D, window]
    offsets = torch.arange(n, device=q.device)[:, None] - window + 1 + torch.arange(window, device=q.device)
    masked = (first_pos[:, None, None] + offsets[None]) < 0  # [B, n, window]
    q = q * (1.0 / math.sqrt(d))
    out = torch.empty_like(q)
    budget = BLOCK_ELEMENTS.get(q.device.type, GPU_BLOCK_ELEMENTS)
    queries = max(1, min(QUERY_BLOCK, n, budget // (h * d * window)))
    rows = max(1, budget // (h * queries * d * window))
    # blocks of rows and of queries: every element's products and sums are the same whatever the blocking
    for r in range(0, b, rows):
        t = min(b, r + rows)
        for s in range(0, n, queries):
            e = min(n, s + queries)
            scores = (q[r:t, :, s:e, :, None] * key_win[r:t, :, s:e]).sum(dim=-2)  # [rows, H, q, window]
            scores = scores.masked_fill(masked[r:t, None, s:e], -math.inf)
            probs = torch.softmax(scores, dim=-1)
            out[r:t, :, s:e] = (probs[:, :, :, None, :] * val_win[r:t, :, s:e]).sum(dim=-1)  # [rows, H, q, D]
    return out
