"""Qwen3-TTS choices: the talker's group-0 rule and the code predictor's draws, seeded and batch-invariant.

Owns: the per-row tensor form of `Qwen3TTSSampling` (column 0 = talker, column 1 = code predictor), the
group-0 rule in the reference's order (repetition penalty over the distinct earlier group-0 ids, EOS
masked where not allowed, control ids except EOS suppressed, then temperature / top-k / top-p), and the
noise counters: group g of frame t is keyed by `t * G + g` (group 0 = the talker's choice of frame t), so
a row's draw depends only on its own logits, seed and frame, never on its batch. The distribution and
Gumbel-max draw are v2/models/sampling.py's (`sample`), so a logprob is exact under the processed
distribution the id was drawn from; temperature 0 is a point mass on the argmax (logprob 0).
`FrameDraws` picks how a frame's draws are made (the shared frame samplers: the fused kernel where the
kernels run, `FrameSampler` on a CPU batch whose rows all take the top-candidate path, `sample` otherwise):
the same ids everywhere, and on a CPU the same logprobs bit for bit.
Must not know: the model, requests, the runtime.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from v2.models.frame_sampler import FrameSampler
from v2.models.kernels import kernels_on
from v2.models.kernels.sample import MAX_VOCAB, sample_fused
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.sampling import (
    apply_repetition_penalty, gumbel_noise, head_columns, head_needs_full_sort, sample,
)


@dataclass
class Qwen3TTSSamplingTensors:
    """Per-row settings of a batch: temperature / top_k / top_p [B, 2] (talker, code predictor),
    penalty [B] (group 0), seed [B]."""

    temperature: Tensor
    top_k: Tensor
    top_p: Tensor
    penalty: Tensor
    seed: Tensor
    full_sort: bool = True  # False promises that no row needs the full sort (skips it)

    @classmethod
    def build(cls, settings: list[Qwen3TTSSampling], seeds: list[int],
              device: torch.device | str = "cpu") -> "Qwen3TTSSamplingTensors":
        if len(settings) != len(seeds):
            raise ValueError(f"{len(settings)} settings for {len(seeds)} seeds")
        heads = [(s.talker, s.subtalker) for s in settings]
        temperature, top_k, top_p = head_columns(heads, device)
        return cls(
            temperature=temperature, top_k=top_k, top_p=top_p,
            penalty=torch.tensor([s.repetition_penalty for s in settings], dtype=torch.float32, device=device),
            seed=torch.tensor(seeds, dtype=torch.int64, device=device),
            full_sort=any(head_needs_full_sort(h) for p in heads for h in p),
        )

    def rows(self, index: Tensor) -> "Qwen3TTSSamplingTensors":
        """The settings of rows `index` ([B'] long), e.g. to pad or reorder a batch."""
        return Qwen3TTSSamplingTensors(self.temperature[index], self.top_k[index], self.top_p[index],
                                       self.penalty[index], self.seed[index], self.full_sort)


def group0_mask(vocab: int, eos: int, control: range, device: torch.device | str) -> Tensor:
    """[V] bool: the ids the group-0 choice never takes (the control ids except EOS)."""
    ids = torch.arange(vocab, device=device)
    return (ids >= control.start) & (ids < control.stop) & (ids != eos)


def group0_logits(logits: Tensor, s: Qwen3TTSSamplingTensors, seen: Tensor | None, allow_eos: Tensor,
                  eos: int, suppress: Tensor) -> Tensor:
    """The talker's rule before temperature: logits [B, V] float32 raw; seen [B, V] bool (group-0 ids
    chosen at earlier steps; None = none); allow_eos [B] bool; suppress [V] bool (`group0_mask`)."""
    x = logits.float()
    if seen is not None:
        x = apply_repetition_penalty(x, seen, s.penalty)
    eos_col = torch.zeros_like(suppress)
    eos_col[eos] = True
    x = x.masked_fill(eos_col[None] & ~allow_eos[:, None], -math.inf)
    return x.masked_fill(suppress[None], -math.inf)


def choose_group0(logits: Tensor, s: Qwen3TTSSamplingTensors, frame: Tensor, num_groups: int, *,
                  seen: Tensor | None, allow_eos: Tensor, eos: int, suppress: Tensor) -> tuple[Tensor, Tensor]:
    """Group 0 of frame `frame` [B] for every row: ids [B] and logprobs [B] under the processed distribution."""
    x = group0_logits(logits, s, seen, allow_eos, eos, suppress)
    noise = gumbel_noise(s.seed, frame * num_groups, x.shape[-1])
    return sample(x, s.temperature[:, 0], s.top_k[:, 0], s.top_p[:, 0], noise, full=s.full_sort)


def draw_code(logits: Tensor, s: Qwen3TTSSamplingTensors, frame: Tensor, group: int,
              num_groups: int) -> tuple[Tensor, Tensor]:
    """Group `group` (1..G-1) of frame `frame` [B] from the code predictor's raw logits [B, V]."""
    noise = gumbel_noise(s.seed, frame * num_groups + group, logits.shape[-1])
    return sample(logits, s.temperature[:, 1], s.top_k[:, 1], s.top_p[:, 1], noise, full=s.full_sort)


@dataclass
class GroupColumns:
    """The settings of every group of a frame: temperature / top_k / top_p [B, G] (group 0: the talker's
    column, groups 1..G-1: the code predictor's), seed [B] (`frame_sampler.GroupSettings`)."""

    temperature: Tensor
    top_k: Tensor
    top_p: Tensor
    seed: Tensor

    @classmethod
    def of(cls, s: Qwen3TTSSamplingTensors, num_groups: int) -> "GroupColumns":
        cols = torch.tensor([0] + [1] * (num_groups - 1), device=s.seed.device)  # [G] group -> settings column
        return cls(s.temperature[:, cols], s.top_k[:, cols], s.top_p[:, cols], s.seed)


class FrameDraws:
    """The draws of frame `frame` [B] for B rows: group 0 (`group0`) and groups 1..G-1 (`code`).

    vocabs: group 0's vocabulary (the talker's) and the code predictor's; groups: the groups these draws
    make (default all; the host sampler makes the frame's noise for those). Where the Triton kernels run each
    draw is one fused launch (the rule's penalty and masks folded in; vocabularies up to its 4096); on a CPU batch whose rows need no
    full sort, the host `FrameSampler`; elsewhere `sample` (the functions above)."""

    def __init__(self, s: Qwen3TTSSamplingTensors, frame: Tensor, num_groups: int, vocabs: tuple[int, int], *,
                 groups: list[int] | None = None) -> None:
        self.s, self.frame, self.num_groups = s, frame, num_groups
        self.fused = kernels_on(frame.device) and max(vocabs) <= MAX_VOCAB
        self.host: FrameSampler | None = None
        if not self.fused and frame.device.type == "cpu" and not s.full_sort:
            self.host = FrameSampler(GroupColumns.of(s, num_groups), frame, [vocabs[0]] + [vocabs[1]] * (num_groups - 1),
                                     groups=groups, exact_logprobs=True)

    def group0(self, logits: Tensor, *, seen: Tensor | None, allow_eos: Tensor, eos: int,
               suppress: Tensor) -> tuple[Tensor, Tensor]:
        """Group 0 from the talker's raw logits [B, V] (any float dtype): `choose_group0`'s rule and draw."""
        s = self.s
        if self.fused:
            return sample_fused(logits, s.temperature[:, 0], s.top_k[:, 0], s.top_p[:, 0], s.seed, self.frame, 0,
                                seen, None if seen is None else s.penalty, groups=self.num_groups, banned=suppress,
                                stop=(eos, allow_eos))
        if self.host is None:
            return choose_group0(logits, s, self.frame, self.num_groups, seen=seen, allow_eos=allow_eos, eos=eos,
                                 suppress=suppress)
        return self.host.draw(0, group0_logits(logits, s, seen, allow_eos, eos, suppress))

    def code(self, group: int, logits: Tensor) -> tuple[Tensor, Tensor]:
        """Group `group` (1..G-1) from the code predictor's raw logits [B, V] (any float dtype)."""
        s = self.s
        if self.fused:
            return sample_fused(logits, s.temperature[:, 1], s.top_k[:, 1], s.top_p[:, 1], s.seed, self.frame, group,
                                groups=self.num_groups)
        if self.host is None:
            return draw_code(logits.float(), s, self.frame, group, self.num_groups)
        return self.host.draw(group, logits)
