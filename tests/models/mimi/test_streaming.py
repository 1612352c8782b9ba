"""Streaming decode: any chunking, in any batch mix of streams in any slots, equals the whole-utterance decode
bit for bit (float32, CPU); a reset slot starts clean; a batch equals each stream alone; the encoder gives an
item the same bits alone and in any batch. On the fixture's codec and on a seeded codec of other dimensions
whose 5-step window chunks cross."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from .conftest import random_codes

pytestmark = pytest.mark.exact


def splits_of(total: int, cuts: list[int]) -> list[int]:
    points = sorted({c for c in cuts if 0 < c < total})
    return [b - a for a, b in zip([0, *points], [*points, total])]


def stream(model, codes: torch.Tensor, splits: list[int], slot: int = 0, slots: int = 3) -> torch.Tensor:
    state = model.allocate_state(slots)
    out, start = [], 0
    for n in splits:
        out.append(model.decode_chunk(torch.tensor([slot]), codes[:, start : start + n], state=state))
        start += n
    assert int(state.frames[slot]) == codes.shape[1]
    return torch.cat(out, dim=1)


def test_fixture_codec_fixed_chunkings(mimi):
    codes = random_codes(mimi, 20, 1)
    whole = mimi.decode(codes)
    for splits in ([1] * 20, [1, 4, 15], [5, 5, 5, 5], [19, 1]):
        assert torch.equal(stream(mimi, codes, splits, slot=2), whole), splits


@settings(max_examples=6, deadline=None)
@given(st.lists(st.integers(1, 15), max_size=5), st.integers(0, 2**16))
def test_fixture_codec_random_chunkings(mimi, cuts, seed):
    codes = random_codes(mimi, 16, seed)
    assert torch.equal(stream(mimi, codes, splits_of(16, cuts)), mimi.decode(codes))


def test_other_codec_one_frame_chunks_past_the_window(other):
    codes = random_codes(other, 40, 2)  # 80 transformer steps through a 5-step window
    assert torch.equal(stream(other, codes, [1] * 40), other.decode(codes))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 39), max_size=8), st.integers(0, 2**16))
def test_other_codec_random_chunkings(other, cuts, seed):
    codes = random_codes(other, 40, seed)
    assert torch.equal(stream(other, codes, splits_of(40, cuts)), other.decode(codes))


@st.composite
def schedules(draw):
    """Three streams of 6..16 frames; each call advances a random subset by random chunk lengths, in random row
    order, padded to a common length (padding frames hold other codes) with padding rows in the dummy slot."""
    lengths = draw(st.lists(st.integers(6, 16), min_size=3, max_size=3))
    slots = draw(st.permutations([0, 2, 4]))
    done, steps = [0, 0, 0], []
    while done != lengths:
        live = [i for i in range(3) if done[i] < lengths[i]]
        chosen = draw(st.lists(st.sampled_from(live), min_size=1, unique=True))
        step = []
        for i in chosen:
            n = draw(st.integers(1, min(7, lengths[i] - done[i])))
            step.append((i, done[i], n))
            done[i] += n
        steps.append((draw(st.permutations(step)), draw(st.integers(0, 2)), draw(st.integers(0, 3))))
    return lengths, slots, steps, draw(st.integers(0, 2**16))


def run_schedule(model, schedule) -> None:
    lengths, slots, steps, seed = schedule
    codes = [random_codes(model, n, seed + i)[0] for i, n in enumerate(lengths)]
    state = model.allocate_state(5)
    out: list[list[torch.Tensor]] = [[], [], []]
    garbage = random_codes(model, 16, seed + 99)[0]
    for rows, padding_rows, extra in steps:
        n = max(r[2] for r in rows) + extra  # frames per row in this call
        batch = garbage[:1].expand(len(rows) + padding_rows, n, -1).clone()
        row_slots, row_lengths = [], []
        for j, (i, start, m) in enumerate(rows):
            batch[j, :m] = codes[i][start : start + m]
            row_slots.append(slots[i])
            row_lengths.append(m)
        row_slots += [state.dummy_slot] * padding_rows
        row_lengths += [n] * padding_rows
        wav = model.decode_chunk(torch.tensor(row_slots), batch, state=state, lengths=torch.tensor(row_lengths))
        for j, (i, _, m) in enumerate(rows):
            out[i].append(wav[j, : m * model.hop])
    for i in range(3):
        assert int(state.frames[slots[i]]) == lengths[i]
        assert torch.equal(torch.cat(out[i]), model.decode(codes[i][None])[0])


@settings(max_examples=15, deadline=None)
@given(schedules())
def test_batch_mixes_equal_each_stream_alone(other, schedule):
    run_schedule(other, schedule)


@settings(max_examples=3, deadline=None)
@given(schedules())
def test_batch_mixes_equal_each_stream_alone_fixture_codec(mimi, schedule):
    run_schedule(mimi, schedule)


def test_a_reset_slot_starts_clean_and_leaves_the_others(other):
    first, second, rest = random_codes(other, 20, 20), random_codes(other, 20, 21), random_codes(other, 33, 22)
    state = other.allocate_state(2)
    both = torch.tensor([0, 1])
    out_rest = [other.decode_chunk(both, torch.cat([first[:, :13], rest[:, :13]]), state=state)[1:]]
    state.reset([0])
    assert int(state.frames[0]) == 0 and int(state.frames[1]) == 13
    assert all(float(t[0].abs().sum()) == 0 for t in (*state.convs, *state.k, *state.v))
    out = []
    for s in range(0, 20, 4):
        wav = other.decode_chunk(both, torch.cat([second[:, s : s + 4], rest[:, 13 + s : 17 + s]]), state=state)
        out.append(wav[0:1]), out_rest.append(wav[1:2])
    assert torch.equal(torch.cat(out, 1), other.decode(second))
    assert torch.equal(torch.cat(out_rest, 1), other.decode(rest))


def test_batched_whole_decode_equals_each_alone(mimi, other):
    for model, frames in ((mimi, (12, 5, 9)), (other, (30, 7, 19))):
        codes = random_codes(model, max(frames), 30, batch=3)
        batch = model.decode(codes, torch.tensor(frames))
        for i, n in enumerate(frames):
            assert torch.equal(batch[i, : n * model.hop], model.decode(codes[i : i + 1, :n])[0])
            assert float(batch[i, n * model.hop :].abs().sum()) == 0


def test_encoder_batch_equals_alone(mimi, other):
    """Lengths on and off the hop, one sample, the longest first or not: each item's latent bits and codes are
    those of encoding it alone (each item is padded as if alone, not as the batch's zero tail)."""
    rng = np.random.RandomState(0)
    for model in (mimi, other):
        hop = model.hop
        lengths = [5 * hop + 7, 1, 2 * hop, 9 * hop - 1, hop + 1]
        wavs = [(rng.randn(n) * 0.3).astype(np.float32) for n in lengths]
        alone = [model.encode([w])[0] for w in wavs]
        assert [a.shape[0] for a in alone] == [-(-n // hop) for n in lengths]
        for order in ([0, 1, 2, 3, 4], [3, 0, 4, 1, 2]):
            together = model.encode([wavs[i] for i in order])
            for k, i in enumerate(order):
                assert torch.equal(together[k], alone[i]), (model.cfg.hop, i)
        batch = torch.zeros(len(wavs), max(lengths))
        for i, w in enumerate(wavs):
            batch[i, : len(w)] = torch.from_numpy(w)
        latent = model.latent(batch, lengths=torch.tensor(lengths))
        for i, w in enumerate(wavs):
            own = model.latent(torch.from_numpy(w)[None])[0]
            assert torch.equal(latent[i, :, : own.shape[-1]], own)
