"""The CPU frame pass (`frame_stack.FrameStack`, taken by Qwen3-TTS's code predictor and CSM's depth decoder on a CPU
in float32) equals the generic pass (`Qwen3Backbone.forward_cached` over the per-frame `KVCache`) bit for bit: codes,
raw logits, logprobs and the cache it leaves, at batches 1, 3, 16 and 17 (one tile, several), for the tiny
fixtures and other dims (no input projection; 20 codebooks: a frame of positions that is not a power of two; one
kv head for four query heads); frame after frame through the kept pass, and after a weight changes in place."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from v2.models import frame_stack
from v2.models.frame_stack_kept import KeptFrameStack, kept_stack
from v2.models.csm.config import CsmSampling
from v2.models.csm.model import Csm
from v2.models.csm.sampling import CsmSamplingTensors
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.models.qwen3_tts.sampling import Qwen3TTSSamplingTensors
from v2.sampling_settings import HeadSampling

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
QWEN, CSM = FIXTURES / "qwen3_tts_tiny" / "checkpoint", FIXTURES / "csm_tiny" / "checkpoint"
BATCHES = (1, 3, 16, 17)
pytestmark = pytest.mark.exact


def both_passes(monkeypatch, run: Callable[[], tuple[Any, Any]]) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """(the frame pass's result, the generic pass's result) of the same call."""
    made: list[int] = []
    step = KeptFrameStack.step
    with monkeypatch.context() as m:
        def counted(self: KeptFrameStack, *a: Any, **kw: Any) -> None:
            made.append(1)
            step(self, *a, **kw)

        m.setattr(KeptFrameStack, "step", counted)
        got = run()
    assert made  # the frame pass ran
    with monkeypatch.context() as m:
        m.setattr(frame_stack, "fits", lambda model, x: False)
        want = run()
    return got, want


def assert_same_cache(got, want, b: int) -> None:
    assert torch.equal(got.k[:, :b], want.k[:, :b]) and torch.equal(got.v[:, :b], want.v[:, :b])


def qwen_run(model: Qwen3TTS, b: int) -> Callable[[], tuple[Any, Any]]:
    g = torch.Generator().manual_seed(b)
    hidden = torch.randn(b, model.cfg.talker.hidden_size, generator=g) * 2
    c0 = torch.randint(0, 64, (b,), generator=g)
    kinds = [Qwen3TTSSampling(), Qwen3TTSSampling.greedy(),
             Qwen3TTSSampling(HeadSampling(0.9, 50, 1.0), HeadSampling(1.3, 0, 0.8))]
    s = Qwen3TTSSamplingTensors.build([kinds[i % 3] for i in range(b)], list(range(7, 7 + b)))

    def run() -> tuple[Any, Any]:
        cache = model.talker.code_predictor.allocate_kv(b, dtype=torch.float32, device="cpu")
        with torch.no_grad():
            return model.predict_codes(hidden, c0, s, torch.arange(b) * 3, cache=cache), cache

    return run


def csm_run(model: Csm, b: int) -> Callable[[], tuple[Any, Any]]:
    g = torch.Generator().manual_seed(b)
    hidden = torch.randn(b, model.cfg.hidden_size, generator=g) * 2
    c0 = torch.randint(0, model.cfg.vocab_size, (b,), generator=g)
    kinds = [CsmSampling(HeadSampling(0.9, 50, 1.0), HeadSampling(0.9, 50, 1.0)), CsmSampling.greedy(),
             CsmSampling(HeadSampling(1.3, 0, 0.8), HeadSampling(0.7, 5, 1.0))]
    s = CsmSamplingTensors.build([kinds[i % 3] for i in range(b)], list(range(3, 3 + b)))

    def run() -> tuple[Any, Any]:
        cache = model.allocate_depth_kv(b)
        with torch.no_grad():
            return model.predict_codes(hidden, c0, s, torch.arange(b) * 7, cache=cache), cache

    return run


def qwen_models() -> list[Qwen3TTS]:
    config = copy.deepcopy(json.loads((QWEN / "config.json").read_text()))
    cp = config["talker_config"]["code_predictor_config"]
    cp.update(hidden_size=config["talker_config"]["hidden_size"], head_dim=16, num_attention_heads=4,
              num_key_value_heads=1)  # as wide as the talker: no input projection
    return [Qwen3TTS.from_pretrained(QWEN), Qwen3TTS.from_seed(config, 5)]


def csm_models() -> list[Csm]:
    config = copy.deepcopy(json.loads((CSM / "config.json").read_text()))
    config.update(num_codebooks=20)
    config["depth_decoder_config"].update(num_codebooks=20, hidden_size=32, num_attention_heads=4,
                                          num_key_value_heads=1, head_dim=16)
    return [Csm.from_pretrained(CSM), Csm.from_seed(config, seed=3)]


def test_the_code_predictors_frame_pass_equals_the_generic_pass(monkeypatch):
    for model in qwen_models():
        for b in BATCHES:
            (got, got_cache), (want, want_cache) = both_passes(monkeypatch, qwen_run(model, b))
            assert torch.equal(got.codes, want.codes) and torch.equal(got.logprobs, want.logprobs)
            assert got.logits is not None and want.logits is not None and torch.equal(got.logits, want.logits)
            assert_same_cache(got_cache, want_cache, b)


def test_the_depth_decoders_frame_pass_equals_the_generic_pass(monkeypatch):
    for model in csm_models():
        for b in BATCHES:
            (got, got_cache), (want, want_cache) = both_passes(monkeypatch, csm_run(model, b))
            assert all(torch.equal(x, y) for x, y in zip(got, want))  # codes, raw logits, logprobs
            assert_same_cache(got_cache, want_cache, b)


def test_the_frame_pass_serves_float32_on_the_cpu_without_autograd():
    model = Csm.from_pretrained(CSM).depth_decoder.model
    x = torch.zeros(2, 3)
    with torch.no_grad():
        assert frame_stack.fits(model, x)
        assert not frame_stack.fits(model, x.to(torch.bfloat16))
    assert not frame_stack.fits(model, x)  # autograd on: the generic pass (differentiable)


def test_the_kept_pass_serves_frame_after_frame_and_is_made_anew_when_a_weight_changes(monkeypatch):
    model = Qwen3TTS.from_pretrained(QWEN)
    predictor = model.talker.code_predictor.model
    for b in (1, 3):
        for _ in range(2):  # the second frame reads the kept pass's buffers
            (got, _), (want, _) = both_passes(monkeypatch, qwen_run(model, b))
            assert torch.equal(got.codes, want.codes) and torch.equal(got.logprobs, want.logprobs)
    first = kept_stack(predictor, 3, model.talker.code_predictor.cfg.num_code_groups)
    with torch.no_grad():
        predictor.layers[0].self_attn.qkv_proj.weight.mul_(1.5)
    (got, _), (want, _) = both_passes(monkeypatch, qwen_run(model, 3))
    assert torch.equal(got.codes, want.codes) and torch.equal(got.logprobs, want.logprobs)
    assert kept_stack(predictor, 3, model.talker.code_predictor.cfg.num_code_groups) is not first


def test_the_frame_pass_reads_each_norms_own_eps_at_each_step(monkeypatch):
    """q_norm and k_norm of different eps are each their own norm, and eps written after the kept pass was made (not
    a parameter: no remake) are the ones a step reads, as in the generic pass."""
    model = Qwen3TTS.from_pretrained(QWEN)
    predictor = model.talker.code_predictor.model
    (got, _), (want, _) = both_passes(monkeypatch, qwen_run(model, 3))  # the kept pass made
    assert torch.equal(got.logprobs, want.logprobs)
    for eps_q, eps_k, eps in ((1e-6, 0.5, 1e-6), (0.25, 0.25, 0.3)):
        for layer in predictor.layers:
            layer.self_attn.q_norm.eps, layer.self_attn.k_norm.eps = eps_q, eps_k
            layer.input_layernorm.eps = layer.post_attention_layernorm.eps = eps
        predictor.norm.eps = eps
        (got, _), (want, _) = both_passes(monkeypatch, qwen_run(model, 3))
        assert torch.equal(got.logits, want.logits) and torch.equal(got.logprobs, want.logprobs)
