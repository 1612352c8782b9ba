"""A CSM of other sizes built from its config alone (widths, depths, heads, head_dim, 5 codebooks of 37 ids,
another text vocab and special ids, other RoPE settings): saved in release names as bf16 and loaded back
exactly; the loop runs, equals its one-pass recompute, batched equals alone, and the stop rule reads N."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from v2.models.csm.config import CsmConfig, CsmSampling
from v2.models.csm.generate import audio_frames, generate_batch
from v2.models.csm.loader import release_layout
from v2.models.csm.model import Csm
from v2.models.csm.prompt import Turn, prompt_rows
from v2.sampling_settings import HeadSampling

SAMPLED = CsmSampling(HeadSampling(0.9, 10, 1.0), HeadSampling(1.1, 0, 0.9))


@pytest.fixture(scope="module")
def other_model(other_config) -> Csm:
    return Csm.from_seed(other_config, seed=4)


def prompts(model: Csm) -> list[torch.Tensor]:
    frames = torch.randint(0, 32, (3, model.num_codebooks), generator=torch.Generator().manual_seed(0))
    return [prompt_rows(model, [Turn("0", text_ids=(5, 6, 7))]),
            prompt_rows(model, [Turn("1", text_ids=(8, 9, 10, 11, 12), audio=frames), Turn("0", text_ids=(13,))])]


def test_sizes_come_from_the_config(other_model, other_config):
    cfg = other_model.cfg
    assert cfg.num_codebooks == 5 and cfg.depth_rope is None and cfg.backbone_rope is not None
    assert other_model.depth_decoder.codebooks_head.weight.shape == (4, 24, 37)
    assert other_model.backbone_model.embed_tokens.embed_audio_tokens.weight.shape == (5 * 37, 40)
    assert other_model.lm_head.weight.shape == (37, 40) and other_model.embed_text_tokens.weight.shape == (300, 40)
    assert CsmConfig.from_dict(other_config) == cfg


def test_release_names_in_bf16_load_back_exactly(other_model, other_config, tmp_path: Path):
    params = dict(other_model.named_parameters())
    tensors = {key: params[part.param][part.start : part.start + part.shape[0]].to(torch.bfloat16).contiguous()
               for key, part in release_layout(other_model).items()}
    assert "depth_decoder.model.layers.0.self_attn.k_proj.weight" in tensors
    assert not any("qkv_proj" in k or "gate_up_proj" in k for k in tensors)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(other_config))
    loaded = Csm.from_pretrained(tmp_path)
    for name, p in loaded.named_parameters():
        assert torch.equal(p, params[name].to(torch.bfloat16).float()), name


def test_loop_equals_its_recompute_at_other_sizes(other_model):
    rows = prompts(other_model)[1]
    (g,) = generate_batch(other_model, [rows], [SAMPLED], [8], max_new_tokens=6)
    f, t = g.codes.shape[0], rows.shape[0]
    assert g.codes.shape[1] == 5 and bool(((g.codes >= 0) & (g.codes < 37)).all())
    with torch.no_grad():
        hidden, logits = other_model.backbone_teacher(torch.cat([rows, other_model.embed_frame(g.codes[: f - 1])])[None])
        _, _, depth_logits = other_model.depth_teacher(g.hidden, g.codes)
    torch.testing.assert_close(hidden[0, t - 1:], g.hidden, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits[0, t - 1:], g.c0_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(depth_logits, g.depth_logits, atol=1e-4, rtol=1e-4)


@pytest.mark.exact
def test_batched_equals_alone_at_other_sizes(other_model):
    ps = prompts(other_model)
    settings, seeds = [SAMPLED, CsmSampling.greedy()], [1, 2]
    together = generate_batch(other_model, ps, settings, seeds, max_new_tokens=5)
    for i in range(2):
        (alone,) = generate_batch(other_model, [ps[i]], [settings[i]], [seeds[i]], max_new_tokens=5)
        assert torch.equal(alone.codes, together[i].codes) and torch.equal(alone.logprobs, together[i].logprobs)


def test_stop_rule_reads_codebooks_0_to_n_minus_2(other_model, other_config):
    m = other_model
    assert bool(m.is_stop(torch.tensor([0, 0, 0, 0, 7]))) and not bool(m.is_stop(torch.tensor([0, 0, 0, 7, 0])))
    codes = torch.tensor([[1, 2, 3, 4, 5], [0, 0, 0, 0, 9], [0, 0, 0, 0, 0], [3, 3, 3, 3, 3]])
    assert audio_frames(codes, 0) == 2 and audio_frames(codes[:2], 0) == 2
    zeroed = Csm.from_seed(other_config, seed=4)
    with torch.no_grad():  # every logit 0: greedy takes id 0 (codebook_eos) everywhere -> stop at frame 0
        zeroed.lm_head.weight.zero_()
        zeroed.depth_decoder.codebooks_head.weight.zero_()
    (g,) = generate_batch(zeroed, [prompts(zeroed)[0]], [CsmSampling.greedy()], [0], max_new_tokens=4)
    assert g.stop_frame == 0 and g.codes.tolist() == [[0] * 5] and g.audio_frames == 0
