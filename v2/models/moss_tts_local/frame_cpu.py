"""MOSS-TTS-Local's frame decode on the CPU in float32 (inference): `MossTTSLocal.decode_frame`'s values through the
local transformer's frame pass (`LocalTransformer.frame_stack`) and `exact.Tile`s for the heads.

Owns: the frame's loop on that path: the local step of position 0 (the backbone state), the stop head and its
draw, then per codebook its head, its draw, its code's embedding row (the next position's input, and a term of the
next backbone row, summed as the generic path sums them) and the next local step. A local step returns the final
LayerNorm's output as a tile, so each head is one F.linear on the whole tile as `exact.linear` computes it (the
same bits), written into kept buffers (`FrameBuffers`), its right operands kept while the parameters are unchanged
(`FrameHeads`).
Must not know: how a channel is drawn (the caller's `Draw`), requests, the runtime.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor, nn

from v2.models import exact
from v2.models.persist import ParamVersions, persistent
from v2.models.sampling import SamplingTensors

if TYPE_CHECKING:
    from v2.models.moss_tts_local.model import MossTTSLocal

# one channel's draw: (settings, steps, channel, logits [B, V], presence [B, V] | None, full sort) -> ids, logprobs
Draw = Callable[[SamplingTensors, Tensor, int, Tensor, "Tensor | None", bool], tuple[Tensor, Tensor]]
Frame = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]


class FrameBuffers:
    """A batch's buffers for the frame's heads, kept from frame to frame (per batch and thread, on the model): the
    stop and codebook logits of the tiles' rows (the heads' `exact.tiles_linear_into` outputs, on the tile the local
    pass's step returns; reused only where the caller does not take the raw logits), the masked stop
    logits (and the -inf they take), each code's embedding row and their running sum. Must not know: the weights' values."""

    def __init__(self, batch: int, width: int, vocab: int, n_vq: int, device: torch.device) -> None:
        f32 = torch.float32
        self.rows = -(-batch // exact.TILE) * exact.TILE
        self.stop, self.codes = self.logits(2, vocab, n_vq, device)
        self.masked = torch.empty(batch, 2, dtype=f32, device=device)
        self.neg_inf = torch.tensor(-math.inf, dtype=f32, device=device)  # what a row that may not stop gets
        self.fed = torch.empty(n_vq, batch, width, dtype=f32, device=device)  # [12, B, H]
        self.fed_rows = list(self.fed.unbind(0))  # [B, H] each
        self.summed = torch.empty(batch, width, dtype=f32, device=device)
        self.code_tiles = list(self.codes.unbind(0))  # each head's output [rows, V]
        self.code_rows = [c[:batch] for c in self.code_tiles]  # [B, V] each

    def logits(self, stop: int, vocab: int, n_vq: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """Fresh outputs of the heads: stop [rows, 2], codes [12, rows, V] (rows: the tiles')."""
        return (torch.empty(self.rows, stop, dtype=torch.float32, device=device),
                torch.empty(n_vq, self.rows, vocab, dtype=torch.float32, device=device))


def frame_buffers(model: MossTTSLocal, batch: int) -> FrameBuffers:
    """The model's kept `FrameBuffers` for `batch` rows in this thread (at most 8 kept)."""
    kept: dict[tuple[int, int], FrameBuffers] = model.frame_buffers
    key = (threading.get_ident(), batch)
    hit = kept.get(key)
    if hit is None:
        if len(kept) >= 8:
            kept.pop(next(iter(kept)))
        cfg = model.cfg
        hit = kept[key] = persistent(FrameBuffers)(batch, cfg.hidden_size, cfg.codebook_size, cfg.n_vq,
                                       model.local_text_lm_head.weight.device)
    return hit


class FrameHeads:
    """The frame's head operands, made once and kept while the parameters they are made from are the same tensors,
    unchanged (`ParamVersions`, a look per frame): the stop head's and each codebook's right operand (an
    `exact.aligned_weight`'s transpose), each codebook's embedding table and the assistant slot's embedding row."""

    def __init__(self, model: MossTTSLocal) -> None:
        self.modules = _head_modules(model)
        self.versions = [ParamVersions() for _ in self.modules]
        self.stop_t = exact.aligned_weight(model.local_text_lm_head.weight).t()  # [H', 2]
        self.tables = [table.weight for table in model.audio_embeddings]  # [V, H] each
        self.codes_t = [exact.aligned_weight(w).t() for w in self.tables]  # [H', V] each
        self.slot_row = model.transformer.embed_tokens.weight[model.cfg.ids.audio_assistant_slot]  # [H]
        self.fresh(model)

    def fresh(self, model: MossTTSLocal) -> bool:
        """Whether these are the model's operands still (every module looked at: each look is kept). `ParamVersions`
        notices a parameter written or replaced and a submodule replaced inside a head module (a codebook table in
        the list); a head module itself replaced in the model is a module it never looked into: the identity check."""
        mods = _head_modules(model)
        changed = [v.changed(m) for v, m in zip(self.versions, mods)]
        return not any(changed) and all(a is b for a, b in zip(mods, self.modules))


def _head_modules(model: MossTTSLocal) -> tuple[nn.Module, nn.Module, nn.Module]:
    return model.local_text_lm_head, model.audio_embeddings, model.transformer.embed_tokens


def frame_heads(model: MossTTSLocal) -> FrameHeads:
    """The model's kept `FrameHeads`, made again when a parameter they are made from changed."""
    heads: FrameHeads | None = model.frame_heads
    if heads is None or not heads.fresh(model):
        heads = model.frame_heads = persistent(FrameHeads)(model)
    return heads


def decode_frame_cpu(model: MossTTSLocal, hidden: Tensor, s: SamplingTensors, steps: Tensor, draw: Draw, *,
                     presence: Tensor | None, allow_stop: Tensor | None, full_sort: bool,
                     return_logits: bool = True) -> Frame:
    """hidden [B, H] -> (stop id [B], codes [B, 12], logprobs [B, 13], next_embed [B, H], stop logits [B, 2],
    code logits [B, 12, V]), each equal to `decode_frame`'s generic CPU path bit for bit. Without return_logits the
    stop logits are a view of a kept buffer, overwritten by the next frame of the batch, and in place of the code
    logits is that buffer itself ([12, tile rows, V], not for reading)."""
    b = hidden.shape[0]
    cfg = model.cfg
    stack = model.local_transformer.frame_stack(b)
    buf = frame_buffers(model, b)
    stop_out, code_out = (buf.logits(2, cfg.codebook_size, cfg.n_vq, hidden.device) if return_logits
                          else (buf.stop, buf.codes))
    fed = buf.fed_rows
    code_tiles = list(code_out.unbind(0)) if return_logits else buf.code_tiles  # each head's output [rows, V]
    code_rows = [c[:b] for c in code_tiles] if return_logits else buf.code_rows  # [B, V] each
    heads = frame_heads(model)
    normed = stack.step(hidden, 0)  # the final norm's output, a tile [rows, H']
    # each head: F.linear on the whole tile, as `exact.linear` computes it (aligned_weight: the padded copy)
    exact.tiles_linear_into(normed, b, heads.stop_t, None, stop_out)
    stop_logits = stop_out[:b]  # [B, 2]
    masked = stop_logits
    if allow_stop is not None:  # column 1 -inf where a row may not stop
        masked = buf.masked
        masked.copy_(stop_logits)
        torch.where(allow_stop, stop_logits[:, 1], buf.neg_inf, out=masked[:, 1])
    stop_id, stop_lp = draw(s, steps, 0, masked, None, full_sort)
    codes, logprobs = [], [stop_lp]
    for c, (table, head_t) in enumerate(zip(heads.tables, heads.codes_t)):
        exact.tiles_linear_into(normed, b, head_t, None, code_tiles[c])
        logits = code_rows[c]  # [B, V]
        code, lp = draw(s, steps, 1 + c, logits, None if presence is None else presence[:, c], full_sort)
        codes.append(code)
        logprobs.append(lp)
        torch.index_select(table, 0, code, out=fed[c])  # [B, H]
        if c + 1 < cfg.n_vq:
            normed = stack.step(fed[c], c + 1)
    summed = buf.summed
    torch.add(fed[0], fed[1], out=summed)
    for c in range(2, cfg.n_vq):  # as embed_codes sums them (drawn codes are never the pad code)
        summed.add_(fed[c])
    next_embed = heads.slot_row + summed  # [B, H]
    if b == 1:  # one row: the draws' [1]s joined end to end are the stacked row (stack adds a view per tensor)
        code_t, logprob_t = torch.cat(codes).view(1, -1), torch.cat(logprobs).view(1, -1)  # [1, 12], [1, 13]
    else:
        code_t, logprob_t = torch.stack(codes, dim=1), torch.stack(logprobs, dim=1)  # [B, 12], [B, 13]
    return (stop_id, code_t, logprob_t, next_embed, stop_logits,
            code_out[:, :b].transpose(0, 1) if return_logits else code_out)
