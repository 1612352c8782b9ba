"""Loading (strict names, clear errors), the config's checks, seeded codecs, bad codes and input audio."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from qwen3_codec_helpers import TOKENIZER_DIR, seeded_config, seeded_decoder  # noqa: F401 (fixture)
from v2.models.config import ConfigError
from v2.models.qwen3_codec import (
    AudioError, CodesError, Qwen3CodecConfig, Qwen3CodecDecoder, Qwen3CodecEncoder, prepare_mono,
)
from v2.models.weights import CheckpointError


def checkpoint_with(tmp_path, change) -> str:
    shutil.copy(TOKENIZER_DIR / "config.json", tmp_path / "config.json")
    tensors = load_file(str(TOKENIZER_DIR / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return str(tmp_path)


def test_missing_unexpected_and_misshaped_keys_are_named(tmp_path):
    def change(t):
        del t["decoder.pre_conv.conv.bias"]
        t["decoder.upsample.9.weight"] = torch.zeros(1)
        t["decoder.pre_transformer.norm.weight"] = torch.zeros(5)

    path = checkpoint_with(tmp_path, change)
    with pytest.raises(CheckpointError) as e:
        Qwen3CodecDecoder.from_pretrained(path)
    msg = str(e.value)
    assert "missing keys (1): decoder.pre_conv.conv.bias" in msg
    assert "unexpected keys (1): decoder.upsample.9.weight" in msg
    assert "decoder.pre_transformer.norm.weight: checkpoint [5] vs model [32]" in msg


def test_each_side_skips_the_other_and_the_unused_keys(tmp_path):
    def change(t):
        for k in [k for k in t if k.startswith("decoder.")]:
            del t[k]

    path = checkpoint_with(tmp_path, change)
    Qwen3CodecEncoder.from_pretrained(path)  # loads without the decoder side
    with pytest.raises(CheckpointError, match="missing keys"):
        Qwen3CodecDecoder.from_pretrained(path)
    with pytest.raises(CheckpointError, match="encoder.downsample.conv.weight"):
        Qwen3CodecEncoder.from_pretrained(checkpoint_with(tmp_path, lambda t: t.pop("encoder.downsample.conv.weight")))


def fixture_config() -> dict:
    return json.loads((TOKENIZER_DIR / "config.json").read_text())


@pytest.mark.parametrize("edit, field", [
    (lambda c: c["decoder_config"].pop("sliding_window"), "decoder_config.sliding_window"),
    (lambda c: c.update(decode_upsample_rate=960), "decode_upsample_rate"),
    (lambda c: c["decoder_config"].update(num_key_value_heads=3), "decoder_config.num_key_value_heads"),
    (lambda c: c["decoder_config"].update(upsample_rates=[8, 0]), "decoder_config.upsample_rates"),
    (lambda c: c["decoder_config"].update(decoder_dim=36), "decoder_config.decoder_dim"),
    (lambda c: c["decoder_config"].update(hidden_act="gelu"), "decoder_config.hidden_act"),
    (lambda c: c["encoder_config"].update(upsampling_ratios=[8, 6, 5]), "encode_downsample_rate"),
    (lambda c: c["encoder_config"].update(use_conv_shortcut=True), "encoder_config.use_conv_shortcut"),
    (lambda c: c.update(encoder_valid_num_quantizers=12), "encoder_valid_num_quantizers"),
])
def test_config_errors_name_the_field(edit, field):
    cfg = fixture_config()
    edit(cfg)
    with pytest.raises(ConfigError, match=f"'{field}'"):
        Qwen3CodecConfig.from_dict(cfg)


def test_everything_structural_comes_from_the_config():
    cfg = Qwen3CodecConfig.from_dict(seeded_config())
    d = cfg.decoder
    assert (cfg.hop, cfg.groups, d.num_kv_heads, d.head_dim, d.sliding_window) == (24, 8, 2, 8, 40)
    assert cfg.encoder is None
    with pytest.raises(ConfigError, match="encoder_config"):
        Qwen3CodecEncoder.from_seed(seeded_config(), seed=0)
    fixture = Qwen3CodecConfig.from_dict(fixture_config())
    assert (fixture.hop, fixture.encoder.downsample_kernel, fixture.encoder.hop) == (1920, 4, 1920)


def test_seeded_codecs_are_deterministic_and_speech_level():
    a, b = Qwen3CodecDecoder.from_seed(seeded_config(), 3), Qwen3CodecDecoder.from_seed(seeded_config(), 3)
    c = Qwen3CodecDecoder.from_seed(seeded_config(), 4)
    for (name, p), q, r in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(p, q), name
    assert not torch.equal(a.state_dict()["pre_conv.conv.weight"], c.state_dict()["pre_conv.conv.weight"])
    codes = torch.randint(0, 64, (1, 20, 8), generator=torch.Generator().manual_seed(0))
    wav = a.decode(codes)
    assert wav.shape == (1, 20 * 24) and 1e-3 < float(wav.abs().mean()) < 1.0
    enc = Qwen3CodecEncoder.from_seed(fixture_config(), 3)
    codes = enc.encode([np.sin(np.arange(5000) / 7.0).astype(np.float32) * 0.3])[0]
    assert codes.shape == (3, 16) and int(codes.min()) >= 0 and int(codes.max()) < 2048


def test_bad_codes_are_refused_naming_the_argument(seeded_decoder):
    dec = seeded_decoder
    with pytest.raises(CodesError, match=r"codes: expected shape \[B, T >= 1, 8\]"):
        dec.decode(torch.zeros(1, 4, 16, dtype=torch.long))
    with pytest.raises(CodesError, match=r"codes: values must lie in \[0, 64\)"):
        dec.decode(torch.full((1, 4, 8), 64))
    with pytest.raises(CodesError, match="lengths"):
        dec.decode(torch.zeros(2, 4, 8, dtype=torch.long), torch.tensor([4, 5]))
    dec.decode(torch.full((1, 4, 8), 99).index_fill(1, torch.tensor([0, 1]), 3), torch.tensor([2]))  # padding unchecked


def test_input_audio_is_averaged_to_mono_and_resampled_like_the_reference():
    stereo = np.stack([np.full(16000, 0.2), np.full(16000, 0.4)], axis=1).astype(np.float32)  # [n, 2]
    mono = prepare_mono((stereo, 16000), sample_rate=24000)
    assert mono.shape == (24000,) and mono.dtype == np.float32
    assert abs(float(mono[5000:20000].mean()) - 0.3) < 1e-3
    same = prepare_mono((stereo[:, 0], 24000), sample_rate=24000)
    assert np.array_equal(same, stereo[:, 0])
    assert prepare_mono((np.zeros(16001, np.float32), 16000), sample_rate=24000).shape == (24002,)  # ceil
    with pytest.raises(AudioError, match="NaN"):
        prepare_mono((np.full(100, np.nan, np.float32), 24000), sample_rate=24000)
    enc_cfg = copy.deepcopy(fixture_config())
    assert Qwen3CodecConfig.from_dict(enc_cfg).sample_rate == 24000
