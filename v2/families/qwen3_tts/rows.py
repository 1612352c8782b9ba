"""Qwen3-TTS prompt rows as talker inputs: the int rows [.., 2 + G] prepare.py lays out -> vectors [.., H].

Owns: `embed_rows(model, rows, xvector)`: per row P(text id) where it has one, + E_0[codec id] where it has
one, + the x-vector on the SPEAKER row, + frame(codes) where the row holds a frame (a speaker row's code
columns hold the x-vector's fingerprint, not codes), summed. One function for the runtime's prefill (the
talker executor) and the RL recompute, so both see the same rows. Differentiable with respect to the
model's tables and text projection.
Must not know: slots, requests, the engine.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.qwen3_tts.model import Qwen3TTS
from v2.models.qwen3_tts.prompt import SPEAKER


def embed_rows(model: Qwen3TTS, rows: Tensor, xvector: Tensor | None) -> Tensor:
    """rows [..., W, 2 + G] int64 on the model's device; xvector broadcastable to [..., W, H] (e.g. [B, 1, H]
    for a batch, [H] for one prompt; None: no speaker row) -> [..., W, H]."""
    text, codec, codes = rows[..., 0], rows[..., 1], rows[..., 2:]
    x = torch.where((text >= 0)[..., None], model.embed_text(text.clamp(min=0)), 0.0)
    x = x + torch.where((codec >= 0)[..., None], model.embed_codec(codec.clamp(min=0)), 0.0)
    if xvector is not None:
        x = x + torch.where((codec == SPEAKER)[..., None], xvector, 0.0)
    frame = (codec != SPEAKER) & (codes[..., 0] >= 0)
    codes = codes.masked_fill(~frame[..., None], 0)  # a speaker row's codes hold the x-vector's fingerprint
    return x + torch.where(frame[..., None], model.embed_frame(codes), 0.0)
