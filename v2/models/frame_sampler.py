"""One frame's seeded draws on the host, at each code group's top candidates: the same draws as `sampling.sample`.

A shared building block: every family that draws a frame as G code groups (each with its own vocabulary and
settings column, the noise of group g keyed by counter = step * G + g) draws them through it on a CPU.

Owns: `FrameSampler`, the CPU form of a frame's draws for rows that `sampling.fast_rows` marks (top_k in
1..SORT_WIDTH, or greedy; a vocabulary of at most SORT_WIDTH ids is sorted whole). Per frame: the settings'
per-group columns and host flags (`frame_columns`, cached by value), the seed-and-counter part of the hash and
the Gumbel noise of every drawn group when the batch is small (`host_gumbel`: numpy, the same bits).
One row (batch 1), per group on 1-D numpy: the top W + 1 values by one partition and a sort of those; where
they are strictly decreasing the top-k is their first k and the stable order is theirs, the top-p cut comes
from their float64 masses, and the kept ids are the values at or above the lowest kept one, read in id order
by one compare (their noise gathered, the first highest score the smallest id); ties, a NaN or a mass near
top_p go to the batch path.
A batch, per group: the W + 1 candidates by numpy's partition and one `flatnonzero` (in id order; ties at the
edge: torch.topk's; a wide batch partitions only the values at or above a bound, `top_edge`), the stable order (by value, ties by id) where an order shapes the bits (the top-p prefix,
a logprob summed over the candidates), the ties check, the top-p cut (`_cut_top_p`), the noise only at the
candidates (gathered from the frame's noise, or hashed there: the same values) and the first-id Gumbel-max.
The top-p cut is `process_logits`' (torch's float32 softmax over the whole row, its cumsum in float64): it is
decided from float64 masses over the W values where every one lies farther than `TOP_P_MARGIN` from top_p
(there the float32 bits cannot decide otherwise; the bound is argued at the constant) and from torch's bits
otherwise (rare), so the kept set is the same bit for bit.
The drawn ids equal `sample`'s exactly; logprobs are the log-softmax of the processed logits over the top
SORT_WIDTH ids in stable order (bit for bit that, within float rounding of `sample`'s ~1e-7) or, with
`exact_logprobs`, over the whole vocabulary as `sample` sums it (the same bits).
A row whose ties at its k-th value (a greedy row: at its maximum) run past the W candidates makes the
group fall back to `sample` for the whole batch (the host sees it), so every row's draw stays its own
whatever the batch. A group whose rows are all greedy is the first argmax alone (no candidates, no noise).
Per group, `raw_greedy_logprobs` makes a greedy row report the log-softmax of the logits it was given
(temperature 1: what a greedy reference's scores give) instead of the point mass's 0.
Must not know: the model, which family's groups these are, requests, the runtime; where a kernel would serve
(the caller picks this on CPU; the sampler takes CPU tensors only).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.models.frame_columns import columns
from v2.models.host_gumbel import finish, fold, gumbel, seed_state, token_words
from v2.models.sampling import gumbel_noise, sample
from v2.models.top_edge import at_or_above
from v2.sampling_settings import SORT_WIDTH

FRAME_NOISE_MAX = 1 << 16  # rows x groups x vocabulary up to which the frame's noise is made whole
_INF = np.float32(np.inf)
# How far (in mass, of 1) the float64 top-p mass may lie from top_p and still decide as torch's float32 bits do.
# Those bits are p_j = fl(exp(fl(z_j - max)) / sum) (or x 1/sum) and fl32(fl64 cumsum) - p_i: each exp within a
# few ulp (u = 2^-24) of its rounded argument, whose rounding moves p_j by |z_j - max| u relatively (summed
# over j with weights p_j <= e^(z_j - max): at most W/e u); a sum of <= W positive terms (the rest exact zeros)
# in any order within (W - 1) u; the division or reciprocal product 2u; the casts and the subtraction 2u; flushed
# subnormals W 2^-126. So |bits - mass| <= (W/e + W + 8 + 4) u ~ 6e-6 for W = 64 and exps within 8 ulp (they
# are within 1-2); the float64 side is ~1e-14 off. Outside 1e-4 both decide the same (the exps could be off
# by ~1500 ulp and still would).
TOP_P_MARGIN = 1e-4
_MINUS_INF_ROW = np.full(SORT_WIDTH, -_INF, dtype=np.float32)  # copied for a row's processed top W (read-only)
_MINUS_INF_ROW.flags.writeable = False


class GroupSettings(Protocol):
    """A batch's settings per code group: temperature / top_k / top_p [B, G] (column g: group g), seed [B]."""

    temperature: Tensor
    top_k: Tensor
    top_p: Tensor
    seed: Tensor


