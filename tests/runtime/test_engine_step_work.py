"""The engine's own work per step, as properties that hold on any machine (no timing): a steady frame step takes
the engine's lock only for its counters (nothing to cancel, feed or encode: no lock to see that), device work runs
under torch's inference guard (restored after a failure and after a nested launch), and a host tensor's result is
read as its own memory (what `.cpu().numpy()` gives, without the copy call)."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest
import torch

from v2.card import load_card
from v2.runtime import Runtime
from v2.runtime.device import HostStream, host_array, run_now
from v2.runtime.engine import _Condition


def test_run_now_leaves_inference_mode_after_a_failure_and_after_a_nested_launch() -> None:
    def fails() -> None:
        assert torch.is_inference_mode_enabled()
        raise ValueError("boom")

    pending = run_now(fails)
    assert isinstance(pending.error, ValueError) and not torch.is_inference_mode_enabled()
    stream = HostStream()

    def nested() -> tuple[bool, bool]:
        inner = stream.launch(torch.is_inference_mode_enabled).wait()
        return inner, torch.is_inference_mode_enabled()  # still on after the inner launch ended

    assert stream.launch(nested).wait() == (True, True)
    assert not torch.is_inference_mode_enabled()
    made = stream.launch(lambda: torch.ones(2) * 3).wait()
    assert made.is_inference() and torch.equal(made, torch.full((2,), 3.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_host_array_is_the_host_tensors_own_values(dtype: torch.dtype) -> None:
    t = torch.arange(6).reshape(2, 3).to(dtype)
    got = host_array(t)
    want = t.float().cpu().numpy() if dtype == torch.bfloat16 else t.cpu().numpy()
    assert got.dtype == want.dtype and np.array_equal(got, want)
    if dtype != torch.bfloat16:  # no copy: the tensor's memory, as `.cpu()` of a host tensor gives it
        assert got.ctypes.data == t.data_ptr()
    def fails() -> torch.Tensor:
        raise ZeroDivisionError("a failed launch")

    fetched = HostStream().fetch([run_now(lambda: t), run_now(lambda: None), run_now(fails)]).wait()
    assert np.array_equal(fetched[0], want) and fetched[1] is None and isinstance(fetched[2], ZeroDivisionError)


class _Counting(_Condition):
    """The engine's condition, counting the engine thread's acquisitions while `counting` is set."""

    counting = False
    taken = 0

    def __enter__(self) -> bool:
        if self.counting and threading.current_thread().name == "v2-engine":
            self.taken += 1
        return super().__enter__()


def test_a_steady_frame_step_takes_the_engines_lock_only_for_its_counters() -> None:
    rt = Runtime.from_card(load_card("moss_tts_local_tiny"), device="cpu")
    engine = rt.engine
    per_step: list[int] = []
    step = engine.step

    def counted() -> bool:
        cond = engine.cond
        assert isinstance(cond, _Counting)
        cond.taken, cond.counting = 0, True
        try:
            return step()
        finally:
            cond.counting = False
            per_step.append(cond.taken)

    try:
        engine.cond.__class__ = _Counting  # the same object everywhere (requests, inbox, gate): only counted
        engine.step = counted  # type: ignore[method-assign]
        result = rt.submit({"text": "Hello there.", "seed": 5, "max_frames": 24, "min_frames": 24}).result(timeout=300)
    finally:
        rt.close()
    assert len(result.codes) == 24 and len(per_step) >= 24
    # a frame step that launches one batch: its counters and the step's (a cancel, fed text or an encode would
    # take it once more each; there are none)
    assert Counter(per_step).most_common(1)[0][0] == 2, per_step
