"""`top_edge.at_or_above` gives the entries the whole rows' partition gives (places, values bit for bit, counts), and the frame sampler drawing
through it at CSM's and Qwen3-TTS's widths (batch 16: the bound's path) draws `sample`'s ids and exact logprobs.

Rows: random, coarse (ties everywhere), ties at the w-th value, mostly -inf (masked ids), a NaN in a block or in
the tail past the blocks, one row and short rows (the whole partition)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from v2.models import top_edge
from v2.models.frame_sampler import FrameSampler
from v2.models.sampling import SamplingTensors, frame_noise, sample
from v2.sampling_settings import HeadSampling, SamplingSettings

pytestmark = pytest.mark.exact

W = 65
KINDS = ["normal", "coarse", "tie-at-edge", "masked", "all-masked-row", "nan-block", "nan-tail", "wide"]


def rows(kind: str, b: int, v: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z = (rng.standard_normal((b, v)) * 3).astype(np.float32)                             # [B, V]
    if kind == "coarse":
        z = np.round(z * 2) / 2
    elif kind == "tie-at-edge":  # 30 copies of a value near the w-th highest in every row
        z[:, 5:35] = np.sort(z, axis=-1)[:, v - W - 10 : v - W - 9]
    elif kind == "masked":  # most ids -inf, as a suppressed range
        z[:, v // 3 :] = -np.inf
    elif kind == "all-masked-row":
        z[b - 1, W + 3 :] = -np.inf
    elif kind == "nan-block":
        z[b - 1, 17] = np.nan
    elif kind == "nan-tail":
        z[0, v - 1] = np.nan
    elif kind == "wide":
        z = z * np.float32(40)
    return z


def whole(z: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The entries at or above each row's w-th highest value by numpy's partition of the whole rows."""
    b, v = z.shape
    above = z >= np.partition(z, v - w, axis=-1)[:, v - w : v - w + 1]
    flat = np.flatnonzero(above)
    return flat, z.reshape(-1)[flat], above.sum(axis=-1)


def assert_same(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...]) -> None:
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[2], want[2])
    assert np.array_equal(got[1].view(np.int32), want[1].view(np.int32))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("b, v", [(16, 2051), (16, 3072), (16, 2048), (3, 1600), (2, 2051), (1, 2051), (16, 1024), (16, 300)])
def test_entries_are_the_whole_partitions(kind, b, v):
    z = rows(kind, b, v, seed=b * v + len(kind))
    assert_same(top_edge.at_or_above(z, W), whole(z, W))


def test_wide_batches_take_the_bound(monkeypatch):
    """At CSM's width and batch 16 the whole rows are not partitioned (the path the tests above pin)."""
    def refused(z: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise AssertionError("whole-row partition")
    monkeypatch.setattr(top_edge, "_whole", refused)
    for kind in ("normal", "coarse", "tie-at-edge", "masked", "wide"):
        z = rows(kind, 16, 2051, seed=3)
        assert_same(top_edge.at_or_above(z, W), whole(z, W))


@pytest.mark.parametrize("v, settings", [
    (2051, SamplingSettings(HeadSampling(0.9, 50, 1.0), HeadSampling(0.9, 50, 1.0))),   # CSM's release defaults
    (3072, SamplingSettings(HeadSampling(0.9, 50, 1.0), HeadSampling(1.3, 30, 0.7))),
])
@pytest.mark.parametrize("kind", ["normal", "coarse", "tie-at-edge", "masked", "wide"])
def test_frame_draws_at_wide_vocabularies_are_samples_bits(v, settings, kind):
    b, vocabs = 16, [v] * 13
    s = SamplingTensors.build([settings] * b, [i * 31 + 7 for i in range(b)])
    steps = torch.arange(b) * 3 + 11
    sampler = FrameSampler(s, steps, vocabs, exact_logprobs=True)
    noise = frame_noise(s.seed, steps, v)                                                # [B, 13, V]
    for grp in (0, 1, 6):
        x = torch.from_numpy(rows(kind, b, v, seed=grp + v))
        ids, lp = sampler.draw(grp, x)
        want_ids, want_lp = sample(x, s.temperature[:, grp], s.top_k[:, grp], s.top_p[:, grp], noise[:, grp],
                                   full=False)
        assert torch.equal(ids, want_ids)
        assert torch.equal(lp.view(torch.int32), want_lp.view(torch.int32))
