"""MOSS's frame step where the static inputs are host memory (a CPU): rows of consecutive slots through kept views of
the slot state, flags all set or all clear as kept tensors, no presence read for a batch without a repetition
penalty; every result, state row, presence mask and KV row equal to the gathers' step (`host_inputs` off), bit for
bit, frame after frame (one route: only the rows' seam differs, `_host_rows` / `_device_rows`). The device seam reads
the static inputs through views kept before any capture and reads nothing on the host. Also the host half's packed
inputs (`pack`)."""

from __future__ import annotations

import pytest
import torch

from v2.families.moss_tts_local.ar_decode import FramePlan
from v2.families.moss_tts_local.ar_executor import ARExecutor, FrameBatch
from v2.sampling_settings import SamplingSettings

pytestmark = pytest.mark.exact

SETTINGS = [SamplingSettings(), SamplingSettings.uniform(1.1, 10, 0.9, 1.3), SamplingSettings.uniform(0.0),
            SamplingSettings.uniform(0.9, 0, 0.8)]  # default; top-k, top-p and a penalty; greedy; top-p alone


def _ar(model, host: bool) -> ARExecutor:
    ex = ARExecutor(model, num_slots=8, max_len=256, batch_buckets=[1, 2, 4, 8])
    ex.host_inputs = host
    width = ex.tables.shape[1]
    ex.apply([], [(slot, i, slot * width + i) for slot in range(8) for i in range(width)])  # blocks of its own each
    for slot in range(8):
        ex.admit(slot, SETTINGS[slot % 4], seed=40 + slot)
        ex.hidden[slot] = torch.randn(model.cfg.hidden_size, generator=torch.Generator().manual_seed(slot))
    return ex


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32) if x.dtype == torch.float32 else x


# (slots, bucket, allow stop per row): consecutive runs (penalized or not), padded and scattered batches, and
# flags all set, all clear and mixed
BATCHES = [([0, 1, 2, 3], 4, [True] * 4), ([2, 3], 2, [False, False]), ([6], 1, [True]), ([5, 1, 6], 4, [True, False, True]),
           ([4, 5, 6, 7], 4, [False, True, False, True]), ([7, 3], 2, [False, False]), ([2], 2, [True]),
           ([3, 2], 2, [True, True])]


def test_the_host_frame_step_equals_the_gathers_frame_after_frame(tiny_model):
    host, gathered = _ar(tiny_model, True), _ar(tiny_model, False)
    full = bool(host.full_sort)
    for frame in range(3):
        for slots, bucket, allow in BATCHES:
            plans = [FramePlan(s, 20 + 3 * s + frame, frame, a) for s, a in zip(slots, allow)]
            outs = [ex.frame(plans, bucket) for ex in (host, gathered)]
            assert torch.equal(bits(outs[0][: len(plans)]), bits(outs[1][: len(plans)])), (frame, slots)
    for name in ("hidden", "presence", "tables"):
        assert torch.equal(bits(getattr(host, name)[:-1]), bits(getattr(gathered, name)[:-1])), name
    assert torch.equal(host.kv.k, gathered.kv.k) and torch.equal(host.kv.v, gathered.kv.v)
    assert bool(host.presence[1].any()) and bool(host.presence[2].any())  # penalized or not, a row's codes are recorded
    assert {(0, 4), (2, 2), (6, 1), (4, 4)} <= set(host._views_kept)  # consecutive slots: the kept views
    assert host.penalized == {1, 5} and full == bool(gathered.full_sort)


def test_an_admission_is_seen_through_the_kept_views(tiny_model):
    host, gathered = _ar(tiny_model, True), _ar(tiny_model, False)
    plans = [FramePlan(s, 30, 0, True) for s in (0, 1)]
    for ex in (host, gathered):
        ex.frame(plans, 2)
        ex.admit(0, SETTINGS[1], seed=7)  # slot 0 takes a penalty and new settings
        ex.admit(1, SETTINGS[0], seed=8)  # slot 1 loses its penalty
    assert host.penalized == {0, 5}
    for step in (1, 2):
        plans = [FramePlan(s, 30 + step, step, True) for s in (0, 1)]
        a, b = host.frame(plans, 2), gathered.frame(plans, 2)
        assert torch.equal(bits(a), bits(b))


