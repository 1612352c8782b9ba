"""Batch-independent seeded sampling with exact logprobs, for the stop head and the 12 codebooks.

Owns: the per-row tensor form of the settings (the settings themselves are plain data in
v2/sampling_settings.py), repetition penalty, the temperature / top-k / top-p pipeline that defines the
*processed* distribution, and Gumbel-max with noise from a counter-based hash of (seed, counter,
token), counter = step * 13 + channel. Channel 0 is the stop decision, channel 1 + c is codebook c.
A row's draw depends only on its own logits, seed and counter, never on its batch. No Python loop over
rows.
Must not know: the model, requests, the runtime.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from v2.sampling_settings import CHANNELS, MIN_TEMPERATURE, SORT_WIDTH, HeadSampling, SamplingSettings

_M32 = 0xFFFFFFFF


@dataclass
class SamplingTensors:
    """Per-row, per-channel settings of a batch: every field is [B, 13] except seed [B]."""

    temperature: Tensor  # float32
    top_k: Tensor        # int64, 0 = off
    top_p: Tensor        # float32, 1 = off
    penalty: Tensor      # float32, 1 = off (always 1 on channel 0)
    seed: Tensor         # int64 [B]

    @classmethod
    def build(cls, settings: list[SamplingSettings], seeds: list[int], device: torch.device | str = "cpu") -> "SamplingTensors":
        if len(settings) != len(seeds):
            raise ValueError(f"{len(settings)} settings for {len(seeds)} seeds")

        def per_channel(get_stop: object, get_audio: object) -> list[list[float]]:
            return [[get_stop(s)] + [get_audio(s)] * (CHANNELS - 1) for s in settings]  # type: ignore[operator]

        f32, i64 = torch.float32, torch.int64
        return cls(
            temperature=torch.tensor(per_channel(lambda s: s.stop.temperature, lambda s: s.audio.temperature), dtype=f32, device=device),
            top_k=torch.tensor(per_channel(lambda s: s.stop.top_k, lambda s: s.audio.top_k), dtype=i64, device=device),
            top_p=torch.tensor(per_channel(lambda s: s.stop.top_p, lambda s: s.audio.top_p), dtype=f32, device=device),
            penalty=torch.tensor(per_channel(lambda s: 1.0, lambda s: s.repetition_penalty), dtype=f32, device=device),
            seed=torch.tensor(seeds, dtype=i64, device=device),
        )

    def rows(self, index: Tensor) -> "SamplingTensors":
        """The settings of rows `index` ([B'] long), e.g. to pad or reorder a batch."""
        return SamplingTensors(self.temperature[index], self.top_k[index], self.top_p[index],
                               self.penalty[index], self.seed[index])


def apply_repetition_penalty(logits: Tensor, presence: Tensor, penalty: Tensor) -> Tensor:
    """logits [B, V]; presence [B, V] bool (token seen before); penalty [B]. Seen logits: x<0 ? x*p : x/p."""
    p = penalty[:, None]
    penalized = torch.where(logits < 0, logits * p, logits / p)
    return torch.where(presence, penalized, logits)


def fast_rows(temperature: Tensor, top_k: Tensor, vocab: int) -> Tensor:
    """[B] bool: rows whose processed distribution `process_logits(..., width=SORT_WIDTH)` computes exactly."""
    return (vocab > SORT_WIDTH) & (((top_k >= 1) & (top_k <= SORT_WIDTH)) | (temperature < MIN_TEMPERATURE))


def head_needs_full_sort(head: HeadSampling) -> bool:
    """Host-side: whether a head's draws need the full sort (`fast_rows` is False for them)."""
    return head.temperature >= MIN_TEMPERATURE and not 1 <= head.top_k <= SORT_WIDTH


def head_columns(heads: Sequence[tuple[HeadSampling, ...]],
                 device: torch.device | str) -> tuple[Tensor, Tensor, Tensor]:
    """Per-row settings of a model's sampling stages, one column per stage: temperature [B, S] float32,
    top_k [B, S] int64, top_p [B, S] float32 (`heads[b]` holds row b's S stages)."""
    stages = len(heads[0]) if heads else 1
    return (torch.tensor([[h.temperature for h in p] for p in heads], dtype=torch.float32, device=device).view(-1, stages),
            torch.tensor([[h.top_k for h in p] for p in heads], dtype=torch.int64, device=device).view(-1, stages),
            torch.tensor([[h.top_p for h in p] for p in heads], dtype=torch.float32, device=device).view(-1, stages))


def _stable_top(z: Tensor, width: int, by_topk: bool | None = None) -> tuple[Tensor, Tensor]:
    """The first `width` entries of the stable descending sort of z [B, V]: values and token ids [B, width].

    topk finds the width-th largest value; the members are every larger value plus the lowest-index
    ties at it (as a stable sort would order them); a small stable sort then orders the members. The
    members' ids come from `nonzero_static` on CPU and from a second topk elsewhere (`by_topk` forces one).
    """
    b = z.shape[0]
    edge = torch.topk(z, width, dim=-1, sorted=False).values.amin(dim=-1, keepdim=True)  # [B, 1]
    above, tie = z > edge, z == edge
    member = above | (tie & (torch.cumsum(tie, dim=-1) <= width - above.sum(-1, keepdim=True)))  # width per row
    if not (z.device.type != "cpu" if by_topk is None else by_topk):  # members in index order, one topk
        ids = torch.nonzero_static(member, size=b * width)[:, 1].view(b, width)
    else:
        ids = torch.topk(torch.where(member, z, -math.inf), width, dim=-1).indices.sort(dim=-1).values  # [B, W]
    values = z.gather(1, ids)
    order = torch.sort(values, dim=-1, descending=True, stable=True).indices
    return values.gather(1, order), ids.gather(1, order)


def process_logits(logits: Tensor, temperature: Tensor, top_k: Tensor, top_p: Tensor, *,
                   width: int | None = None) -> Tensor:
    """The processed distribution as logits [B, V] (-inf where a token cannot be drawn).

    logits [B, V] float32 (after any penalty); temperature/top_k/top_p [B]. Greedy rows
    (temperature below `MIN_TEMPERATURE`, 0 included) become a point mass on the first argmax. Otherwise: divide by temperature,
    keep the top-k values (ties at the k-th value kept), then keep the smallest prefix of the
    stable-sorted distribution whose mass reaches top_p (the most likely token is always kept).
    `width`: sort only the top `width` values, exact for the rows `fast_rows` marks (the others get
    garbage); None sorts everything. Both give the same distribution up to float rounding of the
    top-p mass sums.
    """
    v = logits.shape[-1]
    greedy = temperature < MIN_TEMPERATURE
    z = logits / torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
    if width is None or width >= v:
        sorted_z, order = torch.sort(z, dim=-1, descending=True, stable=True)  # [B, V]
    else:
        sorted_z, order = _stable_top(z, width)  # [B, W]
    use_k = (top_k > 0) & (top_k < v)
    kth = sorted_z.gather(1, (top_k.clamp(1, sorted_z.shape[1]) - 1)[:, None])  # [B, 1]
    kth = torch.where(use_k[:, None], kth, torch.full_like(kth, -math.inf))
    z = z.masked_fill(z < kth, -math.inf)
    probs = torch.softmax(z, dim=-1)  # the top-k distribution [B, V]
    sorted_p = probs.gather(1, order)
    before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass of the tokens ahead in stable order
    keep_sorted = (before < top_p[:, None]) | (top_p[:, None] >= 1)
    keep_sorted[:, 0] = True
    keep = torch.zeros_like(z, dtype=torch.bool).scatter(1, order, keep_sorted)
    if sorted_z.shape[1] < v:
        # ties at the k-th value beyond the sorted prefix follow it in index order, all with the same mass
        listed = torch.zeros_like(keep).scatter(1, order, True)
        rest = torch.isfinite(z) & ~listed
        rank = torch.cumsum(rest, dim=-1) - rest.long()
        rest_before = sorted_p.sum(-1, keepdim=True) + rank * probs
        keep |= rest & ((rest_before < top_p[:, None]) | (top_p[:, None] >= 1))
    z = z.masked_fill(~keep, -math.inf)
    argmax = logits.argmax(dim=-1, keepdim=True)
    point = torch.full_like(z, -math.inf).scatter(1, argmax, 0.0)
    return torch.where(greedy[:, None], point, z)


def _mul32(x: Tensor, c: int) -> Tensor:
    """(x * c) mod 2^32 for x in [0, 2^32), without int64 overflow."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _M32


def _rotl32(x: Tensor, r: int) -> Tensor:
    return ((x << r) | (x >> (32 - r))) & _M32


def _word(word: Tensor) -> Tensor:
    """The word's half of a MurmurHash3 body round (it does not depend on the state)."""
    return _mul32(_rotl32(_mul32(word & _M32, 0xCC9E2D51), 15), 0x1B873593)


def _fold(h: Tensor, k: Tensor) -> Tensor:
    """The state's half: fold a prepared word k (`_word`) into the state h."""
    return (_mul32(_rotl32(h ^ k, 13), 5) + 0xE6546B64) & _M32


def _mix(h: Tensor, word: Tensor) -> Tensor:
    """One MurmurHash3 body round: fold a 32-bit word into the state h."""
    return _fold(h, _word(word))


def _finish(h: Tensor, n_words: int) -> Tensor:
    h = h ^ (4 * n_words)
    h = _mul32(h ^ (h >> 16), 0x85EBCA6B)
    h = _mul32(h ^ (h >> 13), 0xC2B2AE35)
    return h ^ (h >> 16)


def hash_u32(words: list[Tensor]) -> Tensor:
    """MurmurHash3 (x86, 32-bit, seed 0) of a sequence of 32-bit words, elementwise over broadcast tensors."""
    h = torch.zeros_like(words[0])
    for w in words:
        h = _mix(h, w)
    return _finish(h, len(words))


def gumbel_noise(seed: Tensor, counter: Tensor, vocab: int) -> Tensor:
    """Gumbel(0, 1) noise keyed by hash(seed lo, seed hi, counter, token id).

    seed [B]; counter [B] or [B, C] -> noise [B, V] or [B, C, V]. The seed and counter words are folded
    in before broadcasting over tokens, so the per-token work is one round and the finaliser.
    """
    h = _mix(_mix(torch.zeros_like(seed), seed & _M32), (seed >> 32) & _M32)  # [B]
    h = _mix(h.view(-1, *([1] * (counter.dim() - 1))), counter)  # [B] or [B, C]
    tokens = torch.arange(vocab, device=seed.device, dtype=torch.int64)
    return gumbel_from_hash(_finish(_mix(h[..., None], tokens), 4))  # [..., V]


def gumbel_from_hash(h: Tensor) -> Tensor:
    """Gumbel(0, 1) from 32-bit hashes: u = (top 23 bits + 0.5) / 2^23 lies in [2^-24, 1 - 2^-24], exact in
    float32 (24 bits would round the largest u to 1.0 and give infinite noise), then -log(-log u)."""
    u = ((h >> 9).float() + 0.5) * (1.0 / (1 << 23))
    return -torch.log(-torch.log(u))


def frame_noise(seed: Tensor, steps: Tensor, vocab: int) -> Tensor:
    """Noise for all 13 channels of one frame: [B, 13, V], channel ch keyed by counter steps * 13 + ch."""
    counters = steps[:, None] * CHANNELS + torch.arange(CHANNELS, device=steps.device)  # [B, 13]
    return gumbel_noise(seed, counters, vocab)


def processed(logits: Tensor, temperature: Tensor, top_k: Tensor, top_p: Tensor, *, full: bool = True) -> Tensor:
    """`process_logits` choosing per row: the top-`SORT_WIDTH` path where it is exact, the full sort elsewhere.

    `full=False` promises that every row is a `fast_rows` row (the caller knows the settings), which
    skips the full sort. A row's result depends only on its own logits and settings, never on its batch.
    """
    logits = logits.float()
    v = logits.shape[-1]
    if v <= SORT_WIDTH:
        return process_logits(logits, temperature, top_k, top_p)
    fast = process_logits(logits, temperature, top_k, top_p, width=SORT_WIDTH)
    if not full:
        return fast
    slow = process_logits(logits, temperature, top_k, top_p)
    return torch.where(fast_rows(temperature, top_k, v)[:, None], fast, slow)


def sample(logits: Tensor, temperature: Tensor, top_k: Tensor, top_p: Tensor, noise: Tensor, *,
           full: bool = True) -> tuple[Tensor, Tensor]:
    """Draw one token per row by Gumbel-max: ids [B] and their logprobs [B] under the processed
    distribution. noise [B, >= V] comes from `gumbel_noise` / `frame_noise` (token id = column);
    `full` as in `processed`."""
    z = processed(logits, temperature, top_k, top_p, full=full)
    ids = (z + noise[:, : z.shape[-1]]).argmax(dim=-1)
    logprobs = torch.log_softmax(z, dim=-1).gather(1, ids[:, None])[:, 0]
    return ids, logprobs
