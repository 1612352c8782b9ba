"""The model reproduces the reference implementation's arrays (float32, CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from v2.models.moss_tts_local.generate import generate, generate_batch
from v2.sampling_settings import SamplingSettings

TOL = dict(atol=1e-4, rtol=1e-4)
GREEDY = SamplingSettings.uniform(0.0)
GREEDY_REP = SamplingSettings.uniform(0.0, repetition_penalty=1.3)
PROMPTS = ("p1", "p2")


def close(actual: torch.Tensor, expected: np.ndarray) -> None:
    torch.testing.assert_close(actual.float(), torch.from_numpy(expected).float(), **TOL)


def rows(ref, p: str) -> torch.Tensor:
    return torch.from_numpy(ref[f"{p}_input_ids"])


@pytest.mark.parametrize("p", PROMPTS)
def test_row_embeddings(ref_model, ref, p):
    close(ref_model.embed_rows(rows(ref, p)), ref[f"{p}_inputs_embeds"])


@pytest.mark.parametrize("p", PROMPTS)
def test_backbone_layer_inputs_and_hidden(ref_model, ref, p):
    layer_inputs: list[torch.Tensor] = []
    with torch.no_grad():
        hidden = ref_model.transformer(ref_model.embed_rows(rows(ref, p))[None], layer_inputs=layer_inputs)[0]
    close(torch.stack([x[0] for x in layer_inputs]), ref[f"{p}_backbone_layer_inputs"])
    close(hidden, ref[f"{p}_backbone_hidden"])
    close(ref_model.prompt_hidden(rows(ref, p)), ref[f"{p}_backbone_hidden"])


@pytest.mark.parametrize("p", PROMPTS)
def test_local_transformer_teacher_forced(ref_model, ref, p):
    with torch.no_grad():
        out = ref_model.local_transformer(torch.from_numpy(ref[f"{p}_lt_inputs"])[None])[0]
        close(out, ref[f"{p}_lt_hidden"])
        hidden = torch.from_numpy(ref[f"{p}_backbone_hidden"][-1:])
        stop, codes = ref_model.frame_logits(hidden, torch.from_numpy(ref[f"{p}_lt_teacher_codes"])[None])
    close(stop[0], ref[f"{p}_lt_stop_logits"])
    close(codes[0], ref[f"{p}_lt_audio_logits"])


@pytest.mark.parametrize("p", PROMPTS)
def test_greedy_frames_forced_continue(ref_model, ref, p):
    (gen,) = generate_batch(ref_model, [rows(ref, p)], [GREEDY], [0], max_frames=8, min_frames=8)
    assert torch.equal(gen.codes, torch.from_numpy(ref[f"{p}_gen_codes"]))
    close(gen.hidden, ref[f"{p}_gen_backbone_last"])
    close(gen.stop_logits, ref[f"{p}_gen_stop_logits"])
    close(gen.code_logits, ref[f"{p}_gen_audio_logits"])
    codes = generate(ref_model, rows(ref, p), max_frames=8, min_frames=8, temperature=0.0)
    assert torch.equal(codes, torch.from_numpy(ref[f"{p}_gen_codes"]))


@pytest.mark.parametrize("p", PROMPTS)
def test_greedy_frames_with_repetition_penalty(ref_model, ref, p):
    (gen,) = generate_batch(ref_model, [rows(ref, p)], [GREEDY_REP], [0], max_frames=8, min_frames=8)
    assert torch.equal(gen.codes, torch.from_numpy(ref[f"{p}_gen_rep1p3_codes"]))
    close(gen.code_logits, ref[f"{p}_gen_rep1p3_audio_logits"])


@pytest.mark.parametrize("p", PROMPTS)
def test_free_running_greedy_stops(ref_model, ref, p):
    (gen,) = generate_batch(ref_model, [rows(ref, p)], [GREEDY], [0], max_frames=12)
    expected = torch.from_numpy(ref[f"{p}_free_rows"])
    assert gen.stopped
    assert torch.equal(gen.codes, expected[:, 1:])
    assert bool((expected[:, 0] == ref_model.cfg.ids.audio_assistant_slot).all())
    close(gen.stop_logits, ref[f"{p}_free_stop_logits"])


@pytest.mark.exact
def test_batch_of_both_prompts_equals_each_alone(ref_model, ref):
    prompts = [rows(ref, p) for p in PROMPTS]
    mask = ref["batch_attention_mask"]
    # the reference pads on the left; the batched cached prefill pads on the right: compare valid rows
    t = max(len(p) for p in prompts)
    padded = torch.full((2, t, 13), 1024, dtype=torch.long)
    padded[..., 0] = ref_model.cfg.ids.pad
    valid = torch.zeros(2, t, dtype=torch.bool)
    for i, p in enumerate(prompts):
        padded[i, : len(p)] = p
        valid[i, : len(p)] = True
    cache = ref_model.allocate_kv(2, t)
    with torch.no_grad():
        hidden = ref_model.transformer.forward_cached(ref_model.embed_rows(padded), cache, torch.arange(2),
                                                      torch.arange(t).expand(2, t), valid, t)
    for i in range(2):
        close(hidden[i][valid[i]], ref["batch_backbone_hidden"][i][mask[i]])
    forced = generate_batch(ref_model, prompts, [GREEDY] * 2, [0, 0], max_frames=8, min_frames=8)
    for i, gen in enumerate(forced):
        assert torch.equal(gen.codes, torch.from_numpy(ref["batch_gen_codes"][i]))
        close(gen.stop_logits, ref["batch_gen_stop_logits"][i])
        close(gen.code_logits, ref["batch_gen_audio_logits"][i])
    free = generate_batch(ref_model, prompts, [GREEDY] * 2, [0, 0], max_frames=12)
    for i, gen in enumerate(free):
        expected = ref["batch_free_rows"][i]
        emitted = expected[expected[:, 0] == ref_model.cfg.ids.audio_assistant_slot]
        assert torch.equal(gen.codes, torch.from_numpy(emitted[:, 1:]))
        assert gen.stopped
        close(gen.stop_logits, ref["batch_free_stop_logits"][i][: len(gen.stop_logits)])
    assert [len(g.codes) for g in free] == [2, 10]