def test_pack_writes_the_plans_and_padding_rows(tiny_model):
    ex = _ar(tiny_model, True)
    launch = ex.pack([FramePlan(2, 40, 5, False, feed=2), FramePlan(1, 9, 2, True)], 4)
    d = ex.dummy_slot
    assert launch.host.dtype == torch.long and launch.host.tolist() == [
        [2, 1, d, d], [40, 9, 0, 0], [5, 2, 0, 0], [0, 1, 1, 1], [1, 1, 0, 0], [2, 0, ex.pad_feed, ex.pad_feed]]
    assert launch.key == (4, 41, 0)  # neither slot's settings need the full sort
    assert ex.pack([FramePlan(1, 9, 2, True), FramePlan(3, 7, 2, True)], 2).key == (2, 10, 1)  # slot 3's do


@pytest.mark.parametrize("n", [1, 2, 3, 16])
def test_a_frame_batch_reads_the_same_rows_at_any_size(n):
    g = torch.Generator().manual_seed(n)
    host = torch.rand(16, 26, generator=g) * 4 - 2  # stop flags, codes and logprobs of any sign
    host[:, 0] = (host[:, 0] > 0).float()
    host[:, 1:13] = torch.randint(0, 1024, (16, 12), generator=g).float()
    arr = host.numpy()
    got = FrameBatch.read(arr, n, 12)
    rows = arr[:n]
    assert got.stop == [bool(v > 0.5) for v in rows[:, 0]]
    assert got.codes == [[int(v) for v in r] for r in rows[:, 1:13].astype("int64")]
    assert got.logprobs == rows[:, 13:].tolist()
    assert all(type(c) is int for r in got.codes for c in r) and all(type(v) is float for r in got.logprobs for v in r)
    assert [tuple(r.codes) for r in got] == [tuple(c) for c in got.codes]


def test_replaced_state_tensors_are_not_read_through_old_views(tiny_model):
    host, gathered = _ar(tiny_model, True), _ar(tiny_model, False)
    plans = [FramePlan(s, 30, 0, True) for s in (0, 1)]
    for ex in (host, gathered):
        ex.frame(plans, 2)  # views of slots 0 and 1 kept
        ex.hidden = ex.hidden.clone() * 0.5  # another tensor (a benchmark swaps the tables so)
    plans = [FramePlan(s, 31, 1, True) for s in (0, 1)]
    assert torch.equal(bits(host.frame(plans, 2)), bits(gathered.frame(plans, 2)))
    assert torch.equal(host.hidden, gathered.hidden)


def test_the_device_rows_read_the_static_inputs_and_nothing_on_the_host(tiny_model, monkeypatch):
    """What a step graph captures: the inputs' views kept before the capture, and no host read of a device value."""
    ex = _ar(tiny_model, False)
    assert set(ex._inputs_kept) == {1, 2, 4, 8}  # made at construction: a captured step makes none
    kept = ex._inputs_kept[4]
    static = ex.inputs.packed.untyped_storage().data_ptr()
    for view in (kept.packed, kept.steps, kept.positions, kept.allow, kept.valid, kept.gathers.slots):
        assert view.untyped_storage().data_ptr() == static
    ex.stage([FramePlan(s, 30 + s, 2, s != 5) for s in (5, 1, 6)], 4)
    codes = torch.randint(0, tiny_model.cfg.codebook_size, (4, tiny_model.cfg.n_vq))
    new_hidden = torch.randn(4, tiny_model.cfg.hidden_size)
    slots = [5, 1, 6, ex.dummy_slot]
    before = ex.hidden[slots].clone()

    def host_read(*args, **kwargs):
        raise AssertionError("a host read of a device value")

    with monkeypatch.context() as m:
        for name in ("tolist", "item", "numpy", "__bool__", "__int__", "__index__"):
            m.setattr(torch.Tensor, name, host_read)
        rows, penalized, allow, valid = ex._device_rows(kept)
        hidden, tables, sampling, presence = rows.read(ex, penalized)
        rows.record(ex, codes)
        rows.store(ex, new_hidden)
    assert penalized and presence is not None and torch.equal(allow, torch.tensor([False, True, True, True]))
    assert valid.shape == (4, 1) and valid[:, 0].tolist() == [True, True, True, False]
    assert torch.equal(hidden, before) and torch.equal(tables, ex.tables[slots])
    assert torch.equal(ex.hidden[slots], new_hidden)
    assert all(bool(ex.presence[s, c, codes[i, c]]) for i, s in enumerate(slots) for c in range(12))
