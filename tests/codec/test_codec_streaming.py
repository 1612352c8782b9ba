"""Streaming: any chunking equals the whole-utterance decode bit for bit; streams never leak into each other."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

pytestmark = pytest.mark.exact

FRAMES = 24


def codes_for(seed: int, frames: int = FRAMES) -> torch.Tensor:
    return torch.randint(0, 1024, (1, 12, frames), generator=torch.Generator().manual_seed(seed))


def stream(codec, codes: torch.Tensor, splits: list[int], slot: int = 0) -> torch.Tensor:
    state = codec.allocate_state(3)
    out, start = [], 0
    for n in splits:
        out.append(codec.decode_chunk(torch.tensor([slot]), codes[:, :, start : start + n], state=state))
        start += n
    return torch.cat(out, dim=-1)


def splits_of(total: int, cuts: list[int]) -> list[int]:
    points = sorted({c for c in cuts if 0 < c < total})
    return [b - a for a, b in zip([0, *points], [*points, total])]


def test_one_frame_at_a_time_equals_whole(ref_codec, tiny_codec):
    for codec in (ref_codec, tiny_codec):
        codes = codes_for(1)
        assert torch.equal(stream(codec, codes, [1] * FRAMES), codec.decode(codes))


def test_one_then_four_then_the_rest_equals_whole(ref_codec, tiny_codec):
    for codec in (ref_codec, tiny_codec):
        codes = codes_for(2)
        assert torch.equal(stream(codec, codes, [1, 4, FRAMES - 5], slot=2), codec.decode(codes))


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(1, FRAMES - 1), max_size=6), st.integers(0, 2**16))
def test_random_splits_equal_whole(tiny_codec, cuts, seed):
    codes = codes_for(seed)
    assert torch.equal(stream(tiny_codec, codes, splits_of(FRAMES, cuts)), tiny_codec.decode(codes))


@settings(max_examples=8, deadline=None)
@given(st.lists(st.integers(1, 9), max_size=4), st.integers(0, 2**16))
def test_random_splits_equal_whole_on_the_reference_codec(ref_codec, cuts, seed):
    codes = codes_for(seed, 10)
    assert torch.equal(stream(ref_codec, codes, splits_of(10, cuts)), ref_codec.decode(codes))


def test_two_streams_interleaved_in_one_batch_equal_each_alone(tiny_codec):
    a, b = codes_for(10), codes_for(11)
    state = tiny_codec.allocate_state(4)
    out_a, out_b = [], []
    # a in slot 3 and b in slot 1: advance both, then a alone, then both with the dummy as padding
    both = torch.tensor([3, 1])
    out = tiny_codec.decode_chunk(both, torch.cat([a[:, :, :5], b[:, :, :5]]), state=state)
    out_a.append(out[0:1]), out_b.append(out[1:2])
    out_a.append(tiny_codec.decode_chunk(torch.tensor([3]), a[:, :, 5:9], state=state))
    padded = torch.tensor([1, state.dummy_slot])
    out = tiny_codec.decode_chunk(padded, torch.cat([b[:, :, 5:9], a[:, :, :4]]), state=state)
    out_b.append(out[0:1])
    out = tiny_codec.decode_chunk(both, torch.cat([a[:, :, 9:], b[:, :, 9:]]), state=state)
    out_a.append(out[0:1]), out_b.append(out[1:2])
    assert torch.equal(torch.cat(out_a, -1), tiny_codec.decode(a))
    assert torch.equal(torch.cat(out_b, -1), tiny_codec.decode(b))
    assert state.frames[:4].tolist() == [0, FRAMES, 0, FRAMES]


def test_a_reset_slot_starts_clean(tiny_codec):
    first, second = codes_for(20), codes_for(21)
    state = tiny_codec.allocate_state(2)
    tiny_codec.decode_chunk(torch.tensor([0]), first[:, :, :13], state=state)
    state.reset([0])
    assert int(state.frames[0]) == 0 and all(float(k[0].abs().sum()) == 0 for k in state.k)
    out = [tiny_codec.decode_chunk(torch.tensor([0]), second[:, :, s : s + 6], state=state) for s in range(0, FRAMES, 6)]
    assert torch.equal(torch.cat(out, -1), tiny_codec.decode(second))


def test_batched_decode_equals_each_alone(tiny_codec):
    codes = torch.cat([codes_for(30), codes_for(31)])
    lengths = torch.tensor([FRAMES, 17])
    batch = tiny_codec.decode(codes, lengths)
    assert torch.equal(batch[0:1], tiny_codec.decode(codes[0:1]))
    assert torch.equal(batch[1:2, :, : 17 * 3840], tiny_codec.decode(codes[1:2, :, :17]))


def test_rows_with_fewer_real_frames_than_the_chunk(tiny_codec):
    """Chunks of different lengths share one call, padded to a common n; each stream stays exact."""
    a, b = codes_for(40), codes_for(41)
    state = tiny_codec.allocate_state(2)
    out_a, out_b = [], []
    for (sa, na), (sb, nb) in [((0, 3), (0, 1)), ((3, 8), (1, 8)), ((11, 13), (9, 15))]:
        n = max(na, nb) + 2  # padding frames past both
        codes = torch.zeros(2, 12, n, dtype=torch.long)
        codes[0, :, :na], codes[1, :, :nb] = a[0, :, sa : sa + na], b[0, :, sb : sb + nb]
        codes[:, :, max(na, nb):] = 7
        out = tiny_codec.decode_chunk(torch.tensor([0, 1]), codes, state=state, lengths=torch.tensor([na, nb]))
        out_a.append(out[0:1, :, : na * 3840]), out_b.append(out[1:2, :, : nb * 3840])
    assert state.frames[:2].tolist() == [FRAMES, FRAMES]
    assert torch.equal(torch.cat(out_a, -1), tiny_codec.decode(a))
    assert torch.equal(torch.cat(out_b, -1), tiny_codec.decode(b))


def test_banded_window_attention_matches_the_exact_form():
    from v2.models.window_attention import banded_window_attention, exact_window_attention

    g = torch.Generator().manual_seed(0)
    for window, n, first in ((4, 9, [0, 3]), (31, 300, [0, 40]), (100, 70, [5, 200])):
        q = torch.randn(2, 3, n, 8, generator=g)
        keys, values = torch.randn(2, 3, window - 1 + n, 8, generator=g), torch.randn(2, 3, window - 1 + n, 8, generator=g)
        pos = torch.tensor(first)
        torch.testing.assert_close(banded_window_attention(q, keys, values, pos, window),
                                   exact_window_attention(q, keys, values, pos, window), atol=1e-5, rtol=1e-5)
