"""The CSM reference loop: prompt rows in, frames out, eager, one backbone KV slot per prompt.

Owns: `generate_batch` (the reference's loop: prefill; per frame, codebook 0 from lm_head's logits of the
current h, codebooks 1..N-1 from the depth decoder with a fresh per-frame cache, then the stop rule: a frame
whose codebooks 0..N-2 are all `codebook_eos` ends the row and stays in its codes; otherwise the frame's
audio row is fed at the next position for the next h; `max_new_tokens` counts frames), `generate` (one
prompt) and `audio_frames` (the frames the codec decodes: everything before the first frame whose N codes
are all `codebook_eos`). Each row runs at its own positions (left-padded prompts, as the reference batches
them) and its draws are keyed by its own seed and frame, so a row's result does not depend on its batch.
Must not know: requests, the scheduler, streaming, the codec.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from v2.models.csm.config import CsmSampling
from v2.models.csm.model import Csm
from v2.models.csm.sampling import CsmSamplingTensors


@dataclass
class CsmGeneration:
    """What one prompt produced; F = frames generated (the stop frame included when it stopped)."""

    codes: Tensor         # [F, N] int64
    stop_frame: int       # index of the stop frame, -1 when the budget ran out
    audio_frames: int     # frames the codec decodes (before the first all-`codebook_eos` frame)
    hidden: Tensor        # [F, H] the backbone state each frame's codebook 0 came from
    c0_logits: Tensor     # [F, V] raw codebook-0 logits
    depth_logits: Tensor  # [F, N-1, V] raw depth logits, column k-1 = codebook k
    logprobs: Tensor      # [F, N] of each chosen code (v2/models/csm/sampling.py says under which distribution)

    @property
    def audio_codes(self) -> Tensor:
        """[audio_frames, N]: the frames to decode."""
        return self.codes[: self.audio_frames]


def audio_frames(codes: Tensor, codebook_eos: int) -> int:
    """Frames before the first one whose codes are all `codebook_eos` ([F, N] -> 0..F)."""
    zero = (codes == codebook_eos).all(-1).nonzero()
    return int(zero[0, 0]) if len(zero) else int(codes.shape[0])


def pad_left(prompts: list[Tensor]) -> tuple[Tensor, Tensor]:
    """Rows [T_i, H] -> zero-padded on the left [B, T, H] and the mask [B, T] int64 (0 on the padding)."""
    t_max = max(int(p.shape[0]) for p in prompts)
    rows = prompts[0].new_zeros(len(prompts), t_max, prompts[0].shape[-1])
    mask = torch.zeros(len(prompts), t_max, dtype=torch.long, device=prompts[0].device)
    for i, p in enumerate(prompts):
        rows[i, t_max - p.shape[0]:] = p
        mask[i, t_max - p.shape[0]:] = 1
    return rows, mask


@torch.no_grad()
def generate(model: Csm, rows: Tensor, *, max_new_tokens: int, sampling: CsmSampling | None = None,
             seed: int = 0) -> CsmGeneration:
    """One prompt (rows [T, H]) -> its frames."""
    return generate_batch(model, [rows], [sampling or CsmSampling.greedy()], [seed], max_new_tokens=max_new_tokens)[0]


@torch.no_grad()
def generate_batch(model: Csm, prompts: list[Tensor], settings: list[CsmSampling], seeds: list[int], *,
                   max_new_tokens: int) -> list[CsmGeneration]:
    """Several prompts at once; each row equals its own run. A row that stopped is no longer recorded;
    the loop ends when every row has stopped or `max_new_tokens` frames were made."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if not len(prompts) == len(settings) == len(seeds) >= 1:
        raise ValueError("prompts, settings and seeds must be equally long and not empty")
    h_size = model.cfg.hidden_size
    for i, p in enumerate(prompts):
        if p.dim() != 2 or p.shape[0] < 1 or p.shape[1] != h_size:
            raise ValueError(f"prompts[{i}]: must be rows [T >= 1, {h_size}], got {list(p.shape)}")
    dev, b = model.device, len(prompts)
    x, mask = pad_left([p.to(dev, model.dtype) for p in prompts])  # [B, T, H], [B, T]
    positions = (mask.cumsum(1) - 1).clamp(min=0)  # [B, T]
    lengths = mask.sum(1)  # [B]
    longest = int(lengths.max())
    cache = model.allocate_kv(b, longest + max_new_tokens)
    depth_cache = model.allocate_depth_kv(b)
    slots = torch.arange(b, device=dev)
    last = torch.full((b,), x.shape[1] - 1, dtype=torch.long, device=dev)
    hidden, logits = model.prefill(x, cache, slots, positions, mask.bool(), last, longest)
    s = CsmSamplingTensors.build(settings, seeds, dev)

    rec: dict[str, list[Tensor]] = {k: [] for k in ("codes", "hidden", "c0", "depth", "lp", "stop")}
    active = torch.ones(b, dtype=torch.bool, device=dev)
    for t in range(max_new_tokens):
        frame = torch.full((b,), t, dtype=torch.long, device=dev)
        done = model.complete_frame(hidden, logits, s, frame, depth_cache=depth_cache)
        for key, value in (("codes", done.codes), ("hidden", hidden), ("c0", logits), ("depth", done.depth_logits),
                           ("lp", done.logprobs), ("stop", done.stop & active)):
            rec[key].append(value)
        active = active & ~done.stop
        if t + 1 == max_new_tokens or not bool(active.any()):
            break
        _, hidden, logits = model.feed_frames(done.codes, cache, slots, lengths + t, context_len=longest + t + 1)
    return [_collect(rec, i, model.cfg.ids.codebook_eos) for i in range(b)]


def _collect(rec: dict[str, list[Tensor]], i: int, codebook_eos: int) -> CsmGeneration:
    stops = torch.stack([x[i] for x in rec["stop"]]).nonzero()  # the row's first stop (later ones never recorded)
    stop = int(stops[0, 0]) if len(stops) else -1
    frames = stop + 1 if stop >= 0 else len(rec["codes"])

    def stack(key: str) -> Tensor:
        return torch.stack([x[i] for x in rec[key][:frames]])

    codes = stack("codes")
    return CsmGeneration(codes=codes, stop_frame=stop, audio_frames=audio_frames(codes, codebook_eos),
                         hidden=stack("hidden"), c0_logits=stack("c0"), depth_logits=stack("depth"),
                         logprobs=stack("lp"))
