"""The code predictor's fused pass (`CodePredictor.predict_fused`, the kernels in Triton's interpreter) completes a
frame as the torch pass does: the same codes, logprobs, raw logits and frame(codes) up to float rounding, for
the release's two shapes (an input projection, as 1.7B has; none, as 0.6B) and through `frame_step`."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from v2.models import kernels
from v2.models.kernels import frame_attention
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.models.qwen3_tts.sampling import Qwen3TTSSamplingTensors
from v2.sampling_settings import HeadSampling

from .conftest import CHECKPOINT

pytestmark = pytest.mark.skipif(frame_attention.triton is None, reason="needs triton")
CODES = 48  # a small code-predictor vocabulary keeps the interpreter's sort quick


def small_model(projected: bool) -> Qwen3TTS:
    config = copy.deepcopy(json.loads((CHECKPOINT / "config.json").read_text()))
    cp = config["talker_config"]["code_predictor_config"]
    cp.update(vocab_size=CODES, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    if not projected:  # the predictor as wide as the talker: no input projection (the 0.6B layout)
        cp.update(hidden_size=config["talker_config"]["hidden_size"])
    return Qwen3TTS.from_seed(config, 5)


@pytest.mark.parametrize("projected", [True, False])
@torch.no_grad()
def test_the_fused_pass_completes_frames_as_the_torch_pass(projected, monkeypatch):
    model = small_model(projected)
    assert (type(model.talker.code_predictor.small_to_mtp_projection).__name__ == "Linear") == projected
    b, h = 4, model.cfg.talker.hidden_size
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(b, h, generator=g) * 2
    c0 = torch.randint(0, CODES, (b,), generator=g)
    settings = [Qwen3TTSSampling(), Qwen3TTSSampling.greedy(),
                Qwen3TTSSampling(HeadSampling(0.9, 50, 1.0), HeadSampling(1.3, 0, 0.8)), Qwen3TTSSampling()]
    s = Qwen3TTSSamplingTensors.build(settings, [7, 8, 9, 10])
    frame = torch.tensor([0, 3, 11, 500])
    want = model.predict_codes(hidden, c0, s, frame)
    assert want.embedded is None and want.logits is not None
    monkeypatch.setattr(kernels, "FORCE", True)
    got = model.predict_codes(hidden, c0, s, frame)
    assert torch.equal(got.codes, want.codes)
    assert got.logits is not None and got.embedded is not None
    torch.testing.assert_close(got.logits, want.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.logprobs, want.logprobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.embedded, model.embed_frame(want.codes), atol=1e-5, rtol=1e-5)
    if not projected:  # the projected layout's pass without logits: test_a_frame_step_through_the_kernels_...
        bare = model.predict_codes(hidden, c0, s, frame, return_logits=False)
        assert bare.logits is None and torch.equal(bare.codes, got.codes) and torch.equal(bare.logprobs, got.logprobs)


@torch.no_grad()
def test_a_frame_step_through_the_kernels_equals_the_torch_step(monkeypatch):
    """Talker rows at mixed positions in their own slots: the fed row, the talker's state and its logits."""
    model = small_model(True)
    b, h = 3, model.cfg.talker.hidden_size
    g = torch.Generator().manual_seed(2)
    cache = model.allocate_kv(b, 32)
    cache.k.normal_(generator=g)
    cache.v.normal_(generator=g)
    args = (torch.randn(b, h, generator=g), torch.randint(0, CODES, (b,), generator=g), torch.randn(b, h, generator=g),
            Qwen3TTSSamplingTensors.build([Qwen3TTSSampling()] * b, [1, 2, 3]), torch.tensor([4, 0, 9]))
    k, v = cache.k.clone(), cache.v.clone()
    kw = dict(valid=torch.tensor([True, True, False]), context_len=32)
    want = model.frame_step(*args, cache, torch.tensor([0, 2, 1]), torch.tensor([5, 17, 30]), **kw)
    cache.k.copy_(k)
    cache.v.copy_(v)
    monkeypatch.setattr(kernels, "FORCE", True)
    got = model.frame_step(*args, cache, torch.tensor([0, 2, 1]), torch.tensor([5, 17, 30]), **kw, return_logits=False)
    assert torch.equal(got.frame.codes[:2], want.frame.codes[:2])  # row 2 is padding: its outputs mean nothing
    assert got.frame.logits is None and want.frame.logits is not None  # the fused pass kept no code logits
    for a, w in ((got.row, want.row), (got.hidden, want.hidden), (got.logits, want.logits)):
        torch.testing.assert_close(a[:2], w[:2], atol=1e-4, rtol=1e-4)
    assert torch.equal(cache.k[:, 1], k[:, 1]) and torch.equal(cache.v[:, 1], v[:, 1])  # padding wrote no real slot


@torch.no_grad()
def test_a_predictor_the_kernels_cannot_run_takes_the_torch_pass(monkeypatch):
    """A frame of more positions than the frame attention holds (17 groups): the per-layer kernels' pass is taken."""
    config = copy.deepcopy(json.loads((CHECKPOINT / "config.json").read_text()))
    config["talker_config"]["num_code_groups"] = 17
    config["talker_config"]["code_predictor_config"].update(vocab_size=CODES, num_hidden_layers=1, num_code_groups=17)
    model = Qwen3TTS.from_seed(config, 5)
    assert not model.talker.code_predictor.fits_kernels
    args = (torch.randn(2, model.cfg.talker.hidden_size), torch.tensor([3, 4]),
            Qwen3TTSSamplingTensors.build([Qwen3TTSSampling.greedy()] * 2, [1, 2]), torch.tensor([0, 1]))
    want = model.predict_codes(*args)
    monkeypatch.setattr(kernels, "FORCE", True)
    got = model.predict_codes(*args)
    assert got.embedded is None and torch.equal(got.codes, want.codes)
