"""The Qwen3-TTS model layer reproduces every array of the reference (float32, CPU) except the codec's.

Floats: atol = rtol = 1e-4; codes, ids, masks and lengths exact (tests/fixtures/qwen3_tts_tiny/README.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.generate import generate, generate_batch, pad_left, pad_trailing
from v2.models.qwen3_tts.prompt import build
from v2.models.mel import mel_filterbank

from .conftest import KEYS, spec_of

TOL = dict(atol=1e-4, rtol=1e-4)
GREEDY = Qwen3TTSSampling.greedy()
N = 5  # forced frames in the reference


def close(actual: torch.Tensor, expected: np.ndarray) -> None:
    torch.testing.assert_close(actual.detach().float().cpu(), torch.from_numpy(expected).float(), **TOL)


def exact(actual: torch.Tensor, expected: np.ndarray) -> None:
    assert torch.equal(actual.cpu(), torch.from_numpy(expected)), (actual, expected)


def rows(ref, key):
    return torch.from_numpy(ref[f"{key}_prompt_embeds"]), torch.from_numpy(ref[f"{key}_trailing_text"])


def test_special_text_rows(qmodel, qref):
    bos, eos, pad = qmodel.special_text_rows()
    close(bos, qref["tts_bos_embed"])
    close(eos, qref["tts_eos_embed"])
    close(pad, qref["tts_pad_embed"])


@pytest.mark.parametrize("key", KEYS)
def test_prompt_rows_and_trailing_text(qmodel, qref, qmeta, key):
    spec = spec_of(qmeta, qref, key)
    prompt, trailing = build(qmodel, spec, speaker=torch.from_numpy(qref["spk_embedding"]),
                             ref_codes=torch.from_numpy(qref["icl_ref_codes"]) if spec.icl else None)
    close(prompt, qref[f"{key}_prompt_embeds"])
    close(trailing, qref[f"{key}_trailing_text"])


@pytest.mark.parametrize("key", KEYS)
def test_prefill_layer_inputs_hidden_and_logits(qmodel, qref, key):
    prompt, _ = rows(qref, key)
    layer_inputs: list[torch.Tensor] = []
    with torch.no_grad():
        hidden = qmodel.talker.model(prompt[None], layer_inputs=layer_inputs)[0]
    close(torch.stack([x[0] for x in layer_inputs]), qref[f"{key}_prefill_layer_inputs"])
    close(hidden, qref[f"{key}_prefill_hidden"])
    close(qmodel.group0_logits(hidden[-1]), qref[f"{key}_prefill_logits0"])
    # the cached prefill (the runtime's entry point) gives the same
    cache = qmodel.allocate_kv(1, prompt.shape[0])
    t = prompt.shape[0]
    with torch.no_grad():
        h, logits = qmodel.prefill(prompt[None], cache, torch.tensor([0]), torch.arange(t)[None],
                                   torch.ones(1, t, dtype=torch.bool), torch.tensor([t - 1]), t)
    close(h[0], qref[f"{key}_prefill_hidden"][-1])
    close(logits[0], qref[f"{key}_prefill_logits0"])


@pytest.mark.parametrize("key", KEYS)
def test_greedy_forced_continue(qmodel, qref, key):
    prompt, trailing = rows(qref, key)
    (gen,) = generate_batch(qmodel, [prompt], [trailing], [GREEDY], [0], max_new_tokens=N + 1, min_new_tokens=N + 1)
    exact(gen.raw_codes, qref[f"{key}_gen_codes"])
    close(gen.hidden[:N], qref[f"{key}_gen_hidden"])
    close(gen.logits0[:N], qref[f"{key}_gen_logits0"])
    close(gen.rows, qref[f"{key}_gen_step_embeds"])
    if f"{key}_gen_cp_logits" in qref:
        close(gen.cp_logits, qref[f"{key}_gen_cp_logits"])
    assert not gen.stopped and gen.codes.shape[0] == N  # the last choice's frame is never completed


@pytest.mark.parametrize("key", KEYS)
def test_greedy_with_repetition_penalty(qmodel, qref, key):
    prompt, trailing = rows(qref, key)
    (gen,) = generate_batch(qmodel, [prompt], [trailing], [Qwen3TTSSampling.greedy(1.05)], [0],
                            max_new_tokens=N + 1, min_new_tokens=N + 1)
    exact(gen.raw_codes, qref[f"{key}_rep_codes"])
    close(gen.logits0[:N], qref[f"{key}_rep_logits0"])


@pytest.mark.parametrize("key", KEYS)
def test_free_run_stops_as_the_reference(qmodel, qref, qmeta, key):
    prompt, trailing = rows(qref, key)
    (gen,) = generate_batch(qmodel, [prompt], [trailing], [GREEDY], [0], max_new_tokens=qmeta["free_frames"])
    exact(gen.codes, qref[f"{key}_free_codes"])
    close(gen.logits0, qref[f"{key}_free_logits0"])
    stop = qmeta["natural_stops"][key]
    assert gen.stopped == stop["stopped_by_eos"] and gen.codes.shape[0] == stop["frames"]
    exact(generate(qmodel, prompt, trailing, max_new_tokens=qmeta["free_frames"], sampling=GREEDY),
          qref[f"{key}_free_codes"])


@pytest.mark.parametrize("key", ("cv", "xv"))
def test_code_predictor_teacher_forcing(qmodel, qref, key):
    hidden = torch.from_numpy(qref[f"{key}_prefill_hidden"][-1:])
    codes = torch.from_numpy(qref[f"{key}_cp_teacher_codes"])[None]
    with torch.no_grad():
        inputs, logits = qmodel.code_predictor_teacher(hidden, codes)
    close(inputs[0], qref[f"{key}_cp_teacher_inputs"])
    close(logits[0], qref[f"{key}_cp_teacher_logits"])


def test_speaker_encoder(qmodel, qref):
    enc = qmodel.speaker_encoder
    wav = torch.from_numpy(qref["spk_ref_wav"])
    close(mel_filterbank(24000, 1024, 128, 0.0, 12000.0), qref["spk_mel_filters"])
    mel = enc.mel(wav[None])
    close(mel[0], qref["spk_mel"])
    trace: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        emb = enc(torch.from_numpy(qref["spk_mel"])[None], trace)
    for i in range(4):
        close(trace[f"block{i}"][0], qref[f"spk_block{i}"])
    close(trace["mfa"][0], qref["spk_mfa"])
    close(trace["asp"][0], qref["spk_asp"])
    close(emb[0], qref["spk_embedding"])
    close(qmodel.speaker_embedding(wav), qref["spk_embedding"])


def test_batch_left_padded(qmodel, qref, qmeta):
    keys = qmeta["batch"]
    prompts = [torch.from_numpy(qref[f"{k}_prompt_embeds"]) for k in keys]
    trailing = [torch.from_numpy(qref[f"{k}_trailing_text"]) for k in keys]
    padded, mask = pad_left(prompts)
    close(padded, qref["batch_prompt_embeds"])
    exact(mask, qref["batch_attention_mask"])
    close(pad_trailing(trailing, qmodel.special_text_rows()[2]), qref["batch_trailing_text"])
    # prefill of the padded batch: valid rows as the reference, padded rows left out (stored as 0)
    b, t = mask.shape
    cache = qmodel.allocate_kv(b, t)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        out = qmodel.talker.model.forward_cached(padded, cache, torch.arange(b), positions, mask.bool(), t)
    close(out * mask[..., None], qref["batch_prefill_hidden"])

    gens = generate_batch(qmodel, prompts, trailing, [GREEDY] * b, [0] * b, max_new_tokens=N + 1,
                          min_new_tokens=N + 1)
    exact(torch.stack([g.raw_codes for g in gens]), qref["batch_gen_codes"])
    close(torch.stack([g.logits0[:N] for g in gens]), qref["batch_gen_logits0"])
    close(torch.stack([g.cp_logits for g in gens]), qref["batch_gen_cp_logits"])
    for g, k in zip(gens, keys):
        exact(g.raw_codes, qref[f"{k}_gen_codes"])

    free = generate_batch(qmodel, prompts, trailing, [GREEDY] * b, [0] * b, max_new_tokens=qmeta["free_frames"])
    exact(torch.tensor([g.codes.shape[0] for g in free]), qref["batch_free_lengths"])
    exact(torch.stack([g.raw_codes for g in free]), qref["batch_free_codes_raw"])
    for g, k in zip(free, keys):
        exact(g.codes, qref[f"{k}_free_codes"])
