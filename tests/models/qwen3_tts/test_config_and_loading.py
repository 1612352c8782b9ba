"""Qwen3-TTS config parsing, strict loading, seeded init, and a model of other sizes built from its config."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from v2.models.config import ConfigError
from v2.models.qwen3_tts.config import GenerationDefaults, Qwen3TTSConfig, Qwen3TTSSampling
from v2.models.qwen3_tts.generate import generate_batch
from v2.models.qwen3_tts.loader import release_layout
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.models.weights import CheckpointError
from v2.sampling_settings import HeadSampling

from .conftest import CHECKPOINT


def test_config_reads_every_structural_field(qconfig):
    cfg = Qwen3TTSConfig.from_dict(qconfig)
    t, c = cfg.talker, cfg.code_predictor
    assert (t.hidden_size, t.decoder.num_layers, t.decoder.num_heads, t.decoder.num_kv_heads, t.decoder.head_dim) == (64, 2, 4, 2, 128)
    assert (t.vocab_size, t.text_vocab_size, t.text_hidden_size, t.decoder.rope_theta) == (3072, 151936, 48, 1e6)
    assert (c.hidden_size, c.decoder.head_dim, c.codebook_size, c.num_code_groups) == (32, 32, 2048, 16)
    assert cfg.codec.eos == 2150 and cfg.codec.pad == 2148 and cfg.codec.bos == 2149
    assert cfg.text.tts_pad == 151671 and cfg.speakers["vivian"] == 3065 and cfg.speaker_dialect["eric"] == "sichuan_dialect"
    assert cfg.speaker_dialect["vivian"] is None and cfg.languages["german"] == 2053
    assert cfg.control_ids == range(2048, 3072) and cfg.model_type == "base" and cfg.model_size == "1b7"
    assert cfg.speaker_encoder is not None and cfg.speaker_encoder.channels == (32, 32, 32, 32, 96)


@pytest.mark.parametrize("path, value, field", [
    ("talker_config.hidden_size", None, "talker_config.hidden_size"),
    ("talker_config.head_dim", 7, "talker_config.head_dim"),
    ("talker_config.num_key_value_heads", 3, "talker_config.num_attention_heads"),
    ("talker_config.code_predictor_config.num_code_groups", 8, "code_predictor_config.num_code_groups"),
    ("talker_config.rope_scaling", {"rope_type": "linear", "factor": 2.0}, "talker_config.rope_scaling"),
    ("talker_config.attention_bias", True, "talker_config.attention_bias"),
    ("talker_config.codec_eos_token_id", 5000, "eos"),
    ("talker_config.spk_is_dialect", {"eric": "klingon"}, "talker_config.spk_is_dialect.eric"),
    ("talker_config.spk_id", {"eric": 99999}, "talker_config.spk_id.eric"),
    ("speaker_encoder_config.enc_channels", [32, 32, 32, 32, 64], "speaker_encoder_config.enc_channels"),
    ("speaker_encoder_config.enc_dim", 32, "speaker_encoder_config.enc_dim"),
    ("tts_model_type", None, "tts_model_type"),
])
def test_bad_config_fields_are_named(qconfig, path, value, field):
    d = copy.deepcopy(qconfig)
    node = d
    *parents, leaf = path.split(".")
    for p in parents:
        node = node[p]
    if value is None:
        del node[leaf]
    else:
        node[leaf] = value
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        Qwen3TTSConfig.from_dict(d)


def test_generation_defaults_merge_explicit_over_file_over_hard():
    file = json.loads((CHECKPOINT / "generation_config.json").read_text())
    d = GenerationDefaults.from_dict(file)
    assert d.max_new_tokens == 8192 and d.sampling == Qwen3TTSSampling()
    assert GenerationDefaults.from_dict({}).max_new_tokens == 2048
    e = GenerationDefaults.from_dict(file, do_sample=False, subtalker_top_k=7, max_new_tokens=12)
    assert e.sampling.talker == HeadSampling(0.0, 0, 1.0) and e.sampling.subtalker == HeadSampling(0.9, 7, 1.0)
    assert e.max_new_tokens == 12 and e.sampling.repetition_penalty == 1.05
    with pytest.raises(ValueError, match="unknown"):
        GenerationDefaults.from_dict(file, beams=2)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        GenerationDefaults.from_dict({"max_new_tokens": 0})


def test_bf16_weights_load_exactly_into_float32(qmodel):
    from safetensors import safe_open

    with safe_open(str(CHECKPOINT / "model.safetensors"), "pt") as f:
        q = f.get_tensor("talker.model.layers.1.self_attn.k_proj.weight")
        emb = f.get_tensor("talker.code_predictor.model.codec_embedding.14.weight")
    fused = qmodel.talker.model.layers[1].self_attn.qkv_proj.weight
    d = qmodel.cfg.talker.decoder
    assert torch.equal(fused[d.num_heads * d.head_dim: (d.num_heads + d.num_kv_heads) * d.head_dim], q.float())
    assert torch.equal(qmodel.talker.code_predictor.model.codec_embedding[14].weight, emb.float())
    assert qmodel.dtype == torch.float32 and not any(p.requires_grad for p in qmodel.parameters())


def _copy_checkpoint(tmp: Path, drop: str | None = None, add: str | None = None, reshape: str | None = None,
                     config: dict | None = None) -> Path:
    from safetensors.torch import load_file

    sd = load_file(str(CHECKPOINT / "model.safetensors"))
    if drop:
        del sd[drop]
    if add:
        sd[add] = torch.zeros(3)
    if reshape:
        sd[reshape] = sd[reshape][:-1].clone()
    save_file(sd, str(tmp / "model.safetensors"))
    (tmp / "config.json").write_text(json.dumps(config or json.loads((CHECKPOINT / "config.json").read_text())))
    return tmp


def test_loading_is_strict_and_names_every_bad_key(tmp_path, qconfig):
    bad = _copy_checkpoint(tmp_path, drop="talker.codec_head.weight", add="talker.extra.weight",
                           reshape="talker.model.layers.0.self_attn.q_norm.weight")
    with pytest.raises(CheckpointError) as e:
        Qwen3TTS.from_pretrained(bad)
    msg = str(e.value)
    assert "missing keys (1): talker.codec_head.weight" in msg and "talker.extra.weight" in msg
    assert "talker.model.layers.0.self_attn.q_norm.weight: checkpoint [127] vs model [128]" in msg


def test_a_model_without_speaker_encoder_refuses_its_tensors(tmp_path, qconfig):
    d = copy.deepcopy(qconfig)
    d["tts_model_type"] = "custom_voice"
    with pytest.raises(CheckpointError, match="unexpected keys.*speaker_encoder.asp.conv.bias"):
        Qwen3TTS.from_pretrained(_copy_checkpoint(tmp_path, config=d))


def other_sizes(base: dict) -> dict:
    """Another shape of the same schema: widths, depths, heads, head_dim, RoPE bases, groups all changed;
    equal talker / code-predictor widths (so no projection tensors)."""
    d = copy.deepcopy(base)
    t = d["talker_config"]
    t.update(hidden_size=40, num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=3, head_dim=16,
             intermediate_size=72, rope_theta=10000, text_hidden_size=24, num_code_groups=5)
    t["code_predictor_config"].update(hidden_size=40, num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, head_dim=24, intermediate_size=56, rope_theta=5000,
                                      num_code_groups=5)
    d["speaker_encoder_config"].update(enc_channels=[16, 16, 16, 32], enc_kernel_sizes=[3, 3, 3, 1],
                                       enc_dilations=[1, 2, 3, 1], enc_res2net_scale=4, enc_se_channels=8,
                                       enc_attention_channels=8, enc_dim=40, mel_dim=80)
    return d


def test_other_sizes_build_save_load_and_generate(tmp_path, qconfig):
    d = other_sizes(qconfig)
    model = Qwen3TTS.from_seed(d, 7)
    again = Qwen3TTS.from_seed(d, 7)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    params = dict(model.named_parameters())
    state = {k: params[p.param][p.start: p.start + p.shape[0]].contiguous() for k, p in release_layout(model).items()}
    assert not any("small_to_mtp_projection" in k for k in state) and len(model.talker.code_predictor.lm_head) == 4
    assert state["talker.model.layers.2.self_attn.q_proj.weight"].shape == (96, 40)
    assert state["talker.code_predictor.model.layers.0.self_attn.k_proj.weight"].shape == (24, 40)
    save_file({k: v.to(torch.bfloat16) for k, v in state.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(d))
    loaded = Qwen3TTS.from_pretrained(tmp_path)
    for k, v in state.items():
        p = release_layout(loaded)[k]
        assert torch.equal(dict(loaded.named_parameters())[p.param][p.start: p.start + p.shape[0]], v.bfloat16().float())

    # the cached loop equals a full recompute at these sizes: the fed rows through a cache-free pass
    prompt = loaded.embed_text(torch.arange(100, 112))
    trailing = loaded.embed_text(torch.arange(200, 203))
    (gen,) = generate_batch(loaded, [prompt], [trailing], [Qwen3TTSSampling()], [3], max_new_tokens=7, min_new_tokens=7)
    assert gen.raw_codes.shape == (6, 5) and gen.cp_logits.shape == (6, 4, 2048)
    with torch.no_grad():
        full = loaded.talker.model(torch.cat([prompt, gen.rows])[None])[0]
    torch.testing.assert_close(full[prompt.shape[0] - 1:], gen.hidden, atol=1e-5, rtol=1e-5)
    # the code predictor's per-frame cache equals its teacher-forced pass on the codes it chose
    with torch.no_grad():
        _, teacher = loaded.code_predictor_teacher(gen.hidden[:-1], gen.raw_codes)
    torch.testing.assert_close(teacher, gen.cp_logits, atol=1e-5, rtol=1e-5)
    wav = torch.sin(torch.arange(4800) / 7.0) * 0.3
    assert loaded.speaker_embedding(wav).shape == (40,)
