"""The graph path's CPU twin: buckets, static buffers, padding, and the eager fallback."""

from __future__ import annotations

import torch

from v2.families.moss_tts_local.ar_decode import FramePlan
from v2.families.moss_tts_local.vocoder import ChunkPlan
from v2.sampling_settings import SamplingSettings
from v2.families.moss_tts_local.codec_executor import CodecExecutor
from v2.families.moss_tts_local.ar_executor import ARExecutor, context_buckets
from v2.runtime.graphs import StepGraphs


def test_context_buckets_are_powers_of_two_up_to_the_cache():
    assert context_buckets(1624) == [64, 128, 256, 512, 1024, 1624]
    assert context_buckets(64) == [64] and context_buckets(65) == [64, 65]


def test_step_graphs_fall_back_eagerly_without_cuda_and_count_why():
    calls = []
    graphs = StepGraphs("t", lambda key: (calls.append(key), torch.ones(key[0]))[1], [(1,), (4,)],
                        device=torch.device("cpu"), enabled=True)
    graphs.capture()  # nothing to capture on CPU
    assert graphs.can_use_graph((4,)) == (False, "no_cuda")
    assert torch.equal(graphs.run((4,)), torch.ones(4)) and calls == [(4,)]
    off = StepGraphs("t", lambda key: torch.zeros(1), [(1,)], device=torch.device("cpu"), enabled=False)
    off.run((1,))
    assert graphs.stats() == {"captured": 0, "replays": 0, "eager_fallbacks": {"no_cuda": 1}}
    assert off.stats()["eager_fallbacks"] == {"disabled": 1}
    assert graphs.keys == [(4,), (1,)]  # captured largest first


def _ar(tiny_model) -> ARExecutor:
    ex = ARExecutor(tiny_model, num_slots=8, max_len=256, batch_buckets=[1, 2, 4, 8])
    width = ex.tables.shape[1]
    ex.apply([], [(slot, i, slot * width + i) for slot in range(8) for i in range(width)])  # blocks of its own each
    settings = [SamplingSettings(), SamplingSettings.uniform(1.1, 10, 0.9, 1.3), SamplingSettings.uniform(0.0)]
    for slot in range(8):
        ex.admit(slot, settings[slot % 3], seed=40 + slot)
        ex.hidden[slot] = torch.randn(tiny_model.cfg.hidden_size, generator=torch.Generator().manual_seed(slot))
    return ex


def _keys(ex: ARExecutor, slots: list[int]) -> torch.Tensor:
    """K of the slots' rows: [layers, slots, Hkv, W * S, D]."""
    # [layers, n, W, Hkv, S, D] -> [layers, n, Hkv, W, S, D] -> [layers, n, Hkv, W * S, D]
    return ex.kv.k[:, ex.tables[slots]].transpose(2, 3).flatten(3, 4)


def test_a_padded_frame_batch_gives_the_same_rows_as_the_unpadded_one(tiny_model):
    plans = [FramePlan(slot, 30 + 7 * slot, slot, slot % 2 == 0) for slot in (5, 1, 6)]  # mixed positions
    runs = []
    for bucket in (3, 4, 8):  # unpadded, and padded with dummy-slot rows
        ex = _ar(tiny_model)
        out = ex.frame(plans, bucket)
        assert out.shape == (bucket, 26)
        runs.append((out[:3], ex.hidden[[5, 1, 6]].clone(), _keys(ex, [5, 1, 6]).clone()))
        assert ex.graphs.stats()["eager_fallbacks"] == {"no_cuda": 1}
        assert int(ex.inputs.slot[3:bucket].eq(ex.dummy_slot).sum()) == bucket - 3  # padding aims at the dummy slot
    for out, hidden, k in runs[1:]:
        assert torch.equal(out[:, :13], runs[0][0][:, :13])  # stop flags and codes
        torch.testing.assert_close(out, runs[0][0], atol=1e-5, rtol=0)
        torch.testing.assert_close(hidden, runs[0][1], atol=1e-5, rtol=0)
        torch.testing.assert_close(k, runs[0][2], atol=1e-5, rtol=0)


def test_padding_rows_touch_only_the_dummy_slot_which_reset_dummy_clears(tiny_model):
    ex = _ar(tiny_model)
    before = (ex.hidden[:-1].clone(), ex.presence[:-1].clone(), ex.kv.k[:, :-1].clone())
    ex.frame([FramePlan(2, 40, 1, True)], 4)  # one real row, three padding rows
    d, dummy = ex.dummy_slot, ex.kv.dummy_block
    assert ex.presence[d].any() and ex.kv.k[:, dummy].abs().sum() > 0  # the padding rows wrote the dummy block
    assert bool(ex.tables[d].eq(dummy).all())  # the dummy slot reads and writes only the dummy block
    others = [s for s in range(d) if s != 2]
    assert torch.equal(ex.hidden[others], before[0][others]) and torch.equal(ex.presence[others], before[1][others])
    written = int(ex.tables[2, 40 // ex.kv.block_size])  # the one block the real row wrote
    untouched = [b for b in range(ex.kv.num_blocks) if b != written]
    assert torch.equal(ex.kv.k[:, untouched], before[2][:, untouched])
    assert not torch.equal(ex.kv.k[:, written], before[2][:, written])
    ex.reset_dummy()  # what the executor does after capture's warm-ups
    assert not ex.presence[d].any() and not ex.hidden[d].any()
    assert not ex.kv.k[:, dummy].any() and not ex.kv.v[:, dummy].any()


def test_the_static_step_at_a_context_bucket_equals_the_exact_context(tiny_model):
    plans = [FramePlan(slot, 20 + slot, 3, True) for slot in range(4)]
    exact, bucketed = _ar(tiny_model), _ar(tiny_model)
    assert exact.stage(plans, 4) == 24 and bucketed.stage(plans, 4) == 24
    a = exact.frame_step((4, 24, 1))
    b = bucketed.frame_step(bucketed.graph_key(4, 24))  # what the graph for the 64-key bucket computes
    assert bucketed.graph_key(4, 24) == (4, 64, 1)
    assert torch.equal(a[:, :13], b[:, :13])
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_codec_chunks_pad_rows_and_frames_through_static_buffers(tiny_codec):
    codes = torch.randint(0, 1024, (2, 5, 12), generator=torch.Generator().manual_seed(1)).tolist()
    plans = [ChunkPlan(0, tuple(map(tuple, codes[0][:3])), False), ChunkPlan(1, tuple(map(tuple, codes[1])), False)]
    ex = CodecExecutor(tiny_codec, num_slots=4, batch_buckets=[1, 2, 4], frame_buckets=[4, 8])
    audio = ex.chunk(plans, 4, 8)
    assert audio.shape == (4, 2, 8 * 3840) and ex.state.frames.tolist()[:2] == [3, 5]
    alone = tiny_codec.decode(torch.tensor(codes[1]).T[None])
    assert torch.equal(audio[1:2, :, : 5 * 3840], alone)
