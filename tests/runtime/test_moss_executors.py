"""MOSS-TTS-Local registers the shared executors: PREFILL and AR_FRAME from its `ARExecutor.executors()` (the
runtime's frame plumbing), AUDIO_CHUNK from its `CodecExecutor.executor()`, ENCODE as `Halves` over its
`EncodeExecutor` (the tiny card loads the codec's encoder), in the scheduler's order as before; the engine bench's instant stand-ins swap those halves' device calls for a block and put the real
ones back; its group check is the shared one."""

from __future__ import annotations

import pytest

from v2.bench.overhead import instant_experts, one_row_requests
from v2.contracts import WorkUnitKind
from v2.runtime import Runtime
from v2.runtime.family import Halves


@pytest.fixture(scope="module")
def rt():
    runtime = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    yield runtime
    runtime.close()


def test_the_executors_are_the_shared_halves_over_the_family_s_executors(rt):
    fam = rt.family
    kinds = fam.executors
    order = [WorkUnitKind.ENCODE, WorkUnitKind.PREFILL, WorkUnitKind.AR_FRAME, WorkUnitKind.AUDIO_CHUNK]
    assert list(kinds) == order  # the scheduler's order, as before
    assert all(isinstance(h, Halves) for h in kinds.values())
    assert kinds[WorkUnitKind.PREFILL].launch == fam.ar_exec.prefill
    assert kinds[WorkUnitKind.AR_FRAME].launch == fam.ar_exec.launch
    assert kinds[WorkUnitKind.ENCODE].launch == fam.encode_exec.launch
    assert list(rt.engine.executors) == order


def test_the_instant_stand_ins_swap_the_device_calls_and_put_them_back(rt):
    kinds = rt.family.executors
    real = {k: h.launch for k, h in kinds.items()}
    with instant_experts(rt):
        swapped = {k for k in kinds if kinds[k].launch is not real[k]}
        assert swapped == {WorkUnitKind.PREFILL, WorkUnitKind.AR_FRAME, WorkUnitKind.AUDIO_CHUNK}
        handles = rt.submit_many(one_row_requests(rt, 4, frames=5))
        results = [h.result(60) for h in handles]
    assert [r.finish_reason for r in results] == ["length"] * 4
    assert all(r.codes.max() == 0 for r in results)  # the stand-in's frames: zero codes
    assert {k: h.launch for k, h in kinds.items()} == real
    again = rt.submit(one_row_requests(rt, 1, frames=5)[0]).result(60)
    assert again.codes.shape == (5, 12) and again.codes.any()  # the real model again


def test_a_group_over_the_card_s_limits_is_refused_by_the_shared_check(rt):
    with pytest.raises(ValueError, match="n: a group of .* exceeds the card's max_running"):
        rt.submit_many([{"text": "shared"}] * (rt.family.max_group + 1), share_prompt=True)
