"""Weight updates are all or nothing: every value checked first, a failure part-way restores the model,
versions are strictly increasing ints, and an update whose caller timed out is never applied."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from conftest import wait_idle
from holds import Hold
from v2.runtime import Runtime, weight_updates
from v2.runtime.weight_updates import WeightUpdateError

LN = "local_transformer.ln_f.weight"


@pytest.fixture
def runtime():
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    yield rt
    rt.close()


def snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def unchanged(model, before: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(v, before[k]) for k, v in model.named_parameters())


@pytest.mark.parametrize("value,message", [
    (lambda w: w * float("nan"), "NaN or infinite"), (lambda w: w * float("inf"), "NaN or infinite"),
    (lambda w: w.long(), "floating dtype"), (lambda w: w > 0, "floating dtype"),
    (lambda w: w.to(torch.complex64), "floating dtype"), (lambda w: torch.empty_like(w, device="meta"), "meta"),
    (lambda w: w.numpy().astype(np.int32), "numpy int32"), (lambda w: w.tolist(), "list"),
])
def test_bad_values_are_refused_before_anything_is_copied(runtime, value, message):
    before = snapshot(runtime.model)
    good = runtime.model.transformer.norm.weight.detach() * 2
    with pytest.raises(WeightUpdateError, match=message):
        runtime.update_weights({"transformer.norm.weight": good, LN: value(before[LN])}, version=1)
    assert unchanged(runtime.model, before) and runtime.weight_version == 0


def test_numpy_floats_and_other_floating_dtypes_are_cast(runtime):
    w = runtime.model.local_transformer.ln_f.weight.detach().clone()
    runtime.update_weights({LN: (w * 2).numpy()}, version=1)
    runtime.update_weights({LN: (w * 4).to(torch.bfloat16)}, version=2)
    assert torch.equal(runtime.model.local_transformer.ln_f.weight, (w * 4).to(torch.bfloat16).float())


@pytest.mark.parametrize("version,message", [("3", "expected an int"), (True, "expected an int"), (1.0, "expected an int"),
                                             (0, "must be greater than the current version 0"), (-1, "must be greater")])
def test_versions_are_strictly_increasing_ints(runtime, version, message):
    w = runtime.model.local_transformer.ln_f.weight.detach() * 2
    before = snapshot(runtime.model)
    with pytest.raises(WeightUpdateError, match=f"version: {message}"):
        runtime.update_weights({LN: w}, version=version)
    assert unchanged(runtime.model, before)
    runtime.update_weights({LN: w}, version=np.int64(5))
    with pytest.raises(WeightUpdateError, match="greater than the current version 5"):
        runtime.update_weights({LN: w}, version=5)


def test_a_failure_after_the_first_tensor_restores_every_parameter(runtime, monkeypatch):
    before = snapshot(runtime.model)
    real_copy, calls = weight_updates._copy, []

    def failing_copy(rows, value):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected copy failure")
        real_copy(rows, value)

    monkeypatch.setattr(weight_updates, "_copy", failing_copy)
    new = {k: v * 3 for k, v in list(before.items())[:4]}
    with pytest.raises(RuntimeError, match="injected"):
        runtime.update_weights(new, version=1)
    assert len(calls) == 2 and unchanged(runtime.model, before) and runtime.weight_version == 0
    monkeypatch.undo()
    assert runtime.submit({"text": "still fine", "max_frames": 3}).result(60).finish_reason in ("length", "stop")


def test_a_bad_tensor_late_in_a_checkpoint_restores_what_came_before(runtime, tmp_path):
    before = snapshot(runtime.model)
    tensors = {"transformer.norm.weight": before["transformer.norm.weight"] * 2,
               LN: before[LN] * float("nan")}  # read and checked only while applying, after the first copy
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    with pytest.raises(WeightUpdateError, match=f"{LN}: holds NaN"):
        runtime.update_weights_from_disk(str(tmp_path), version=1)
    assert unchanged(runtime.model, before) and runtime.weight_version == 0


def test_an_update_that_timed_out_is_withdrawn_and_never_applied(runtime, monkeypatch):
    before = snapshot(runtime.model)
    # the long request is held at its first frame until the update has timed out: it cannot end (and let the
    # update in) within the update's 0.05 s however fast the host is
    hold = Hold(runtime.family.ar_loop, monkeypatch, lambda state: True)
    long = runtime.submit({"text": "hold the weights", "max_frames": 120, "min_frames": 120})
    try:
        hold.wait()
        with pytest.raises(TimeoutError, match="withdrawn"):
            runtime.update_weights({LN: before[LN] * 2}, version=1, mode="wait", timeout=0.05)
    finally:
        hold.release()
    assert long.result(120).finish_reason == "length"
    after = runtime.submit({"text": "after", "max_frames": 2}).result(60)  # steps ran past the old update
    wait_idle(runtime)
    assert after.finish_reason in ("length", "stop")
    assert unchanged(runtime.model, before) and runtime.weight_version == 0
    runtime.update_weights({LN: before[LN] * 2}, version=1)  # the gate is free again
    assert runtime.weight_version == 1
