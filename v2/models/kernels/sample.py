"""Fused sampling kernel: one Triton program per row does a code group's whole draw.

Owns: `sample_fused`, the GPU form of `sampling.sample` with the repetition penalty, the family's masks and
the Gumbel noise folded in: penalty -> ids never drawn (`banned`) and a stop id only where allowed (`stop`)
set to -inf -> temperature (or greedy) -> one stable descending sort of the row -> top-k (ties at the k-th
value kept) -> top-p over the top-k distribution (the most likely token always kept) -> Gumbel-max with
noise hash(seed, counter, token), counter = steps * groups + group -> the token and its logprob under the
processed distribution (a greedy row's: 0, or with `raw_greedy_logprobs` its log-softmax under the logits after
the penalty and masks, temperature 1). The eager path spends about two hundred small kernels on this per draw; a frame
has one draw per code group (13 or 16 in the shipped families), so on a GPU this is most of a frame
step's launches.

The sort is one `tl.sort` of 48-bit keys (order-preserving float bits << 16 | (65535 - token)), which
is a stable descending sort by value with ties in token order, as `torch.sort(stable=True)` gives. The
draw happens in sorted order: the noise of a token is computed from its id, and ties of the noisy score
go to the lowest id, as `argmax` does. Divisions are exact (`div_rn`) and the logarithms are libdevice's,
so results equal `sampling.sample` up to the rounding of the top-p mass sums and of the exponentials.
Must not know: the model, which family's groups these are, requests, the runtime. Vocabularies up to
4096 tokens: one program holds a row, and the compiler's time grows fast with the block.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.sampling_settings import MIN_TEMPERATURE
from v2.models.kernels import tl, triton

MAX_VOCAB = 4096


def _unit_stride(x: Tensor) -> Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def sample_fused(logits: Tensor, temperature: Tensor, top_k: Tensor, top_p: Tensor, seed: Tensor, steps: Tensor,
                 group: int, presence: Tensor | None = None, penalty: Tensor | None = None, *, groups: int,
                 banned: Tensor | None = None, stop: tuple[int, Tensor] | None = None,
                 raw_greedy_logprobs: bool = False) -> tuple[Tensor, Tensor]:
    """Draw one token per row: logits [B, V] (any float dtype; -inf = never), temperature/top_p [B] float32,
    top_k [B] int64, seed/steps [B] int64, the group and the frame's group count (the noise key: counter =
    steps * groups + group), presence [B, V] bool and penalty [B] float32 (optional, the repetition penalty),
    banned [V] bool (optional: ids never drawn), stop = (id, allowed [B] bool) (optional: the id is drawn only
    where allowed), raw_greedy_logprobs (a greedy row's logprob is the log-softmax of its logits after the
    penalty and masks, instead of the point mass's 0). Every [B] or [B, V] argument may be a strided view
    (columns of the per-slot settings): nothing is copied. Returns ids [B] int64 and logprobs [B] float32."""
    b, v = logits.shape
    if v > MAX_VOCAB:
        raise ValueError(f"sample_fused handles vocabularies up to {MAX_VOCAB} tokens, got {v}")
    if not 0 <= group < groups:
        raise ValueError(f"sample_fused: group {group} outside the frame's {groups} groups")
    if banned is not None and banned.shape != (v,):
        raise ValueError(f"sample_fused: banned must be [{v}], got {tuple(banned.shape)}")
    if stop is not None and not 0 <= stop[0] < v:
        raise ValueError(f"sample_fused: stop id {stop[0]} outside the vocabulary of {v}")
    logits = _unit_stride(logits)
    ids = torch.empty(b, dtype=torch.int64, device=logits.device)
    logprobs = torch.empty(b, dtype=torch.float32, device=logits.device)
    seen, pen = logits, temperature  # unused pointers without a penalty
    has_presence = presence is not None and penalty is not None
    if presence is not None and penalty is not None:
        seen = _unit_stride(presence).view(torch.uint8)
        pen = penalty
    never = logits if banned is None else _unit_stride(banned).view(torch.uint8)
    stop_id, allowed = (0, logits) if stop is None else (stop[0], stop[1].view(torch.uint8))
    block = max(16, triton.next_power_of_2(v))
    _sample_kernel[(b,)](logits, seen, pen, never, allowed, temperature, top_k, top_p, seed, steps, ids, logprobs,
                         logits.stride(0), seen.stride(0), pen.stride(0), allowed.stride(0), temperature.stride(0),
                         top_k.stride(0), top_p.stride(0), seed.stride(0), steps.stride(0), v, groups, group,
                         stop_id, MIN_TEMPERATURE, HAS_PRESENCE=has_presence, HAS_BANNED=banned is not None,
                         HAS_STOP=stop is not None, RAW_GREEDY=raw_greedy_logprobs, BLOCK_V=block,
                         num_warps=4 if block <= 2048 else 8)
    return ids, logprobs


if triton is not None:

    @triton.jit
    def _rotl(x, r: tl.constexpr):
        return (x << r) | (x >> (32 - r))

    @triton.jit
    def _mix(h, word):
        """One MurmurHash3 body round on uint32 (products wrap mod 2^32)."""
        k = _rotl(word * 0xCC9E2D51, 15) * 0x1B873593
        return _rotl(h ^ k, 13) * 5 + 0xE6546B64

    @triton.jit
    def _finish(h, n_words: tl.constexpr):
        h = h ^ (4 * n_words)
        h = (h ^ (h >> 16)) * 0x85EBCA6B
        h = (h ^ (h >> 13)) * 0xC2B2AE35
        return h ^ (h >> 16)

    @triton.jit
    def _sample_kernel(logits_ptr, seen_ptr, penalty_ptr, banned_ptr, allowed_ptr, temp_ptr, top_k_ptr, top_p_ptr,
                       seed_ptr, steps_ptr, ids_ptr, logprobs_ptr, s_logits, s_seen, s_pen, s_allowed, s_temp, s_k,
                       s_p, s_seed, s_steps, vocab, groups, group, stop_id, min_temperature,
                       HAS_PRESENCE: tl.constexpr, HAS_BANNED: tl.constexpr, HAS_STOP: tl.constexpr,
                       RAW_GREEDY: tl.constexpr, BLOCK_V: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        tok = tl.arange(0, BLOCK_V)
        real = tok < vocab
        x = tl.load(logits_ptr + row * s_logits + tok, mask=real, other=float("-inf")).to(tl.float32)
        if HAS_PRESENCE:
            seen = tl.load(seen_ptr + row * s_seen + tok, mask=real, other=0) != 0
            p = tl.load(penalty_ptr + row * s_pen).to(tl.float32)
            x = tl.where(seen, tl.where(x < 0, x * p, tl.div_rn(x, p)), x)  # exact division, as torch's
        if HAS_BANNED:
            x = tl.where(tl.load(banned_ptr + tok, mask=real, other=0) != 0, float("-inf"), x)
        if HAS_STOP:
            blocked = tl.load(allowed_ptr + row * s_allowed) == 0
            x = tl.where((tok == stop_id) & blocked, float("-inf"), x)
        temp = tl.load(temp_ptr + row * s_temp).to(tl.float32)
        greedy = temp < min_temperature
        z = tl.div_rn(x, tl.where(greedy, 1.0, temp))
        z = tl.where(z == 0, 0.0, z)  # -0.0 and 0.0 tie, as in torch.sort

        # stable descending sort: key = order-preserving bits of z (32) | 65535 - token (16)
        bits = z.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
        ordered = tl.where(bits < 0x80000000, bits | 0x80000000, (~bits) & 0xFFFFFFFF)
        keys = tl.sort((ordered << 16) | (65535 - tok.to(tl.int64)), descending=True)
        ids_s = 65535 - (keys & 0xFFFF)  # token at each sorted position
        ordered_s = keys >> 16
        bits_s = tl.where(ordered_s >= 0x80000000, ordered_s ^ 0x80000000, (~ordered_s) & 0xFFFFFFFF)
        z_s = bits_s.to(tl.int32).to(tl.float32, bitcast=True)  # z in sorted order
        pos = tl.arange(0, BLOCK_V)
        top = tl.max(z_s, 0)  # = z_s[0]

        k = tl.load(top_k_ptr + row * s_k)
        use_k = (k > 0) & (k < vocab)
        kth = tl.max(tl.where(pos == k - 1, z_s, float("-inf")), 0)
        in_k = (z_s >= kth) | (use_k == 0)
        e = tl.where(in_k, tl.exp(z_s - top), 0.0)
        probs = e / tl.sum(e, 0)  # the top-k distribution, sorted
        before = tl.cumsum(probs, 0) - probs  # mass of the tokens ahead in stable order
        top_p = tl.load(top_p_ptr + row * s_p).to(tl.float32)
        keep = in_k & ((before < top_p) | (pos == 0))
        keep = tl.where(top_p >= 1.0, in_k, keep)
        keep = tl.where(greedy, pos == 0, keep)  # greedy: a point mass on the first argmax

        # Gumbel noise of each sorted token: MurmurHash3(seed lo, seed hi, counter, token)
        seed = tl.load(seed_ptr + row * s_seed)
        counter = tl.load(steps_ptr + row * s_steps) * groups + group  # as sampling.gumbel_noise is keyed
        h = tl.zeros([1], tl.uint32)
        h = _mix(h, (seed & 0xFFFFFFFF).to(tl.uint32))
        h = _mix(h, ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32))
        h = _mix(h, (counter & 0xFFFFFFFF).to(tl.uint32))
        hashed = _finish(_mix(h, ids_s.to(tl.uint32)), 4)
        u = ((hashed >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)  # in [2^-24, 1 - 2^-24]
        score = tl.where(keep, z_s - tl.log(-tl.log(u)), float("-inf"))
        best = tl.max(score, 0)
        pick = tl.min(tl.where(score == best, ids_s, 1 << 30), 0)  # ties go to the lowest token id
        z_pick = tl.max(tl.where(ids_s == pick, z_s, float("-inf")), 0)
        lse = top + tl.log(tl.sum(tl.where(keep, tl.exp(z_s - top), 0.0), 0))
        greedy_lp = 0.0
        if RAW_GREEDY:  # a greedy row's z is its logits (divided by 1): their log-softmax over every id
            greedy_lp = z_pick - (top + tl.log(tl.sum(tl.exp(z_s - top), 0)))
        tl.store(ids_ptr + row, pick)
        tl.store(logprobs_ptr + row, tl.where(greedy, greedy_lp, z_pick - lse))