def _candidates(zn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The W + 1 highest values of each row of zn [B, V] (V > W + 1) with their ids,
    by id: (ids, values) [B, W + 1]. The (W + 1)-th highest value is numpy's partition's (exact, whatever the
    algorithm); where it is unique in every row, the candidates are the values at or above it, read in id order
    by one `flatnonzero` (`top_edge.at_or_above`: a wide batch's among the few at or above a bound). Ties at it
    (or a NaN) take torch.topk's W + 1 (any of the tied), put in id order."""
    b, v = zn.shape
    w = SORT_WIDTH + 1
    flat, values, counts = at_or_above(zn, w)  # (a NaN is never above)
    if flat.shape[0] == b * w and bool((counts == w).all()):
        return flat.reshape(b, w) % v, values.reshape(b, w)
    ids = np.sort(torch.topk(torch.from_numpy(zn), w, dim=-1, sorted=False).indices.numpy(), axis=-1)            # [B, W + 1]
    return ids, np.take_along_axis(zn, ids, axis=-1)


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
        if steps.device.type != "cpu":
            raise ValueError(f"FrameSampler: steps on {steps.device}; the host sampler takes CPU tensors")
        self.sampling, self.steps, self.vocabs, self.exact_logprobs = s, steps, list(vocabs), exact_logprobs
        self.raw_greedy = raw
        c = columns(s.temperature.numpy(), s.top_k.numpy(), s.top_p.numpy(), self.vocabs, TOP_P_MARGIN)
        self.any_greedy, self.all_greedy, self.any_no_k, self.any_p = c.any_greedy, c.all_greedy, c.any_no_k, c.any_p
        self._divisor, self._kth_index, self._kth_up, self._no_k = c.divisor, c.kth_index, c.kth_up, c.no_k
        self._greedy, self._top_p, self._p_off, self._cut, self._rows = c.greedy, c.top_p, c.p_off, c.cut, c.rows
        self._row_divisor, self._row_k, self._row_cut = c.row_divisor, c.row_k, c.row_cut
        self.counters = steps.numpy()[:, None] * g + np.arange(g)                                    # [B, G] int64
        self.state = seed_state(s.seed.numpy(), self.counters)                                       # [B, G] uint32
        self.noise: np.ndarray | None = None
        self._minus_inf: dict[int, np.ndarray] = {}  # vocabulary -> [B, V] of -inf (`_over_whole`)
        drawn = [grp for grp in (range(g) if groups is None else groups) if not self.all_greedy[grp]]
        self._noise_column = {grp: i for i, grp in enumerate(drawn)}  # group -> its column of the frame's noise
        width = max((self.vocabs[grp] for grp in drawn), default=0)
        if drawn and steps.shape[0] * len(drawn) * width <= FRAME_NOISE_MAX:  # small batch: the frame's noise at once
            self.noise = gumbel(finish(fold(self.state[:, drawn, None], token_words(width)), 4))  # [B, D, V]

    def _noise_at(self, grp: int, ids: np.ndarray) -> np.ndarray:
        """Gumbel noise of group grp at token ids [B, W]."""
        if self.noise is not None:
            return self.noise[self._rows, self._noise_column[grp], ids]
        return gumbel(finish(fold(self.state[:, grp, None], token_words(self.vocabs[grp])[ids]), 4))

    def draw(self, grp: int, logits: Tensor) -> tuple[Tensor, Tensor]:
        """logits [B, V] of group grp (after any penalty and masks) -> token ids [B] and their logprobs [B]."""
        if logits.dtype != torch.float32:
            logits = logits.float()
        v = logits.shape[-1]
        if v != self.vocabs[grp]:
            raise ValueError(f"FrameSampler.draw: group {grp} has {self.vocabs[grp]} ids, got logits of {v}")
        if self.all_greedy[grp]:  # the first argmax (as `sample`'s point mass picks it), logprob 0 or raw
            picked = logits.argmax(dim=-1, keepdim=True)                                   # [B, 1]
            if self.raw_greedy[grp]:
                return picked[:, 0], torch.log_softmax(logits, dim=-1).gather(1, picked)[:, 0]
            return picked[:, 0], torch.zeros(picked.shape[0])
        if self._rows.shape[0] == 1 and self._row_k[grp]:
            one = self._draw_row(grp, logits)
            if one is not None:
                return one
        zn = (logits.detach() if logits.requires_grad else logits).numpy() / self._divisor[grp]           # [B, V]
        ids, vals, last, kth, top1 = self._stable_top(grp, zn)
        rows = self._rows                                                                    # [B, 1]
        if self.any_no_k[grp]:
            kth = np.where(self._no_k[grp], -_INF, kth)
        greedy = self._greedy[grp]                                                           # [B, 1]
        edge = np.where(greedy, top1, kth) if self.any_greedy[grp] else kth  # lowest drawable value
        if last is not None and bool((last >= edge).any()):
            return self._fallback(grp, logits)  # ties at that value past the candidates
        zc = np.where(vals >= kth, vals, -_INF)                                              # top-k
        if self.any_p[grp]:
            self._cut_top_p(grp, v, ids, zc)                                                 # processed
        score = zc + self._noise_at(grp, ids)
        first = np.where(score == score.max(axis=-1, keepdims=True), ids, v).argmin(axis=-1)  # [B] place
        if self.any_greedy[grp]:  # the first argmax alone
            first = np.where(greedy[:, 0], np.where(vals == top1, ids, v).argmin(axis=-1), first)
        picked = ids[rows[:, 0], first]                                                      # [B]
        if self.exact_logprobs:  # the processed logits over the whole vocabulary, as `sample` normalises them
            lp = self._over_whole(torch.log_softmax, v, ids, zc)[rows[:, 0], picked]
        else:
            lp = torch.log_softmax(torch.from_numpy(zc), dim=-1).numpy()[rows[:, 0], first]
        if self.any_greedy[grp]:  # the point mass's 0
            lp = np.where(greedy[:, 0], np.float32(0), lp)
        ids_t = torch.from_numpy(picked)
        return ids_t, self._greedy_raw(grp, logits, ids_t, torch.from_numpy(lp))

    def _draw_row(self, grp: int, logits: Tensor) -> tuple[Tensor, Tensor] | None:
        """`draw` for a batch of one row in fewer (1-D) operations, the same bits; None (the batch path decides)
        where the row's top W + 1 values tie (or hold a NaN) or its top-p mass lies within the margin of top_p.
        Strictly decreasing values make the top-k the first k of them and the stable order their order; the
        kept ids are then the values at or above the lowest kept one, read in id order (the Gumbel-max's first
        highest score is then the smallest id)."""
        v, k = self.vocabs[grp], self._row_k[grp]
        z = (logits.detach() if logits.requires_grad else logits).numpy()[0] / self._row_divisor[grp]   # [V]
        w = min(v, SORT_WIDTH + 1)
        top = np.partition(z, v - w)[v - w:] if v > w else z.copy()                           # [w]
        top.sort()  # ascending
        if not bool((top[:-1] < top[1:]).all()):
            return None
        n = k  # kept by top-k and top-p: the first n of the descending values
        if self.any_p[grp]:  # the mass ahead of place i + 1 is through[i] / total (`_cut_top_p`)
            through = np.add.accumulate(np.exp(np.subtract(top[w - k:][::-1], top[-1], dtype=np.float64)))  # [k]
            total = float(through[-1])
            lo, hi = np.searchsorted(through[:-1], total * self._row_cut[grp]).tolist()  # places below top_p -+ m
            if lo != hi or not math.isfinite(total):
                return None
            n = 1 + lo
        ids = (z >= top[w - n]).nonzero()[0]                                                  # [n] by id
        zk = z[ids]
        noise = (self.noise[0, self._noise_column[grp]][ids] if self.noise is not None
                 else self._noise_at(grp, ids[None])[0])                                      # [n]
        i = int((zk + noise).argmax())  # the first highest score: the smallest id among them
        picked = ids[i:i + 1]                                                                 # [1]
        if self.exact_logprobs:
            lp = self._over_whole(torch.log_softmax, v, ids[None], zk[None])[0, picked]
        else:  # over the top W (min(V, W)) in stable order, -inf past the kept ones
            zc = _MINUS_INF_ROW[: min(v, SORT_WIDTH)].copy()                                  # [W]
            zc[:n] = top[w - n:][::-1]
            place = w - 1 - int(np.searchsorted(top, zk[i]))
            lp = torch.log_softmax(torch.from_numpy(zc[None]), dim=-1).numpy()[0, place:place + 1]
        return torch.from_numpy(picked), torch.from_numpy(lp)

    def _stable_top(self, grp: int, zn: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray,
                                                            np.ndarray]:
        """The candidates (ids, values [B, W']), the (W + 1)-th value [B, 1] (None for a vocabulary sorted
        whole), the k-th and the highest value [B, 1] of zn [B, V]. In stable order
        (by value, ties by id) where the order shapes the bits: the top-p prefix, a logprob summed over the
        candidates; else by id (W' = W + 1), the values sorted apart."""
        rows, v = self._rows, zn.shape[-1]
        if v <= SORT_WIDTH:  # the whole vocabulary in stable order (-x is exact; ties keep the id order)
            ids = np.argsort(-zn, axis=-1, kind="stable")                                    # [B, V]
            vals = zn[rows, ids]
            return ids, vals, None, vals[rows, self._kth_index[grp]], vals[:, :1]
        ids, vals = _candidates(zn)                                    # [B, W + 1]
        if self.any_p[grp] or not self.exact_logprobs:  # the first W by value (ties at the W-th value past
            # the drawable edge never drawn, never in a logprob)
            by_value = (-vals).argsort(axis=-1)  # the stable order where no row ties (3x a stable sort's speed)
            ordered = vals[rows, by_value]
            if not bool((ordered[:, 1:] < ordered[:, :-1]).all()):  # ties (or a NaN): those by id
                by_value = (-vals).argsort(axis=-1, kind="stable")
                ordered = vals[rows, by_value]
            ids, vals = ids[rows, by_value], ordered
            ids, vals, last = ids[:, :SORT_WIDTH], vals[:, :SORT_WIDTH], vals[:, SORT_WIDTH:]
            return ids, vals, last, vals[rows, self._kth_index[grp]], vals[:, :1]
        ascending = np.sort(vals, axis=-1)  # the edge and the k-th value from the sorted values alone
        return ids, vals, ascending[:, :1], ascending[rows, self._kth_up[grp]], ascending[:, SORT_WIDTH:]

    def _cut_top_p(self, grp: int, v: int, ids: np.ndarray, zc: np.ndarray) -> None:
        """Sets to -inf, in zc [B, W] (the top-k logits at ids, by value), the ids past each row's top-p prefix:
        those whose top-k mass ahead is not below top_p (`process_logits`' rule). The bits of that mass are
        torch's float32 softmax over the whole row, its float64 cumsum cast to float32, less the id's own
        probability; the decision is made in float64 on the W values where it cannot differ (`TOP_P_MARGIN`),
        else (rare) from those bits, for the rows that need them."""
        mass = np.exp(np.subtract(zc, zc[:, :1], dtype=np.float64))                          # [B, W]
        through = np.add.accumulate(mass, axis=-1)  # the mass up to and with each place (x the row's total)
        total = through[:, -1:]                                                              # [B, 1]
        gap = through[:, :-1] - total * self._cut[grp]  # place i + 1's mass ahead less top_p, x total [B, W - 1]
        far = (np.abs(gap) > total * TOP_P_MARGIN).all(axis=-1)  # [B] (a NaN row is not)
        if bool(far.all()):
            np.copyto(zc[:, 1:], -_INF, where=gap >= 0)
            return
        near = (~far).nonzero()[0]  # these rows from torch's bits (a row's softmax is its own, whatever the rows)
        sub_ids, sub = ids[near], zc[near]                                                   # [R, W]
        sorted_p = self._over_whole(torch.softmax, v, sub_ids, sub)[self._rows[: near.shape[0]], sub_ids]
        before = np.cumsum(sorted_p, axis=-1, dtype=np.float64).astype(np.float32) - sorted_p  # torch's cumsum
        keep = (before < self._top_p[grp][near]) | self._p_off[grp][near]
        keep[:, 0] = True
        np.copyto(zc[:, 1:], -_INF, where=(gap >= 0) & far[:, None])
        zc[near] = np.where(keep, sub, -_INF)

    def _over_whole(self, fn: Callable[..., Tensor], v: int, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        """fn(rows, dim=-1) of [R, v] rows (R <= B) that hold `values` [R, W] at `ids` and -inf elsewhere -> [R, v].
        The rows are a buffer of -inf kept for the frame, written at ids and restored after (no fresh [B, v] per
        draw)."""
        whole = self._minus_inf.get(v)
        if whole is None:
            whole = self._minus_inf[v] = np.full((self._rows.shape[0], v), -_INF, dtype=np.float32)
        whole, rows = whole[: ids.shape[0]], self._rows[: ids.shape[0]]  # the first rows where ids has fewer
        whole[rows, ids] = values
        out: np.ndarray = fn(torch.from_numpy(whole), dim=-1).numpy()
        whole[rows, ids] = -_INF
        return out

    def _greedy_raw(self, grp: int, logits: Tensor, ids: Tensor, lp: Tensor) -> Tensor:
        """lp [B], with the greedy rows' logprobs under the raw logits where the group asks for them."""
        if not (self.raw_greedy[grp] and self.any_greedy[grp]):
            return lp
        raw = torch.log_softmax(logits, dim=-1).gather(1, ids[:, None])[:, 0]
        return torch.where(torch.from_numpy(self._greedy[grp][:, 0].copy()), raw, lp)  # (the column is read-only)

    def _fallback(self, grp: int, logits: Tensor) -> tuple[Tensor, Tensor]:
        s = self.sampling
        noise = gumbel_noise(s.seed, torch.from_numpy(self.counters[:, grp]), logits.shape[-1])
        ids, lp = sample(logits, s.temperature[:, grp], s.top_k[:, grp], s.top_p[:, grp], noise, full=False)
        return ids, self._greedy_raw(grp, logits, ids, lp)
