"""One frame's 13 seeded draws on the host, at each channel's top candidates: the same draws as `sampling.sample`.

Owns: `FrameSampler`, the CPU form of a frame's draws for rows that `sampling.fast_rows` marks (top_k in
1..SORT_WIDTH, or greedy; the stop channel's 2 logits always): the settings' per-channel columns and the
seed-and-counter part of the hash made once per frame, then per channel a top-(W+1) selection, the
stable order of the top W, the top-k edge, the top-p prefix (its mass from the same full softmax as
`process_logits`, so the kept set is the same bit for bit), the Gumbel noise only at the W candidates
(from the frame's noise when the batch is small, hashed at the candidates when it is large: the same
values) and the first-index Gumbel-max. The drawn ids equal `sample`'s exactly; logprobs are the same
log-softmax over the same kept set, summed in another order (float rounding, ~1e-7).
A row whose ties at its k-th value (a greedy row: at its maximum) run past the W candidates makes the
channel fall back to `sample` for the whole batch (the host sees it: one read per channel), so every row's
draw stays its own whatever the batch.
Must not know: the model, requests, the runtime; where a kernel would serve (the caller picks this on CPU).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from v2.models.sampling import SamplingTensors, gumbel_noise, sample
from v2.sampling_settings import CHANNELS, MIN_TEMPERATURE, SORT_WIDTH

FRAME_NOISE_MAX = 4 * CHANNELS * 1024  # rows x channels x vocab up to which the frame's noise is made whole


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
    """Draws for channels 0..12 of one frame: `draw(ch, logits) -> (ids [B], logprobs [B])`.

    sampling: the batch's settings [B, 13]; steps [B] int64: each row's frame index (counter = step * 13 +
    channel); vocab: the codebook size (the stop channel has 2 logits)."""

    def __init__(self, sampling: SamplingTensors, steps: Tensor, vocab: int) -> None:
        s = sampling
        self.sampling, self.steps, self.vocab = s, steps, vocab
        self.greedy = s.temperature < MIN_TEMPERATURE                                     # [B, 13]
        self.divisor = torch.where(self.greedy, torch.ones_like(s.temperature), s.temperature)
        widths = torch.tensor([2] + [vocab] * (CHANNELS - 1), device=steps.device)       # [13]
        self.no_k = ~((s.top_k > 0) & (s.top_k < widths))                                # [B, 13]
        self.kth_index = torch.minimum(s.top_k.clamp(min=1), widths.clamp(max=SORT_WIDTH)) - 1  # [B, 13]
        self.p_off = s.top_p >= 1                                                         # [B, 13]
        self.counters = steps[:, None] * CHANNELS + torch.arange(CHANNELS, device=steps.device)  # [B, 13]
        seed = s.seed.numpy()
        h = _fold(_fold(np.zeros(seed.shape, np.uint32), _word(seed.astype(np.uint32))),
                  _word((seed >> 32).astype(np.uint32)))                                  # [B]
        self.state = _fold(h[:, None], _word(self.counters.numpy().astype(np.uint32)))   # [B, 13] uint32
        # which channels have any greedy row, any row without top-k, any row with top-p (one host read)
        self.any_greedy, self.any_no_k, self.any_p = torch.stack(
            [self.greedy.any(0), self.no_k.any(0), (~self.p_off).any(0)]).tolist()
        self.noise = None
        if steps.shape[0] * CHANNELS * vocab <= FRAME_NOISE_MAX:  # small batch: the whole frame's noise at once
            self.noise = _gumbel(_finish(_fold(self.state[..., None], _token_words(vocab)), 4))  # [B, 13, V]

    def _noise_at(self, ch: int, ids: Tensor) -> Tensor:
        """Gumbel noise of channel ch at token ids [B, W]."""
        if self.noise is not None:
            return self.noise[:, ch].gather(1, ids)
        k = _token_words(self.vocab)[ids.numpy()]  # [B, W]
        return _gumbel(_finish(_fold(self.state[:, ch, None], k), 4))

    def draw(self, ch: int, logits: Tensor) -> tuple[Tensor, Tensor]:
        """logits [B, V] (after any penalty) -> token ids [B] and their logprobs [B]."""
        logits = logits.float()
        v = logits.shape[-1]
        width = min(SORT_WIDTH, v)
        z = logits / self.divisor[:, ch, None]                                             # [B, V]
        top = torch.topk(z, width + 1 if width < v else width, dim=-1)
        ids, perm = top.indices[:, :width].sort(dim=-1)                                    # ids ascending
        sorted_z, by_value = top.values[:, :width].gather(1, perm).sort(dim=-1, descending=True, stable=True)
        order = ids.gather(1, by_value)                                                    # [B, W] stable order
        kth = sorted_z.gather(1, self.kth_index[:, ch, None])                             # [B, 1]
        if self.any_no_k[ch]:
            kth = kth.masked_fill(self.no_k[:, ch, None], -math.inf)
        greedy = self.greedy[:, ch, None]                                                  # [B, 1]
        edge = torch.where(greedy, sorted_z[:, :1], kth) if self.any_greedy[ch] else kth  # lowest drawable value
        if width < v and bool((top.values[:, width:] >= edge).any()):
            return self._fallback(ch, logits)  # ties at that value past the candidates
        kept = sorted_z >= kth                                                             # top-k, [B, W]
        if self.any_p[ch]:
            probs = torch.softmax(z.masked_fill(z < kth, -math.inf), dim=-1)  # as process_logits: the same bits
            sorted_p = probs.gather(1, order)
            before = torch.cumsum(sorted_p, dim=-1) - sorted_p
            keep = (before < self.sampling.top_p[:, ch, None]) | self.p_off[:, ch, None]
            keep[:, 0] = True
            kept = kept & keep
        zc = torch.where(kept, sorted_z, -math.inf)                                        # [B, W] processed
        if self.any_greedy[ch]:
            zc = torch.where(greedy, _point(width, z.device), zc)  # greedy: the first argmax alone
        score = zc + self._noise_at(ch, order)
        first = torch.where(score == score.amax(dim=-1, keepdim=True), order, v).argmin(dim=-1, keepdim=True)
        return order.gather(1, first)[:, 0], torch.log_softmax(zc, dim=-1).gather(1, first)[:, 0]

    def _fallback(self, ch: int, logits: Tensor) -> tuple[Tensor, Tensor]:
        s = self.sampling
        noise = gumbel_noise(s.seed, self.counters[:, ch], logits.shape[-1])
        return sample(logits, s.temperature[:, ch], s.top_k[:, ch], s.top_p[:, ch], noise, full=False)


@functools.lru_cache(maxsize=8)
def _point(width: int, device: torch.device) -> Tensor:
    """[1, width]: 0 at the first candidate, -inf elsewhere (a greedy row's processed logits)."""
    return torch.full((1, width), -math.inf, device=device).index_fill_(1, torch.tensor([0], device=device), 0.0)
