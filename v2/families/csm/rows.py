"""CSM prompt rows as backbone inputs: the int rows [.., 1 + N] prepare.py lays out -> vectors [.., H].

Owns: `embed_rows(model, rows)`: a row whose codes are given (column 1 >= 0: a context frame, the
all-`codebook_eos` frame of an `<|audio_eos|>`, or a generated frame fed again after a preemption) is that
frame's audio row (the sum of its N codebooks' rows, `Csm.embed_frame`), any other row the text row of its
id (padding rows, id -1, embed id 0; their outputs are never read). No text is added to audio rows, as
the reference's merge does. One function for the runtime's prefill (the frame executor) and the RL
recompute, so both see the same rows; differentiable with respect to the model's tables.
Must not know: slots, requests, the engine.
"""

from __future__ import annotations

import torch
from torch import Tensor


def embed_rows(model: torch.nn.Module, rows: Tensor) -> Tensor:
    """rows [..., 1 + N] int64 on the model's device -> [..., H] (every row's audio row is computed and the
    text rows select theirs: one fixed shape per row, whatever the batch)."""
    ids, codes = rows[..., 0], rows[..., 1:]
    audio = codes[..., 0] >= 0
    text = model.embed_text(torch.where(audio, 0, ids).clamp(min=0))  # type: ignore[operator]
    frame = model.embed_frame(codes.clamp(min=0))  # type: ignore[operator]
    return torch.where(audio[..., None], frame.to(text.dtype), text)
