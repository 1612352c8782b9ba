"""The config's refusals name the field (with its path inside the CSM checkpoint's config.json), every size comes
from the config, the window is applied, loading names bad keys, bad codes and audio are refused by name."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from v2.models.config import ConfigError
from v2.models.mimi import CodesError, MimiConfig, MimiModel
from v2.models.weights import CheckpointError

from .conftest import CHECKPOINT, codec_config, other_config, random_codes


def drop(key):
    return lambda c: c.pop(key)


@pytest.mark.parametrize("edit, field", [
    (drop("hidden_size"), "hidden_size"),
    (drop("sliding_window"), "sliding_window"),
    (drop("num_quantizers"), "num_quantizers"),
    (lambda c: c.update(num_key_value_heads=3), "num_key_value_heads"),
    (lambda c: c.update(head_dim=7), "head_dim"),
    (lambda c: c.update(upsampling_ratios=[8, 0]), "upsampling_ratios"),
    (lambda c: c.update(num_semantic_quantizers=32), "num_semantic_quantizers"),
    (lambda c: c.update(codebook_dim=8), "codebook_dim"),
    (lambda c: c.update(upsample_groups=5), "upsample_groups"),
    (lambda c: c.update(_frame_rate=25), "_frame_rate"),
    (lambda c: c.update(norm_eps=0), "norm_eps"),
    (lambda c: c.update(compress=8), "compress"),
    (lambda c: c.update(hidden_act="relu"), "hidden_act"),
    (lambda c: c.update(pad_mode="reflect"), "pad_mode"),
    (lambda c: c.update(use_causal_conv=False), "use_causal_conv"),
    (lambda c: c.update(use_conv_shortcut=True), "use_conv_shortcut"),
    (lambda c: c.update(trim_right_ratio=0.5), "trim_right_ratio"),
    (lambda c: c.update(audio_channels=2), "audio_channels"),
    (lambda c: c.update(sliding_window="250"), "sliding_window"),
    (lambda c: c.update(model_type="encodec"), "model_type"),
    (lambda c: c["rope_parameters"].update(rope_type="llama3"), "rope_parameters.rope_type"),
    (lambda c: c["rope_parameters"].update(rope_theta=-1.0), "rope_parameters.rope_theta"),
])
def test_config_errors_name_the_field(edit, field, tmp_path):
    cfg = codec_config()
    edit(cfg)
    with pytest.raises(ConfigError, match=f"'{field}'"):
        MimiConfig.from_dict(cfg)
    with pytest.raises(ConfigError, match=f"'codec_config.{field}'"):
        MimiConfig.from_dict(cfg, where="codec_config.")
    whole = json.loads((CHECKPOINT / "config.json").read_text())
    whole["codec_config"] = cfg
    (tmp_path / "config.json").write_text(json.dumps(whole))
    with pytest.raises(ConfigError, match=f"config.json: .*'codec_config.{field}'"):
        MimiModel.from_pretrained(tmp_path, prefix="codec_model.", config_key="codec_config")


def test_a_missing_nested_config_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "csm"}))
    with pytest.raises(ConfigError, match="'codec_config'"):
        MimiModel.from_pretrained(tmp_path, prefix="codec_model.", config_key="codec_config")


def test_older_configs_give_rope_theta_at_the_top():
    cfg = codec_config()
    cfg.pop("rope_parameters")
    cfg["rope_theta"] = 123.0
    assert MimiConfig.from_dict(cfg).rope_theta == 123.0


def test_every_size_comes_from_the_config(other):
    cfg = other.cfg
    assert (cfg.hop, cfg.seanet_hop, cfg.frame_rate, cfg.groups, cfg.downsample_kernel) == (48, 24, 12.5, 8, 4)
    assert len(other.quantizer.semantic_residual_vector_quantizer.layers) == 2
    assert len(other.quantizer.acoustic_residual_vector_quantizer.layers) == 6
    assert other.upsample.conv.weight.shape == (24, 2, 4)  # 12 groups of 2 channels
    assert other.decoder.layers[0].conv.weight.shape == (32, 24, 5)  # 2^3 x 4 filters
    state = other.allocate_state(2)
    assert state.k[0].shape == (3, 2, 4, 6) and len(state.k) == 3  # window - 1 steps at the KV heads
    wav = other.decode(random_codes(other, 7, 0))
    assert wav.shape == (1, 7 * 48) and bool(torch.isfinite(wav).all()) and float(wav.abs().mean()) > 1e-4
    codes = other.encode([np.sin(np.arange(200) / 3.0).astype(np.float32)])[0]
    assert codes.shape == (5, 8) and int(codes.min()) >= 0 and int(codes.max()) < 64


def test_seeded_codecs_are_deterministic():
    a, b, c = (MimiModel.from_seed(other_config(), s) for s in (3, 3, 4))
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name
    assert not torch.equal(a.upsample.conv.weight, c.upsample.conv.weight)


def test_the_decoder_transformer_attends_over_its_window_only():
    """The same weights with a 5-step and a 1000-step window: equal while every step still sees its whole past,
    different afterwards (transformers 5.0.0 leaves the window out; the release's Mimi applies it)."""
    wide = other_config()
    wide["sliding_window"] = 1000
    narrow, full = MimiModel.from_seed(other_config(), 9), MimiModel.from_seed(wide, 9)
    codes = random_codes(narrow, 8, 1)
    t1: dict[str, torch.Tensor] = {}
    t2: dict[str, torch.Tensor] = {}
    narrow.decode(codes, trace=t1), full.decode(codes, trace=t2)
    a, b = t1["transformer"][0], t2["transformer"][0]  # [16 steps, hidden]
    torch.testing.assert_close(a[:5], b[:5], atol=1e-6, rtol=0)
    assert float((a[5:] - b[5:]).abs().amax(-1).min()) > 1e-4


def checkpoint_with(tmp_path, change) -> str:
    shutil.copy(CHECKPOINT / "config.json", tmp_path / "config.json")
    tensors = load_file(str(CHECKPOINT / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return str(tmp_path)


def test_missing_unexpected_and_misshaped_keys_are_named(tmp_path):
    def change(t):
        del t["codec_model.decoder.layers.0.conv.bias"]
        t["codec_model.decoder.layers.99.conv.weight"] = torch.zeros(1)
        t["codec_model.upsample.conv.weight"] = torch.zeros(32, 2, 4)
        del t["backbone_model.norm.weight"]  # outside the prefix: not the codec's business

    path = checkpoint_with(tmp_path, change)
    with pytest.raises(CheckpointError) as e:
        MimiModel.from_pretrained(path, prefix="codec_model.", config_key="codec_config")
    msg = str(e.value)
    assert "missing keys (1): codec_model.decoder.layers.0.conv.bias" in msg
    assert "unexpected keys (1): codec_model.decoder.layers.99.conv.weight" in msg
    assert "codec_model.upsample.conv.weight: checkpoint [32, 2, 4] vs model [32, 1, 4]" in msg


def test_bad_codes_are_refused_naming_the_argument(other):
    with pytest.raises(CodesError, match=r"codes: expected shape \[B, T >= 1, 8\]"):
        other.decode(torch.zeros(1, 4, 32, dtype=torch.long))
    with pytest.raises(CodesError, match=r"codes: values must lie in \[0, 64\)"):
        other.decode(torch.full((1, 4, 8), 64))
    with pytest.raises(CodesError, match=r"codes: expected integer codes"):
        other.decode(torch.zeros(1, 4, 8))
    with pytest.raises(CodesError, match="lengths"):
        other.decode(torch.zeros(2, 4, 8, dtype=torch.long), torch.tensor([4, 5]))
    other.decode(torch.full((1, 4, 8), 99).index_fill(1, torch.tensor([0, 1]), 3), torch.tensor([2]))  # padding unchecked


def test_bad_audio_is_refused_naming_the_item(other):
    with pytest.raises(ValueError, match=r"wavs\[1\]: contains NaN"):
        other.encode([np.zeros(10, np.float32), np.full(10, np.nan, np.float32)])
    with pytest.raises(ValueError, match=r"wavs\[0\]: expected a non-empty 1-D float waveform"):
        other.encode([np.zeros((2, 10), np.float32)])
    with pytest.raises(ValueError, match=r"wavs\[0\]: expected a non-empty 1-D float waveform"):
        other.encode([np.zeros(0, np.float32)])
    with pytest.raises(ValueError, match="lengths"):
        other.encode_batch(torch.zeros(2, 10), [10, 11])
    assert other.encode([]) == []
