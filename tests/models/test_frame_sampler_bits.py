"""The host frame sampler's draws are bit for bit those of the plain torch pipeline: ids AND logprobs.

The reference is `sampling.processed` (torch's float32 softmax over the whole row for the top-p mass, the mass
summed by torch's cumsum), the Gumbel-max over the whole row with the frame's noise, and the log-softmax of the
processed logits at the top SORT_WIDTH ids in stable order (by value, ties by id). The sampler decides the top-p
cut from float64 masses where they lie farther than `TOP_P_MARGIN` from top_p and from torch's bits otherwise:
rows built to land inside and just outside that margin, ties, top_p off, greedy rows, one row and 16.
"""

from __future__ import annotations

import math

import pytest
import torch

from v2.models import frame_sampler
from v2.models.frame_sampler import TOP_P_MARGIN, FrameSampler
from v2.models.sampling import SamplingTensors, frame_noise, processed, sample
from v2.sampling_settings import MIN_TEMPERATURE, SORT_WIDTH, HeadSampling, SamplingSettings

pytestmark = pytest.mark.exact

V = 1024
VOCABS = [2] + [V] * 12  # MOSS-TTS-Local's frame: the stop decision, then 12 codebooks
GROUP = 5
MOSS = SamplingSettings(HeadSampling(1.0, 50, 1.0), HeadSampling(1.7, 25, 0.8))


