"""MOSS-TTS-Local's frame decode on the CPU in float32 (inference): `MossTTSLocal.decode_frame`'s values through the
local transformer's frame pass (`LocalTransformer.frame_stack`) and `exact.Tile`s for the heads.

Owns: the frame's loop on that path: the local step of position 0 (the backbone state), the stop head and its
draw, then per codebook its head, its draw, its code's embedding row (the next position's input, and a term of the
next backbone row, summed as the generic path sums them) and the next local step. The final LayerNorm writes into
the heads' tile, so each head is one F.linear on the whole tile as `exact.linear` computes it (the same bits).
Must not know: how a channel is drawn (the caller's `Draw`), requests, the runtime.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor

from v2.models import exact
from v2.models.sampling import SamplingTensors

if TYPE_CHECKING:
    from v2.models.moss_tts_local.model import MossTTSLocal

# one channel's draw: (settings, steps, channel, logits [B, V], presence [B, V] | None, full sort) -> ids, logprobs
Draw = Callable[[SamplingTensors, Tensor, int, Tensor, "Tensor | None", bool], tuple[Tensor, Tensor]]
Frame = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]


def decode_frame_cpu(model: MossTTSLocal, hidden: Tensor, s: SamplingTensors, steps: Tensor, draw: Draw, *,
                     presence: Tensor | None, allow_stop: Tensor | None, full_sort: bool) -> Frame:
    """hidden [B, H] -> (stop id [B], codes [B, 12], logprobs [B, 13], next_embed [B, H], stop logits [B, 2],
    code logits [B, 12, V]), each equal to `decode_frame`'s generic CPU path bit for bit."""
    b, width = hidden.shape
    cfg, dev = model.cfg, hidden.device
    stack = model.local_transformer.frame_stack(b)
    t_head = exact.Tile(b, width, torch.float32, dev)
    out = t_head.rows(b)  # [B, H]: the final norm's output, read by every head
    stack.step(hidden, 0, out)
    stop_logits = t_head.linear(b, model.local_text_lm_head.weight)  # [B, 2]
    masked = stop_logits
    if allow_stop is not None:
        masked = torch.stack([stop_logits[:, 0], stop_logits[:, 1].masked_fill(~allow_stop, -math.inf)], dim=1)
    stop_id, stop_lp = draw(s, steps, 0, masked, None, full_sort)
    fed = torch.empty(cfg.n_vq, b, width, dtype=hidden.dtype, device=dev)  # each code's embedding row
    codes, logprobs, raw = [], [stop_lp], []
    for c, table in enumerate(model.audio_embeddings):
        logits = t_head.linear(b, table.weight)  # [B, V]
        raw.append(logits)
        code, lp = draw(s, steps, 1 + c, logits, None if presence is None else presence[:, c], full_sort)
        codes.append(code)
        logprobs.append(lp)
        torch.index_select(table.weight, 0, code, out=fed[c])  # [B, H]
        if c + 1 < cfg.n_vq:
            stack.step(fed[c], c + 1, out)
    summed = fed[0]
    for c in range(1, cfg.n_vq):  # as embed_codes sums them (drawn codes are never the pad code)
        summed = summed + fed[c]
    next_embed = model.transformer.embed_tokens.weight[cfg.ids.audio_assistant_slot] + summed  # [B, H]
    return (stop_id, torch.stack(codes, dim=1), torch.stack(logprobs, dim=1), next_embed, stop_logits,
            torch.stack(raw, dim=1))
