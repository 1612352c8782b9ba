"""The seeded Gumbel noise of `sampling.gumbel_noise` on the host, in numpy: the same bits, in a few array operations.

Owns: MurmurHash3 (x86, 32-bit) in numpy's wrapping uint32 arithmetic, split as `sampling` splits it (a word's half
of a body round, the state's half, the finaliser), the per-token words of the last round, and the Gumbel transform
of `sampling.gumbel_from_hash` (the uniform exact in float32, the logs torch's, so the same bits).
Must not know: what the noise is drawn for (`FrameSampler` keys it), torch beyond its log.
"""

from __future__ import annotations

import functools

import numpy as np
import torch


def word(w: np.ndarray) -> np.ndarray:
    """The word's half of a body round (it does not depend on the state): uint32 in, uint32 out."""
    k = w * 0xCC9E2D51
    return ((k << 15) | (k >> 17)) * 0x1B873593


def fold(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The state's half: fold a prepared word k (`word`) into the state h (uint32, broadcast)."""
    h = h ^ k
    return ((h << 13) | (h >> 19)) * 5 + 0xE6546B64


def finish(h: np.ndarray, n_words: int) -> np.ndarray:
    """The finaliser after n_words body rounds."""
    h = h ^ (4 * n_words)
    h = (h ^ (h >> 16)) * 0x85EBCA6B
    h = (h ^ (h >> 13)) * 0xC2B2AE35
    return h ^ (h >> 16)


def gumbel(h: np.ndarray) -> np.ndarray:
    """As `sampling.gumbel_from_hash`: the uniform is exact in float32, the logs are torch's (in place, so the
    same bits) and the negations numpy's (exact)."""
    u = ((h >> 9).astype(np.float32) + np.float32(0.5)) * np.float32(1.0 / (1 << 23))
    t = torch.from_numpy(u).log_()
    np.negative(u, out=u)
    t.log_()
    return np.negative(u, out=u)


@functools.lru_cache(maxsize=8)
def token_words(vocab: int) -> np.ndarray:
    """The token half of the hash's last round, per token id: [vocab] uint32 (read-only)."""
    words = word(np.arange(vocab, dtype=np.uint32))
    words.flags.writeable = False
    return words


def seed_state(seed: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """The hash state after the seed's two words and the counter: seed [B] int64, counters [B, C] int64 ->
    [B, C] uint32 (each token's noise is then `gumbel(finish(fold(state, token_words[id]), 4))`)."""
    return fold(_seed_hash(seed.tobytes(), seed.dtype.str)[:, None], word(counters.astype(np.uint32)))


@functools.lru_cache(maxsize=64)
def _seed_hash(seed_bytes: bytes, dtype: str) -> np.ndarray:
    """The state after the seed's two words, [B] uint32 (read-only; a batch keeps its seeds frame after frame)."""
    seed = np.frombuffer(seed_bytes, dtype=dtype)
    h = fold(fold(np.zeros(seed.shape, np.uint32), word(seed.astype(np.uint32))), word((seed >> 32).astype(np.uint32)))
    h.flags.writeable = False
    return h