def reference(s: SamplingTensors, steps: torch.Tensor, grp: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch pipeline's draw of group grp: ids [B] and the logprob over the stable top min(V, W) [B]; where a
    row's ties at its drawable edge run past the W candidates, `sample`'s (the sampler's fallback)."""
    t, k, p = s.temperature[:, grp], s.top_k[:, grp], s.top_p[:, grp]
    v = x.shape[-1]
    noise = frame_noise(s.seed, steps, V)[:, grp, :v]
    greedy = t < MIN_TEMPERATURE
    z = x / torch.where(greedy, torch.ones_like(t), t)[:, None]
    sorted_z, order = torch.sort(z, dim=-1, descending=True, stable=True)
    width = min(v, SORT_WIDTH)
    if v > SORT_WIDTH:
        kth = sorted_z.gather(1, (k.clamp(1, width) - 1)[:, None])
        edge = torch.where(greedy[:, None], sorted_z[:, :1], kth)
        if bool(((z >= edge).sum(-1) > width).any()):
            return sample(x, t, k, p, noise, full=False)
    proc = processed(x, t, k, p, full=v <= SORT_WIDTH)
    ids = (proc + noise).argmax(dim=-1)
    order = order[:, :width]
    at = (order == ids[:, None]).int().argmax(dim=-1, keepdim=True)                      # [B, 1]
    assert torch.equal(order.gather(1, at)[:, 0], ids)
    return ids, torch.log_softmax(proc.gather(1, order), dim=-1).gather(1, at)[:, 0]


def boundary_row(gen: torch.Generator, delta: float, top_k: int = 25, top_p: float = 0.8,
                 temperature: float = 1.7) -> torch.Tensor:
    """Logits [V] whose top-k distribution (after temperature) has a mass ahead of some place of top_p + delta
    (up to float32 rounding of the logits, ~1e-7), the rest far below, at random ids."""
    q = torch.rand(top_k, generator=gen, dtype=torch.float64).sort(descending=True).values + 0.02
    ahead = (q.cumsum(0) - q) / q.sum()
    place = int((ahead <= top_p + delta).sum()) - 1  # the last place whose mass ahead is at most the target
    place = max(place, 1)
    a, b = q[:place].sum(), q[place:].sum()
    target = top_p + delta
    q[:place] *= target * b / ((1 - target) * a)  # now the mass ahead of `place` is the target
    z = torch.cat([q.log(), q.log().min() - 4 - 10 * torch.rand(V - top_k, generator=gen, dtype=torch.float64)])
    return (z * temperature).float()[torch.randperm(V, generator=gen)]


def mass_distance(x: torch.Tensor, settings: SamplingSettings) -> float:
    """How far (in float64) the row's top-k masses ahead lie from top_p at the closest place."""
    a = settings.audio
    z = (x.numpy() / torch.tensor(a.temperature).numpy()).astype("float64")
    top = torch.from_numpy(z).sort(descending=True).values[: a.top_k]
    w = (top - top[0]).exp()
    ahead = (w.cumsum(0) - w) / w.sum()
    return float((ahead[1:] - a.top_p).abs().min())


DELTAS = [0.0, 1e-9, -1e-9, 1e-7, -1e-7, 1e-6, -1e-6, 5e-6, -5e-6, 3e-5, -3e-5, 9e-5, -9e-5, 1.05e-4, -1.05e-4,
          1.2e-4, -1.2e-4, 2e-4, -2e-4, 1e-3, -1e-3]


def assert_same(s: SamplingTensors, steps: torch.Tensor, grp: int, x: torch.Tensor) -> None:
    ids, lp = FrameSampler(s, steps, VOCABS).draw(grp, x)
    want_ids, want_lp = reference(s, steps, grp, x)
    assert torch.equal(ids, want_ids), (ids, want_ids)
    assert torch.equal(lp, want_lp), (lp, want_lp)


@pytest.mark.parametrize("b", [1, 16])
def test_rows_at_the_top_p_margin_draw_the_torch_bits(b, monkeypatch):
    """Rows whose mass ahead lands inside the margin (torch's bits decide) and just outside it (float64 decides)."""
    softmaxes = []
    over_whole = FrameSampler._over_whole

    def counted(self: FrameSampler, fn, *args):  # noqa: ANN001, ANN202
        softmaxes.append(fn is torch.softmax)
        return over_whole(self, fn, *args)

    monkeypatch.setattr(FrameSampler, "_over_whole", counted)
    gen = torch.Generator().manual_seed(b)
    rows = [boundary_row(gen, d) for d in DELTAS for _ in range(6)]
    distances = [mass_distance(r, MOSS) for r in rows]
    assert any(d < 1e-6 for d in distances) and any(TOP_P_MARGIN < d < 3 * TOP_P_MARGIN for d in distances)
    x = torch.stack(rows)                                                                 # [R, V]
    for start in range(0, len(rows), b):
        chunk = x[start:start + b]
        s = SamplingTensors.build([MOSS] * chunk.shape[0], list(range(start, start + chunk.shape[0])))
        assert_same(s, torch.arange(chunk.shape[0]) + start, GROUP, chunk)
    if b == 1:  # torch's bits exactly for the rows inside the margin
        assert sum(softmaxes) == sum(d <= TOP_P_MARGIN for d in distances) > 0
    else:
        assert any(softmaxes)


def mixed_settings(gen: torch.Generator, b: int) -> list[SamplingSettings]:
    temps, ps = [0.0, 1e-5, 0.3, 1.0, 1.7], [0.05, 0.5, 0.8, 0.95, 1.0]
    pick = lambda xs: xs[int(torch.randint(len(xs), (1,), generator=gen))]  # noqa: E731
    return [SamplingSettings(HeadSampling(pick([0.0, 1.0, 2.0]), pick([0, 1, 2, 50]), pick([0.3, 1.0])),
                             HeadSampling(pick(temps), int(torch.randint(1, SORT_WIDTH + 1, (1,), generator=gen)),
                                          pick(ps)))
            for _ in range(b)]


@pytest.mark.parametrize("b", [1, 16])
@pytest.mark.parametrize("kind", ["normal", "coarse", "near-ties", "flat", "top-tie", "scaled"])
def test_mixed_settings_and_ties_draw_the_torch_bits(b, kind):
    """Every group of many frames: greedy rows, top_p off and on, ties within and past the candidates."""
    gen = torch.Generator().manual_seed(1000 * b + len(kind))
    for frame in range(12 if b == 1 else 3):
        s = SamplingTensors.build(mixed_settings(gen, b), [frame * 100 + i for i in range(b)])
        steps = torch.randint(0, 500, (b,), generator=gen)
        for grp, v in enumerate(VOCABS):
            x = torch.randn(b, v, generator=gen) * 3
            if kind == "coarse":  # many ties everywhere
                x = (x * 2).round() / 2
            elif kind == "near-ties":  # a few values one ulp apart and equal among the top ones
                x[:, 1::7] = x[:, ::7][:, : x[:, 1::7].shape[1]]
                x[:, 2::11] = torch.nextafter(x[:, 2::11], torch.tensor(math.inf))
            elif kind == "flat":  # every value tied: the fallback
                x = torch.zeros_like(x)
            elif kind == "top-tie":  # a tie of 100 at the top of the first row
                x[0, :100] = x.max() + 1
            elif kind == "scaled":  # wide logits: underflowing probabilities
                x = x * 40
            assert_same(s, steps, grp, x)


def test_one_row_draws_as_it_does_in_a_batch():
    """Batch 1 takes its own path: each row alone draws what it draws among 16."""
    gen = torch.Generator().manual_seed(7)
    rows = torch.stack([boundary_row(gen, d) for d in DELTAS[:16]])
    s = SamplingTensors.build(mixed_settings(gen, 16), list(range(16)))
    steps = torch.arange(16) * 5
    together = FrameSampler(s, steps, VOCABS).draw(GROUP, rows)
    for i in range(16):
        idx = torch.tensor([i])
        alone = FrameSampler(s.rows(idx), steps[idx], VOCABS).draw(GROUP, rows[idx])
        assert torch.equal(alone[0], together[0][idx]) and torch.equal(alone[1], together[1][idx])


def test_without_the_margin_the_float64_cut_can_differ_from_the_torch_bits(monkeypatch):
    """The margin is needed: deciding every row in float64 loses torch's bits on rows at the boundary."""
    monkeypatch.setattr(frame_sampler, "TOP_P_MARGIN", 0.0)
    gen = torch.Generator().manual_seed(3)
    differ = 0
    for i in range(300):
        x = boundary_row(gen, (i % 7 - 3) * 1e-8)[None]
        s = SamplingTensors.build([MOSS], [i])
        steps = torch.tensor([i])
        ids, lp = FrameSampler(s, steps, VOCABS).draw(GROUP, x)
        want_ids, want_lp = reference(s, steps, GROUP, x)
        differ += not (torch.equal(ids, want_ids) and torch.equal(lp, want_lp))
    assert differ > 0


def test_no_draw_hands_torch_a_read_only_array(monkeypatch):
    """The settings columns are cached read-only: what a draw gives torch.from_numpy is its own (a greedy row's
    raw logprob included), so torch never warns of, or writes into, a shared array."""
    from_numpy = torch.from_numpy

    def checked(a):  # noqa: ANN001, ANN202
        assert a.flags.writeable
        return from_numpy(a)

    monkeypatch.setattr(torch, "from_numpy", checked)
    gen = torch.Generator().manual_seed(11)
    for b in (1, 2, 16):
        s = SamplingTensors.build(mixed_settings(gen, b), list(range(b)))
        sampler = FrameSampler(s, torch.arange(b), VOCABS, raw_greedy_logprobs=[True] * len(VOCABS))
        for grp, v in enumerate(VOCABS):
            x = torch.randn(b, v, generator=gen)
            ids, lp = sampler.draw(grp, x)
            greedy = s.temperature[:, grp] < MIN_TEMPERATURE
            raw = torch.log_softmax(x, dim=-1).gather(1, ids[:, None])[:, 0]
            assert torch.equal(lp[greedy], raw[greedy])
