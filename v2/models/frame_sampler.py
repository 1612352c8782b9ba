"""One frame's seeded draws on the host, at each code group's top candidates: the same draws as `sampling.sample`.

A shared building block: every family that draws a frame as G code groups (each with its own vocabulary and
settings column, the noise of group g keyed by counter = step * G + g) draws them through it on a CPU.

Owns: `FrameSampler`, the CPU form of a frame's draws for rows that `sampling.fast_rows` marks (top_k in
1..SORT_WIDTH, or greedy; a vocabulary of at most SORT_WIDTH ids is sorted whole): the settings' per-group
columns and the seed-and-counter part of the hash made once per frame, then per group a top-(W+1)
selection, the stable order of the top W, the top-k edge, the top-p prefix (its mass from the same full
softmax as `process_logits`, so the kept set is the same bit for bit), the Gumbel noise only at the W
candidates (from the frame's noise when the batch is small, hashed at the candidates when it is large: the
same values) and the first-index Gumbel-max. The drawn ids equal `sample`'s exactly; logprobs are the same
log-softmax over the same kept set, summed over the candidates (float rounding, ~1e-7) or, with
`exact_logprobs`, over the whole vocabulary as `sample` sums it (the same bits).
A row whose ties at its k-th value (a greedy row: at its maximum) run past the W candidates makes the
group fall back to `sample` for the whole batch (the host sees it: one read per group), so every row's
draw stays its own whatever the batch. A group whose rows are all greedy is the first argmax alone (no
candidates, no noise). Per group, `raw_greedy_logprobs` makes a greedy row report the log-softmax of the
logits it was given (temperature 1: what a greedy reference's scores give) instead of the point mass's 0.
Must not know: the model, which family's groups these are, requests, the runtime; where a kernel would serve
(the caller picks this on CPU).
"""

from __future__ import annotations

import functools
import math
from typing import Protocol, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.models.sampling import gumbel_noise, sample
from v2.sampling_settings import MIN_TEMPERATURE, SORT_WIDTH

FRAME_NOISE_MAX = 1 << 16  # rows x groups x vocabulary up to which the frame's noise is made whole
SELECT_ROWS = 4  # rows from which the candidates come from numpy's argpartition instead of torch.topk


class GroupSettings(Protocol):
    """A batch's settings per code group: temperature / top_k / top_p [B, G] (column g: group g), seed [B]."""

    temperature: Tensor
    top_k: Tensor
    top_p: Tensor
    seed: Tensor


# MurmurHash3 in numpy's uint32 (wrapping arithmetic, the same values as sampling.hash_u32's int64 form in
# a few array operations on the host, where torch's per-operation cost would dominate tiny tensors)
def _word(w: np.ndarray) -> np.ndarray:
    k = w * 0xCC9E2D51
    return ((k << 15) | (k >> 17)) * 0x1B873593


