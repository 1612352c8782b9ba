"""Parity with the transformers 5.0.0 reference (`reference.npz`): RoPE, rows, teacher-forced backbone and depth
decoder, and the greedy generation loop. Floats within atol = rtol = 1e-4; codes, ids and stop frames exact."""

from __future__ import annotations

import pytest
import torch

from v2.models.csm.generate import generate
from v2.models.csm.prompt import embed_layout, layout
from v2.models.rope import inv_freq

from .conftest import KEYS, np_close, turns_of


def test_llama3_rope_frequencies(cmodel, cref):
    cfg = cmodel.cfg
    cpu = torch.device("cpu")
    np_close(inv_freq(cfg.backbone.head_dim, cfg.backbone.rope_theta, cfg.backbone_rope, cpu), cref["rope_inv_freq_backbone"])
    np_close(inv_freq(cfg.depth.head_dim, cfg.depth.rope_theta, cfg.depth_rope, cpu), cref["rope_inv_freq_depth"])
    assert cfg.backbone_rope is not None and cfg.depth_rope is not None  # scaled: differs from the plain table
    assert not torch.allclose(inv_freq(cfg.backbone.head_dim, cfg.backbone.rope_theta, None, cpu),
                              torch.from_numpy(cref["rope_inv_freq_backbone"]))


def test_audio_eos_frame_row(cmodel, cref):
    np_close(cmodel.embed_frame(cmodel.eos_frame()), cref["audio_eos_frame_embed"])


@pytest.mark.parametrize("key", KEYS)
def test_prompt_ids_and_rows(cmodel, cref, cmeta, key):
    lay = layout(cmodel.cfg, turns_of(cmeta, cref, key))
    assert list(lay.ids) == cref[f"{key}_input_ids"].tolist()
    p = next(x for x in cmeta["prompts"] if x["key"] == key)
    assert lay.rows == p["rows"] and lay.frames.shape[0] == p["audio_rows"]
    np_close(embed_layout(cmodel, lay), cref[f"{key}_prompt_embeds"])


@pytest.mark.parametrize("key", KEYS)
def test_teacher_forced_backbone_and_depth_decoder(cmodel, cref, key):
    codes = torch.from_numpy(cref[f"{key}_tf_codes"])
    frames = cmodel.embed_frame(codes)
    np_close(frames, cref[f"{key}_tf_frame_embeds"])
    prompt = torch.from_numpy(cref[f"{key}_prompt_embeds"])
    t = prompt.shape[0]
    inputs: list[torch.Tensor] = []
    with torch.no_grad():
        hidden, logits = cmodel.backbone_teacher(torch.cat([prompt, frames])[None], layer_inputs=inputs)
        np_close(torch.stack([x[0] for x in inputs]), cref[f"{key}_tf_layer_inputs"])
        np_close(hidden[0], cref[f"{key}_tf_hidden"])
        np_close(logits[0], cref[f"{key}_tf_logits"])
        rows, depth_hidden, depth_logits = cmodel.depth_teacher(hidden[0, t - 1 : t - 1 + codes.shape[0]], codes)
    np_close(rows, cref[f"{key}_tf_depth_inputs"])
    np_close(depth_hidden, cref[f"{key}_tf_depth_hidden"])
    np_close(depth_logits, cref[f"{key}_tf_depth_logits"])


@pytest.mark.parametrize("key", KEYS)
def test_greedy_generation(cmodel, cref, cmeta, key):
    rows = torch.from_numpy(cref[f"{key}_prompt_embeds"])
    g = generate(cmodel, rows, max_new_tokens=8)
    p = next(x for x in cmeta["prompts"] if x["key"] == key)
    assert torch.equal(g.codes, torch.from_numpy(cref[f"{key}_gen_codes"]))
    assert g.stop_frame == int(cref[f"{key}_gen_stop_frame"])
    assert g.codes.shape[0] == p["generated_frames"] and g.audio_frames == p["decoded_frames"]
    np_close(g.hidden, cref[f"{key}_gen_hidden"])
    np_close(g.c0_logits, cref[f"{key}_gen_c0_logits"])
    np_close(g.logprobs, cref[f"{key}_gen_logprobs"])  # greedy: log_softmax of the raw logits at temperature 1
    if f"{key}_gen_depth_logits" in cref:
        np_close(g.depth_logits, cref[f"{key}_gen_depth_logits"])
    if g.stop_frame >= 0:  # the stop frame stays in the codes, its codebooks 0..N-2 are all codebook_eos
        assert g.codes[g.stop_frame].tolist() == p["stop_frame_codes"]
        assert bool(cmodel.is_stop(g.codes[g.stop_frame])) and not bool(cmodel.is_stop(g.codes[: g.stop_frame]).any())


def test_budget_counts_frames(cmodel, cref):
    rows = torch.from_numpy(cref["s1_prompt_embeds"])  # stops at frame 6 with a budget of 8
    short = generate(cmodel, rows, max_new_tokens=3)
    assert short.codes.shape[0] == 3 and short.stop_frame == -1 and short.audio_frames == 3
    assert torch.equal(short.codes, torch.from_numpy(cref["s1_gen_codes"][:3]))
    exact = generate(cmodel, rows, max_new_tokens=7)
    assert exact.stop_frame == 6 and exact.codes.shape[0] == 7 and exact.audio_frames == 6
