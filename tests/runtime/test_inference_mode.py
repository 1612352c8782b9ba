"""Device work runs in inference mode; what a model keeps past that work stays usable outside it.

A tensor made in `torch.inference_mode()` may not be written in place outside it nor saved for a
differentiable pass, so the caches a model fills during the runtime's work (a weight's padded copy, RoPE
tables, a frame's kept buffers) must be normal tensors (v2/models/persist.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from v2.card import load_card
from v2.models import exact
from v2.models.rope import rope_inv_freq
from v2.runtime import Runtime
from v2.runtime.device import HostStream, SimulatedStream


@pytest.mark.parametrize("make", [HostStream, lambda: SimulatedStream(0.0)], ids=["host", "simulated"])
def test_device_work_runs_in_inference_mode(make):
    stream = make()
    try:
        assert stream.launch(torch.is_inference_mode_enabled).wait() is True
    finally:
        stream.close()
    assert not torch.is_inference_mode_enabled()


def test_a_weights_padded_copy_made_in_device_work_is_saved_by_a_differentiable_pass():
    weight = torch.randn(8, exact.ALIGN + 4)  # an inner dim off the alignment: the padded copy is cached
    HostStream().launch(lambda: exact.linear(torch.randn(exact.TILE, weight.shape[1]), weight)).wait()
    x = torch.randn(exact.TILE, weight.shape[1], requires_grad=True)
    exact.linear(x, weight).sum().backward()  # saves the cached copy for x's gradient
    assert x.grad is not None
    torch.testing.assert_close(x.grad, weight.sum(0).expand_as(x))


def test_a_rope_table_made_in_device_work_is_saved_by_a_differentiable_pass():
    head_dim, base = 12, 4321.0  # a table no other test made first
    HostStream().launch(lambda: rope_inv_freq(head_dim, base, torch.device("cpu"))).wait()
    x = torch.ones(head_dim // 2, requires_grad=True)
    (x * rope_inv_freq(head_dim, base, torch.device("cpu"))).sum().backward()
    assert torch.equal(x.grad, rope_inv_freq(head_dim, base, torch.device("cpu")))


def test_a_models_kept_state_after_serving_is_normal_tensors_and_generate_still_runs():
    card = load_card("moss_tts_local_tiny")
    rt = Runtime.from_card(card, device="cpu")
    try:
        first = rt.submit({"text": "Hello there.", "seed": 3, "max_frames": 6}).result(timeout=300)
        model = rt.model
        kept = [t for p in model.parameters() for t in [getattr(p, "_exact_aligned", (0, None))[1]] if t is not None]
        for stack in model.local_transformer._stacks.values():
            kept += [v for v in vars(stack).values() if isinstance(v, torch.Tensor)]
        for buffers in model.frame_buffers.values():
            kept += [v for v in vars(buffers).values() if isinstance(v, torch.Tensor)]
        assert kept and not any(t.is_inference() for t in kept)
        again = rt.submit({"text": "Hello there.", "seed": 3, "max_frames": 6}).result(timeout=300)
        assert np.array_equal(np.asarray(first.codes), np.asarray(again.codes))
    finally:
        rt.close()
