"""CSM choices: codebook 0 from the backbone's logits and codebooks 1..N-1 from the depth decoder's, seeded
and batch-invariant, with the logprob of every chosen code.

Owns: the per-row tensor form of `CsmSampling` (column 0 = the backbone head, column 1 = the depth head)
and the noise counters: codebook k of frame t is keyed by `t * N + k`, so a row's draw depends only on
its own logits, seed and frame, never on its batch. The processed distribution (temperature -> top-k ->
top-p -> softmax) and the Gumbel-max draw with counter-hash noise are v2/models/sampling.py's (`sample`).
Logprobs: a sampled head reports `log_softmax(processed)[id]`, the distribution the code was drawn
from; a greedy head (temperature 0, a point mass in `sample`) reports `log_softmax(raw logits)[id]`,
the temperature-1 distribution whose argmax it took (what the reference's greedy scores give).
`FrameDraws` picks how a frame's N draws are made (the shared frame samplers, each group scored as above:
the fused kernel where the kernels run, `FrameSampler` on a CPU batch whose rows all take the
top-candidate path, `draw` otherwise): the same codes everywhere, and on a CPU the same logprobs bit for bit.
Must not know: the model, requests, the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from v2.models.csm.config import CsmSampling
from v2.models.frame_sampler import FrameSampler
from v2.models.kernels import kernels_on
from v2.models.kernels.sample import sample_fused
from v2.models.sampling import gumbel_noise, head_columns, head_needs_full_sort, sample
from v2.sampling_settings import MIN_TEMPERATURE

BACKBONE, DEPTH = 0, 1  # columns of the settings tensors


@dataclass
class CsmSamplingTensors:
    """Per-row settings of a batch: temperature / top_k / top_p [B, 2] (backbone, depth), seed [B]."""

    temperature: Tensor
    top_k: Tensor
    top_p: Tensor
    seed: Tensor
    full_sort: bool = True  # False promises that no row needs the full sort (skips it)

    @classmethod
    def build(cls, settings: list[CsmSampling], seeds: list[int],
              device: torch.device | str = "cpu") -> "CsmSamplingTensors":
        if len(settings) != len(seeds):
            raise ValueError(f"{len(settings)} settings for {len(seeds)} seeds")
        heads = [(s.backbone, s.depth) for s in settings]
        temperature, top_k, top_p = head_columns(heads, device)
        return cls(
            temperature=temperature, top_k=top_k, top_p=top_p,
            seed=torch.tensor(seeds, dtype=torch.int64, device=device),
            full_sort=any(head_needs_full_sort(h) for p in heads for h in p),
        )

    def rows(self, index: Tensor) -> "CsmSamplingTensors":
        """The settings of rows `index` ([B'] long), e.g. to pad or reorder a batch."""
        return CsmSamplingTensors(self.temperature[index], self.top_k[index], self.top_p[index], self.seed[index],
                                  self.full_sort)


def draw(logits: Tensor, s: CsmSamplingTensors, head: int, frame: Tensor, codebook: int,
         num_codebooks: int) -> tuple[Tensor, Tensor]:
    """Codebook `codebook` of frame `frame` [B] from raw logits [B, V] with head `head` (BACKBONE for
    codebook 0, DEPTH for the others) -> codes [B] int64, logprobs [B] float32 (see the module docstring)."""
    logits = logits.float()
    noise = gumbel_noise(s.seed, frame * num_codebooks + codebook, logits.shape[-1])  # [B, V]
    temperature = s.temperature[:, head]
    ids, lp = sample(logits, temperature, s.top_k[:, head], s.top_p[:, head], noise, full=s.full_sort)
    raw = torch.log_softmax(logits, dim=-1).gather(1, ids[:, None])[:, 0]
    return ids, torch.where(temperature < MIN_TEMPERATURE, raw, lp)


@dataclass
class GroupColumns:
    """The settings of every codebook of a frame: temperature / top_k / top_p [B, N] (codebook 0: the backbone's
    column, codebooks 1..N-1: the depth head's), seed [B] (`frame_sampler.GroupSettings`)."""

    temperature: Tensor
    top_k: Tensor
    top_p: Tensor
    seed: Tensor

    @classmethod
    def of(cls, s: CsmSamplingTensors, num_codebooks: int) -> "GroupColumns":
        cols = torch.tensor([BACKBONE] + [DEPTH] * (num_codebooks - 1), device=s.seed.device)  # [N] codebook -> column
        return cls(s.temperature[:, cols], s.top_k[:, cols], s.top_p[:, cols], s.seed)


class FrameDraws:
    """The N draws of frame `frame` [B] for B rows: `draw(k, logits)` -> codes [B], logprobs [B] of codebook k
    from its raw logits [B, V] (any float dtype), as `draw` above makes them.

    Where the Triton kernels run each draw is one fused launch; on a CPU batch whose rows need no full sort,
    the host `FrameSampler` (codebooks `groups`: the ones these draws make, default all); elsewhere `draw`."""

    def __init__(self, s: CsmSamplingTensors, frame: Tensor, num_codebooks: int, vocab: int, *,
                 groups: list[int] | None = None) -> None:
        self.s, self.frame, self.num_codebooks = s, frame, num_codebooks
        self.fused = kernels_on(frame.device)
        self.host: FrameSampler | None = None
        if not self.fused and frame.device.type == "cpu" and not s.full_sort:
            self.host = FrameSampler(GroupColumns.of(s, num_codebooks), frame, [vocab] * num_codebooks, groups=groups,
                                     exact_logprobs=True, raw_greedy_logprobs=[True] * num_codebooks)

    def draw(self, codebook: int, logits: Tensor) -> tuple[Tensor, Tensor]:
        s, head = self.s, BACKBONE if codebook == 0 else DEPTH
        if self.fused:
            return sample_fused(logits, s.temperature[:, head], s.top_k[:, head], s.top_p[:, head], s.seed, self.frame,
                                codebook, groups=self.num_codebooks, raw_greedy_logprobs=True)
        if self.host is None:
            return draw(logits, s, head, self.frame, codebook, self.num_codebooks)
        return self.host.draw(codebook, logits)
