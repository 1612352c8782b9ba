"""On a GPU: the Qwen3-TTS model layer (its decode rows through the Triton kernels) reproduces the fixture in
float32 within 1e-3, rows batched equal each row alone, and the RL recompute (torch forms, differentiable)
equals what the sampler recorded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from v2.families.qwen3_tts.recompute import logprobs
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.generate import generate_batch
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.sampling_settings import HeadSampling

pytestmark = pytest.mark.gpu
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_tts_tiny"
KEYS = ("cv", "cvd", "vd", "xv", "icl", "icln")
TOL = dict(atol=1e-3, rtol=1e-3)
GREEDY = Qwen3TTSSampling.greedy()
N = 5  # forced frames in the reference


@pytest.fixture(scope="module")
def ref() -> dict[str, np.ndarray]:
    with np.load(FIXTURE / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def model() -> Qwen3TTS:
    return Qwen3TTS.from_pretrained(FIXTURE / "checkpoint", device="cuda")


def rows(ref: dict[str, np.ndarray], key: str) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.from_numpy(ref[f"{key}_prompt_embeds"]).cuda(), torch.from_numpy(ref[f"{key}_trailing_text"]).cuda())


def close(actual: torch.Tensor, expected: np.ndarray) -> None:
    torch.testing.assert_close(actual.detach().float().cpu(), torch.from_numpy(expected).float(), **TOL)


@pytest.mark.parametrize("key", KEYS)
def test_fp32_prefill_and_forced_frames_match_the_fixture(model, ref, key):
    prompt, trailing = rows(ref, key)
    t = prompt.shape[0]
    cache = model.allocate_kv(1, t)
    with torch.no_grad():
        h, logits = model.prefill(prompt[None], cache, torch.tensor([0], device="cuda"),
                                  torch.arange(t, device="cuda")[None], torch.ones(1, t, dtype=torch.bool, device="cuda"),
                                  torch.tensor([t - 1], device="cuda"), t)
    close(h[0], ref[f"{key}_prefill_hidden"][-1])
    close(logits[0], ref[f"{key}_prefill_logits0"])
    (gen,) = generate_batch(model, [prompt], [trailing], [GREEDY], [0], max_new_tokens=N + 1, min_new_tokens=N + 1)
    assert torch.equal(gen.raw_codes.cpu(), torch.from_numpy(ref[f"{key}_gen_codes"]))
    close(gen.hidden[:N], ref[f"{key}_gen_hidden"])
    close(gen.logits0[:N], ref[f"{key}_gen_logits0"])
    close(gen.rows, ref[f"{key}_gen_step_embeds"])
    if f"{key}_gen_cp_logits" in ref:
        close(gen.cp_logits, ref[f"{key}_gen_cp_logits"])


def test_fp32_free_runs_stop_as_the_reference(model, ref):
    meta = json.loads((FIXTURE / "meta.json").read_text())
    for key in KEYS:
        prompt, trailing = rows(ref, key)
        (gen,) = generate_batch(model, [prompt], [trailing], [GREEDY], [0], max_new_tokens=meta["free_frames"])
        assert torch.equal(gen.codes.cpu(), torch.from_numpy(ref[f"{key}_free_codes"])), key
        stop = meta["natural_stops"][key]
        assert gen.stopped == stop["stopped_by_eos"] and gen.codes.shape[0] == stop["frames"], key


def test_sampled_rows_batched_equal_each_alone(model, ref):
    keys = KEYS[:4]
    prompts, trailing = zip(*(rows(ref, k) for k in keys))
    mixed = [Qwen3TTSSampling(), Qwen3TTSSampling.greedy(1.05),
             Qwen3TTSSampling(HeadSampling(1.2, 0, 0.8), HeadSampling(0.7, 20, 1.0)), Qwen3TTSSampling()]
    seeds = [11, 12, 13, 11]
    together = generate_batch(model, list(prompts), list(trailing), mixed, seeds, max_new_tokens=10)
    for i, key in enumerate(keys):
        (alone,) = generate_batch(model, [prompts[i]], [trailing[i]], [mixed[i]], [seeds[i]], max_new_tokens=10)
        assert torch.equal(alone.codes, together[i].codes), key
        f = alone.codes.shape[0]
        torch.testing.assert_close(alone.logprobs[:f], together[i].logprobs[:f], atol=1e-4, rtol=0)


def test_recompute_on_cuda_equals_the_sampled_logprobs_and_backprops(ref):
    model = Qwen3TTS.from_pretrained(FIXTURE / "checkpoint", device="cuda")  # its own: gradients are turned on
    s = Qwen3TTSSampling()
    prompt, trailing = rows(ref, "vd")
    (gen,) = generate_batch(model, [prompt], [trailing], [s], [7], max_new_tokens=8)
    f = gen.codes.shape[0]
    recorded = gen.logprobs[: f + int(gen.stopped)].clone()
    recorded[f:, 1:] = 0
    model.requires_grad_(True)
    out = logprobs(model, prompt, trailing, gen.codes, s, final_stop=gen.stopped)
    torch.testing.assert_close(out.detach().cpu(), recorded.cpu(), **TOL)
    out.sum().backward()
    grad = model.talker.model.layers[0].self_attn.qkv_proj.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
