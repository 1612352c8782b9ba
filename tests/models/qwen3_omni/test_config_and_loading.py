"""The config reader (the fixture's transformers 5.x schema and the release's 4.x one), its refusals naming
the field, and loading by the release's key names (every thinker key placed once; one error listing what is
missing and unexpected)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

import pytest
import torch
from safetensors.torch import save_file

from tests.models.qwen3_omni.conftest import CHECKPOINT
from v2.models.config import ConfigError
from v2.models.qwen3_omni.config import Qwen3OmniConfig
from v2.models.qwen3_omni.loader import Checkpoint, load_part, open_checkpoint, release_layout
from v2.models.qwen3_omni.thinker import Thinker
from v2.models.weights import CheckpointError, empty_model, stored_shapes

TEXT = "thinker_config.text_config"


def test_fixture_config(oconfig: dict) -> None:
    cfg = Qwen3OmniConfig.from_dict(oconfig, {"talker_temperature": 0.7})
    text = cfg.thinker.text
    assert (text.decoder.hidden_size, text.decoder.num_layers, text.decoder.head_dim) == (32, 4, 16)
    assert (text.moe.num_experts, text.moe.top_k, text.moe.intermediate_size, text.moe.shared_intermediate_size) \
        == (8, 2, 16, 0)
    assert text.mrope_section == (4, 2, 2) and text.interleaved
    assert cfg.talker is not None and cfg.talker.text.moe.shared_intermediate_size == 32
    assert cfg.talker.text.moe.num_experts == 8 and cfg.talker.speaker_id("Ethan") == 2302
    assert cfg.talker_defaults.temperature == 0.7 and cfg.talker_defaults.top_k == 50
    assert cfg.code2wav is not None and cfg.code2wav.samples_per_frame == 1920
    assert cfg.ids.audio == 151675 and cfg.thinker_eos == 151645


def _release_schema(oconfig: dict) -> dict:
    """The fixture's config in the release's 4.x spelling (rope_theta + rope_scaling), release widths."""
    d = copy.deepcopy(oconfig)
    for p in (d["thinker_config"]["text_config"], d["talker_config"]["text_config"]):
        rope = p.pop("rope_parameters")
        p["rope_theta"] = rope["rope_theta"]
        p["rope_scaling"] = {"mrope_section": [24, 20, 20], "interleaved": True, "type": "default"}
        p["head_dim"] = 128
    d["thinker_config"]["text_config"].update(num_experts=128, num_experts_per_tok=8)
    return d


def test_release_schema(oconfig: dict) -> None:
    cfg = Qwen3OmniConfig.from_dict(_release_schema(oconfig))
    assert cfg.thinker.text.mrope_section == (24, 20, 20) and cfg.thinker.text.decoder.rope_theta == 1e6
    assert cfg.thinker.text.moe.num_experts == 128 and cfg.thinker.text.moe.top_k == 8


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["thinker_config"]["text_config"].pop("num_experts_per_tok"), f"{TEXT}.num_experts_per_tok"),
    (lambda d: d["thinker_config"]["text_config"]["rope_parameters"].update(mrope_section=[4, 2]),
     f"{TEXT}.rope_parameters.mrope_section"),
    (lambda d: d["thinker_config"]["text_config"].update(num_experts_per_tok=9), f"{TEXT}.num_experts_per_tok"),
    (lambda d: d["thinker_config"]["text_config"].update(mlp_only_layers=[1]), f"{TEXT}.decoder_sparse_step"),
    (lambda d: d["thinker_config"]["audio_config"].update(output_dim=16), "thinker_config.audio_config.output_dim"),
    (lambda d: d["talker_config"].update(accept_hidden_layer=9), "talker_config.accept_hidden_layer"),
    (lambda d: d["talker_config"]["code_predictor_config"].update(hidden_size=64),
     "talker_config.code_predictor_config.hidden_size"),
    (lambda d: d["code2wav_config"].update(decoder_dim=66), "code2wav_config.decoder_dim"),
    (lambda d: d["talker_config"].update(codec_eos_token_id=5000), "'eos'"),
])
def test_refusals_name_the_field(oconfig: dict, edit: Callable[[dict], object], field: str) -> None:
    d = copy.deepcopy(oconfig)
    edit(d)
    with pytest.raises(ConfigError, match=field.replace(".", r"\.").replace("[", r"\[")):
        Qwen3OmniConfig.from_dict(d)


def test_unknown_speaker_is_refused(oconfig: dict) -> None:
    cfg = Qwen3OmniConfig.from_dict(oconfig)
    assert cfg.talker is not None
    with pytest.raises(ConfigError, match="speaker"):
        cfg.talker.speaker_id("nobody")


def test_thinker_layout_places_every_stored_key_once(oconfig: dict) -> None:
    ckpt = open_checkpoint(CHECKPOINT)
    layout = release_layout(empty_model(Thinker, ckpt.config.thinker))
    stored = {k[len("thinker."):]: s for k, s in stored_shapes(ckpt.files).items()
              if k.startswith("thinker.") and not k.startswith("thinker.visual.")}
    assert set(layout) == set(stored)
    assert all(layout[k].shape == tuple(s) for k, s in stored.items())
    expert = layout["model.layers.1.mlp.experts.3.up_proj.weight"]
    assert (expert.param, expert.expert, expert.start) == ("model.layers.1.mlp.experts.gate_up_proj", 3, 16)


def test_a_mismatched_checkpoint_lists_every_bad_key(tmp_path: Path) -> None:
    ckpt = open_checkpoint(CHECKPOINT)
    extra = tmp_path / "extra.safetensors"
    save_file({"thinker.model.layers.0.mlp.experts.9.up_proj.weight": torch.zeros(16, 32)}, str(extra))
    files = {k: f for k, f in ckpt.files.items() if k != "thinker.model.layers.2.mlp.experts.5.down_proj.weight"}
    files["thinker.model.layers.0.mlp.experts.9.up_proj.weight"] = extra
    bad = Checkpoint(ckpt.path, ckpt.config, files)
    with pytest.raises(CheckpointError, match=r"missing keys \(1\): thinker\.model\.layers\.2\.mlp\.experts\.5\."
                                               r"down_proj.*unexpected keys \(1\): thinker\.model\.layers\.0\.mlp"):
        load_part(empty_model(Thinker, ckpt.config.thinker), bad, "thinker.", dtype=torch.float32, device="cpu")


def test_release_dims_layout_on_meta(oconfig: dict) -> None:
    """The thinker at the release's widths (README "Release values"), built on the meta device: the release's
    key names with the release's shapes (no memory, no weights)."""
    d = _release_schema(oconfig)
    d["thinker_config"]["text_config"].update(hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                                              num_key_value_heads=4, moe_intermediate_size=768, intermediate_size=768)
    d["thinker_config"]["audio_config"].update(d_model=1280, encoder_layers=32, encoder_attention_heads=20,
                                               encoder_ffn_dim=5120, downsample_hidden_size=480, output_dim=2048)
    d["talker_config"].update(thinker_hidden_size=2048, accept_hidden_layer=24)
    cfg = Qwen3OmniConfig.from_dict(d)
    layout = release_layout(empty_model(Thinker, cfg.thinker))
    shapes = {k: v.shape for k, v in layout.items()}
    assert shapes["model.layers.47.mlp.experts.127.down_proj.weight"] == (2048, 768)
    assert shapes["model.layers.47.mlp.experts.127.gate_proj.weight"] == (768, 2048)
    assert shapes["model.layers.0.mlp.gate.weight"] == (128, 2048)
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (4096, 2048)
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (512, 2048)
    assert shapes["audio_tower.conv_out.weight"] == (1280, 7680)
    assert shapes["audio_tower.conv2d2.weight"] == (480, 480, 3, 3)
    assert shapes["audio_tower.proj2.weight"] == (2048, 1280)
    assert sum(1 for k in layout if ".experts." in k) == 48 * 128 * 3
    experts = sum(torch.Size(s).numel() for k, s in shapes.items() if ".experts." in k)
    assert 28e9 < experts < 30e9  # the "30B" of 30B-A3B is almost all experts