def _fold(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    h = h ^ k
    return ((h << 13) | (h >> 19)) * 5 + 0xE6546B64


def _finish(h: np.ndarray, n_words: int) -> np.ndarray:
    h = h ^ (4 * n_words)
    h = (h ^ (h >> 16)) * 0x85EBCA6B
    h = (h ^ (h >> 13)) * 0xC2B2AE35
    return h ^ (h >> 16)


def _gumbel(h: np.ndarray) -> Tensor:
    """As `sampling.gumbel_from_hash` (the uniform is exact in float32; the logs are torch's, so the same bits)."""
    u = ((h >> 9).astype(np.float32) + np.float32(0.5)) * np.float32(1.0 / (1 << 23))
    return -torch.log(-torch.log(torch.from_numpy(u)))


@functools.lru_cache(maxsize=8)
def _token_words(vocab: int) -> np.ndarray:
    """The token half of the hash's last round, per token id: [vocab] uint32 (read-only)."""
    return _word(np.arange(vocab, dtype=np.uint32))


class FrameSampler:
    """Draws for the code groups of one frame: `draw(g, logits) -> (ids [B], logprobs [B])`.

    sampling: the batch's settings [B, G]; steps [B] int64: each row's frame index (counter = step * G + g);
    vocabs: each group's vocabulary (G of them; the logits of group g have vocabs[g] columns); groups: the
    groups this sampler draws (default all: the frame's noise is made for these); exact_logprobs: each
    logprob is `sample`'s log-softmax over the whole vocabulary, bit for bit (costs one [B, V] pass per draw);
    raw_greedy_logprobs: per group (G flags, default none), a greedy row's logprob is
    `log_softmax(logits)[id]` of the logits given to `draw` instead of 0."""

    def __init__(self, sampling: GroupSettings, steps: Tensor, vocabs: Sequence[int], *,
                 groups: Sequence[int] | None = None, exact_logprobs: bool = False,
                 raw_greedy_logprobs: Sequence[bool] | None = None) -> None:
        s, g = sampling, len(vocabs)
        if s.temperature.shape != (steps.shape[0], g):
            raise ValueError(f"FrameSampler: settings {tuple(s.temperature.shape)} for {steps.shape[0]} rows "
                             f"of {g} groups")
        raw = [False] * g if raw_greedy_logprobs is None else list(raw_greedy_logprobs)
        if len(raw) != g:
            raise ValueError(f"FrameSampler: raw_greedy_logprobs has {len(raw)} flags for {g} groups")
        self.sampling, self.steps, self.vocabs, self.exact_logprobs = s, steps, list(vocabs), exact_logprobs
        self.raw_greedy = raw
        drawn = list(range(g)) if groups is None else list(groups)
        self.greedy = s.temperature < MIN_TEMPERATURE                                     # [B, G]
        self.divisor = torch.where(self.greedy, torch.ones_like(s.temperature), s.temperature)
        widths = torch.tensor(self.vocabs, device=steps.device)                           # [G]
        self.no_k = ~((s.top_k > 0) & (s.top_k < widths))                                # [B, G]
        self.kth_index = torch.minimum(s.top_k.clamp(min=1), widths.clamp(max=SORT_WIDTH)) - 1  # [B, G]
        self.p_off = s.top_p >= 1                                                         # [B, G]
        self.counters = steps[:, None] * g + torch.arange(g, device=steps.device)        # [B, G]
        seed = s.seed.numpy()
        h = _fold(_fold(np.zeros(seed.shape, np.uint32), _word(seed.astype(np.uint32))),
                  _word((seed >> 32).astype(np.uint32)))                                  # [B]
        self.state = _fold(h[:, None], _word(self.counters.numpy().astype(np.uint32)))   # [B, G] uint32
        # which groups have any greedy row, only greedy rows, any row without top-k, any row with top-p (one read)
        self.any_greedy, self.all_greedy, self.any_no_k, self.any_p = torch.stack(
            [self.greedy.any(0), self.greedy.all(0), self.no_k.any(0), (~self.p_off).any(0)]).tolist()
        # each group's [B, 1] column of the settings, as views made at once (a draw reads its own)
        self._divisor, self._kth_index, self._no_k, self._greedy, self._top_p, self._p_off = (
            t.t()[..., None].unbind(0) for t in (self.divisor, self.kth_index, self.no_k, self.greedy, s.top_p,
                                                 self.p_off))
        self.noise: Tensor | None = None
        drawn = [grp for grp in drawn if not self.all_greedy[grp]]  # the groups that need noise
        self._noise_of: dict[int, Tensor] = {}
        width = max((self.vocabs[grp] for grp in drawn), default=0)
        if drawn and steps.shape[0] * len(drawn) * width <= FRAME_NOISE_MAX:  # small batch: the frame's noise at once
            self.noise = _gumbel(_finish(_fold(self.state[:, drawn, None], _token_words(width)), 4))  # [B, D, V]
            self._noise_of = dict(zip(drawn, self.noise.unbind(1)))  # group -> [B, V]

    def _noise_at(self, grp: int, ids: Tensor) -> Tensor:
        """Gumbel noise of group grp at token ids [B, W]."""
        if self.noise is not None:
            return self._noise_of[grp].gather(1, ids)
        k = _token_words(self.vocabs[grp])[ids.numpy()]  # [B, W]
        return _gumbel(_finish(_fold(self.state[:, grp, None], k), 4))

    def draw(self, grp: int, logits: Tensor) -> tuple[Tensor, Tensor]:
        """logits [B, V] of group grp (after any penalty and masks) -> token ids [B] and their logprobs [B]."""
        logits = logits.float()
        v = logits.shape[-1]
        if v != self.vocabs[grp]:
            raise ValueError(f"FrameSampler.draw: group {grp} has {self.vocabs[grp]} ids, got logits of {v}")
        if self.all_greedy[grp]:  # the first argmax (as `sample`'s point mass picks it), logprob 0 or raw
            picked = logits.argmax(dim=-1, keepdim=True)                                   # [B, 1]
            if self.raw_greedy[grp]:
                return picked[:, 0], torch.log_softmax(logits, dim=-1).gather(1, picked)[:, 0]
            return picked[:, 0], torch.zeros(picked.shape[0], device=logits.device)
        width = min(SORT_WIDTH, v)
        z = logits / self._divisor[grp]                                            # [B, V]
        # the top W + 1 in no order (topk's own sort costs more than the rest of the draw at one row), then by
        # value, ties by id: the first W are the candidates (a tie at the W-th value picks other ids than a sorted
        # topk only where that value is below the drawable edge: never drawn, never in a logprob) and the last
        # is the value the ties check reads
        if width < v:
            order_all, sorted_all = _candidates(z, width + 1)                              # [B, W + 1]
            order, sorted_z = order_all[:, :width], sorted_all[:, :width]                 # [B, W] stable order
        else:  # the whole vocabulary: its ids are already ascending, so the stable order is z's own
            sorted_z, order = z.sort(dim=-1, descending=True, stable=True)                 # [B, V]
            sorted_all = sorted_z
        kth = sorted_z.gather(1, self._kth_index[grp])                            # [B, 1]
        if self.any_no_k[grp]:
            kth = kth.masked_fill(self._no_k[grp], -math.inf)
        greedy = self._greedy[grp]                                                          # [B, 1]
        edge = torch.where(greedy, sorted_z[:, :1], kth) if self.any_greedy[grp] else kth  # lowest drawable value
        if width < v and bool((sorted_all[:, width:] >= edge).any()):
            return self._fallback(grp, logits)  # ties at that value past the candidates
        kept = sorted_z >= kth                                                             # top-k, [B, W]
        if self.any_p[grp]:
            probs = torch.softmax(z.masked_fill(z < kth, -math.inf), dim=-1)  # as process_logits: the same bits
            sorted_p = probs.gather(1, order)
            before = torch.cumsum(sorted_p, dim=-1) - sorted_p
            keep = (before < self._top_p[grp]) | self._p_off[grp]
            keep[:, 0] = True
            kept = kept & keep
        zc = torch.where(kept, sorted_z, -math.inf)                                        # [B, W] processed
        if self.any_greedy[grp]:
            zc = torch.where(greedy, _point(width, z.device), zc)  # greedy: the first argmax alone
        score = zc + self._noise_at(grp, order)
        first = torch.where(score == score.amax(dim=-1, keepdim=True), order, v).argmin(dim=-1, keepdim=True)
        picked = order.gather(1, first)                                                    # [B, 1]
        if self.exact_logprobs:  # the processed logits over the whole vocabulary, as `sample` normalises them
            whole = torch.full_like(z, -math.inf).scatter_(1, order, zc)                   # [B, V]
            lp = torch.log_softmax(whole, dim=-1).gather(1, picked)[:, 0]
        else:
            lp = torch.log_softmax(zc, dim=-1).gather(1, first)[:, 0]
        return picked[:, 0], self._greedy_raw(grp, logits, picked[:, 0], lp)

    def _greedy_raw(self, grp: int, logits: Tensor, ids: Tensor, lp: Tensor) -> Tensor:
        """lp [B], with the greedy rows' logprobs under the raw logits where the group asks for them."""
        if not (self.raw_greedy[grp] and self.any_greedy[grp]):
            return lp
        raw = torch.log_softmax(logits, dim=-1).gather(1, ids[:, None])[:, 0]
        return torch.where(self.greedy[:, grp], raw, lp)

    def _fallback(self, grp: int, logits: Tensor) -> tuple[Tensor, Tensor]:
        s = self.sampling
        noise = gumbel_noise(s.seed, self.counters[:, grp], logits.shape[-1])
        ids, lp = sample(logits, s.temperature[:, grp], s.top_k[:, grp], s.top_p[:, grp], noise, full=False)
        return ids, self._greedy_raw(grp, logits, ids, lp)


def _candidates(z: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest of each row of z [B, V] (k < V) by value, ties by id: ids [B, k] int64 and their values [B, k]
    (which of several ids tied at the k-th value is not promised). The order is made by sorting the ids, then a
    stable descending sort by value. Below SELECT_ROWS rows (or off the CPU) the k come from torch.topk, unsorted;
    from SELECT_ROWS rows on the CPU from numpy's introselect (at 16 rows of 2,048 ids 55 us against topk's 180),
    and the sorts are numpy's too (a float32 array's values compared as torch compares them; ties keep the id
    order)."""
    if z.shape[0] < SELECT_ROWS or z.device.type != "cpu":
        top = torch.topk(z, k, dim=-1, sorted=False)                                       # [B, k] in no order
        ids, perm = top.indices.sort(dim=-1)                                               # ids ascending
        sorted_all, by_value = top.values.gather(1, perm).sort(dim=-1, descending=True, stable=True)
        return ids.gather(1, by_value), sorted_all
    zn = z.detach().numpy()
    ids_n = np.sort(np.argpartition(zn, zn.shape[-1] - k, axis=-1)[:, zn.shape[-1] - k:], axis=-1)  # [B, k] ascending
    values = np.take_along_axis(zn, ids_n, -1)
    by_n = np.argsort(-values, axis=-1, kind="stable")  # descending, ties in id order (-x is exact)
    order = np.take_along_axis(ids_n, by_n, -1).astype(np.int64, copy=False)
    return torch.from_numpy(order), torch.from_numpy(np.take_along_axis(values, by_n, -1))


@functools.lru_cache(maxsize=8)
def _point(width: int, device: torch.device) -> Tensor:
    """[1, width]: 0 at the first candidate, -inf elsewhere (a greedy row's processed logits)."""
    return torch.full((1, width), -math.inf, device=device).index_fill_(1, torch.tensor([0], device=device), 0.0)
