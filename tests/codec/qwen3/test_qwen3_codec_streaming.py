"""Streaming decode: any chunking, in any batch mix of streams in any slots, equals the whole-utterance decode
bit for bit (float32, CPU); a reset slot starts clean; batched whole decode equals each utterance alone."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from qwen3_codec_helpers import qdecoder, seeded_decoder  # noqa: F401 (fixtures)

pytestmark = pytest.mark.exact


def random_codes(decoder, frames: int, seed: int, batch: int = 1) -> torch.Tensor:
    size = decoder.cfg.decoder.codebook_size
    return torch.randint(0, size, (batch, frames, decoder.cfg.groups), generator=torch.Generator().manual_seed(seed))


def splits_of(total: int, cuts: list[int]) -> list[int]:
    points = sorted({c for c in cuts if 0 < c < total})
    return [b - a for a, b in zip([0, *points], [*points, total])]


def stream(decoder, codes: torch.Tensor, splits: list[int], slot: int = 0, slots: int = 3) -> torch.Tensor:
    state = decoder.allocate_state(slots)
    out, start = [], 0
    for n in splits:
        out.append(decoder.decode_chunk(torch.tensor([slot]), codes[:, start : start + n], state=state))
        start += n
    assert int(state.frames[slot]) == codes.shape[1]
    return torch.cat(out, dim=1)


def test_fixture_decoder_fixed_chunkings(qdecoder):
    codes = random_codes(qdecoder, 24, 1)
    whole = qdecoder.decode(codes)
    for splits in ([1] * 24, [1, 4, 19], [5, 5, 5, 9], [23, 1]):
        assert torch.equal(stream(qdecoder, codes, splits, slot=2), whole)


@settings(max_examples=4, deadline=None)
@given(st.lists(st.integers(1, 19), max_size=5), st.integers(0, 2**16))
def test_fixture_decoder_random_chunkings(qdecoder, cuts, seed):
    codes = random_codes(qdecoder, 20, seed)
    assert torch.equal(stream(qdecoder, codes, splits_of(20, cuts)), qdecoder.decode(codes))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 59), max_size=8), st.integers(0, 2**16))
def test_seeded_decoder_random_chunkings(seeded_decoder, cuts, seed):
    codes = random_codes(seeded_decoder, 60, seed)
    assert torch.equal(stream(seeded_decoder, codes, splits_of(60, cuts)), seeded_decoder.decode(codes))


def test_past_300_frames_streaming_equals_whole_where_the_reference_chunking_does_not(seeded_decoder):
    """The seeded decoder's receptive field (40-frame window x 3 layers plus convs) exceeds the reference's 25
    frames of left context: its chunked decode departs from the whole decode after frame 300; streaming does not."""
    codes = random_codes(seeded_decoder, 340, 5)
    whole = seeded_decoder.decode(codes)
    assert torch.equal(stream(seeded_decoder, codes, [1, 37, 200, 61, 3, 38]), whole)
    hop = seeded_decoder.hop
    ref = seeded_decoder.reference_chunked_decode(codes)  # chunk 300, left context 25
    assert torch.equal(ref[:, : 300 * hop], whole[:, : 300 * hop])  # one chunk: the whole decode's own path
    assert float((ref[:, 300 * hop :] - whole[:, 300 * hop :]).abs().max()) > 1e-3


def test_fixture_decoder_past_300_frames(qdecoder):
    codes = random_codes(qdecoder, 310, 6)
    assert torch.equal(stream(qdecoder, codes, [150, 1, 159]), qdecoder.decode(codes))


@st.composite
def schedules(draw):
    """Three streams of 10..24 frames; each step advances a random subset by random chunk lengths, in random
    row order, padded to a common length with padding rows in the dummy slot."""
    lengths = draw(st.lists(st.integers(10, 24), min_size=3, max_size=3))
    slots = draw(st.permutations([0, 2, 4]))
    done, steps = [0, 0, 0], []
    while done != lengths:
        live = [i for i in range(3) if done[i] < lengths[i]]
        chosen = draw(st.lists(st.sampled_from(live), min_size=1, unique=True))
        step = []
        for i in chosen:
            n = draw(st.integers(1, min(9, lengths[i] - done[i])))
            step.append((i, done[i], n))
            done[i] += n
        steps.append((draw(st.permutations(step)), draw(st.integers(0, 2)), draw(st.integers(0, 3))))
    return lengths, slots, steps, draw(st.integers(0, 2**16))


@settings(max_examples=15, deadline=None)
@given(schedules())
def test_batch_mixes_equal_each_stream_alone(seeded_decoder, schedule):
    lengths, slots, steps, seed = schedule
    dec = seeded_decoder
    codes = [random_codes(dec, n, seed + i)[0] for i, n in enumerate(lengths)]
    state = dec.allocate_state(5)
    out: list[list[torch.Tensor]] = [[], [], []]
    garbage = random_codes(dec, 16, seed + 99)[0]
    for rows, padding_rows, extra in steps:
        n = max(r[2] for r in rows) + extra  # frames per row in this call
        batch = garbage[:1].expand(len(rows) + padding_rows, n, -1).clone()  # padding frames hold other codes
        row_slots, row_lengths = [], []
        for j, (i, start, m) in enumerate(rows):
            batch[j, :m] = codes[i][start : start + m]
            row_slots.append(slots[i])
            row_lengths.append(m)
        row_slots += [state.dummy_slot] * padding_rows
        row_lengths += [n] * padding_rows
        wav = dec.decode_chunk(torch.tensor(row_slots), batch, state=state, lengths=torch.tensor(row_lengths))
        for j, (i, _, m) in enumerate(rows):
            out[i].append(wav[j, : m * dec.hop])
    for i in range(3):
        assert int(state.frames[slots[i]]) == lengths[i]
        assert torch.equal(torch.cat(out[i]), dec.decode(codes[i][None])[0])


def test_a_reset_slot_starts_clean_and_leaves_the_others(seeded_decoder):
    dec = seeded_decoder
    first, second, other = random_codes(dec, 30, 20), random_codes(dec, 30, 21), random_codes(dec, 43, 22)
    state = dec.allocate_state(2)
    both = torch.tensor([0, 1])
    out_other = [dec.decode_chunk(both, torch.cat([first[:, :13], other[:, :13]]), state=state)[1:]]
    state.reset([0])
    assert int(state.frames[0]) == 0 and int(state.frames[1]) == 13
    assert all(float(t[0].abs().sum()) == 0 for t in (*state.convs, *state.k, *state.v))
    out = []
    for s in range(0, 30, 6):
        chunk = torch.cat([second[:, s : s + 6], other[:, 13 + s : 19 + s]])
        out_both = dec.decode_chunk(both, chunk, state=state)
        out.append(out_both[0:1]), out_other.append(out_both[1:2])
    assert torch.equal(torch.cat(out, 1), dec.decode(second))
    assert torch.equal(torch.cat(out_other, 1), dec.decode(other))


def test_batched_whole_decode_equals_each_alone(qdecoder, seeded_decoder):
    for dec, frames in ((qdecoder, (12, 5, 9)), (seeded_decoder, (50, 17, 33))):
        codes = random_codes(dec, max(frames), 30, batch=3)
        lengths = torch.tensor(frames)
        batch = dec.decode(codes, lengths)
        for i, n in enumerate(frames):
            assert torch.equal(batch[i, : n * dec.hop], dec.decode(codes[i : i + 1, :n])[0])
            assert float(batch[i, n * dec.hop :].abs().sum()) == 0
