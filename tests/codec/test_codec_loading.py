"""Codec loading: only safetensors, encoder keys skipped, weight norm folded, bad keys named; config checks."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from v2.models.moss_codec import CodecConfig, CodesError, MossAudioDecoder
from v2.models.moss_codec.loader import fold_weight_norm
from v2.models.config import ConfigError
from v2.models.weights import CheckpointError, empty_model

from conftest import CODEC_DIR
from v2.families.moss_tts_local.shapes import SHAPES

SRC = CODEC_DIR / "checkpoint"
CONFIG = json.loads((SRC / "config.json").read_text())


def copy_with(tmp_path: Path, edit=None, config=None) -> Path:
    dst = tmp_path / "codec"
    dst.mkdir(exist_ok=True)
    tensors = load_file(str(SRC / "model.safetensors"))
    if edit:
        edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps(config or CONFIG))
    return dst


def test_encoder_and_unused_quantizers_are_not_needed(tmp_path, ref_codec, codec_ref):
    def drop(t):
        for k in [k for k in t if k.startswith(("encoder.", "quantizer.input_proj")) or (k.startswith("quantizer.") and ".in_proj." in k)]:
            del t[k]
        for k in [k for k in t if k.startswith("quantizer.quantizers.") and int(k.split(".")[2]) >= 12]:
            del t[k]

    lean = MossAudioDecoder.from_pretrained(copy_with(tmp_path, drop))
    codes = torch.from_numpy(codec_ref["codes"])[None]
    assert torch.equal(lean.decode(codes), ref_codec.decode(codes))


def test_weight_g_and_weight_v_names_load_the_same(tmp_path, ref_codec):
    def rename(t):
        for k in [k for k in t if ".parametrizations.weight.original" in k]:
            new = k.replace("parametrizations.weight.original0", "weight_g").replace("parametrizations.weight.original1", "weight_v")
            t[new] = t.pop(k)

    codec = MossAudioDecoder.from_pretrained(copy_with(tmp_path, rename))
    assert torch.equal(codec.quantizer.output_proj.weight, ref_codec.quantizer.output_proj.weight)


def test_weight_norm_is_folded_per_output_channel():
    g, v = torch.tensor([[[2.0]], [[3.0]]]), torch.tensor([[[3.0], [4.0]], [[0.0], [5.0]]])
    torch.testing.assert_close(fold_weight_norm(g, v), torch.tensor([[1.2, 1.6], [0.0, 3.0]]))


def test_mismatches_are_named(tmp_path):
    def edit(t):
        del t["decoder.2.transformer.layers.0.ffn.0.weight"]
        del t["quantizer.quantizers.3.out_proj.parametrizations.weight.original1"]
        t["decoder.9.mystery.weight"] = torch.zeros(2)
        t["decoder.4.output_proj.weight"] = torch.zeros(241, 32)

    with pytest.raises(CheckpointError) as e:
        MossAudioDecoder.from_pretrained(copy_with(tmp_path, edit))
    msg = str(e.value)
    assert "decoder.2.transformer.layers.0.ffn.0.weight" in msg and "quantizer.quantizers.3.out_proj.weight" in msg
    assert "unexpected keys (2): decoder.9.mystery.weight, quantizer.quantizers.3.out_proj.parametrizations" in msg
    assert "decoder.4.output_proj.weight: checkpoint [241, 32] vs model [240, 32]" in msg


def test_truncated_file_is_a_clear_error(tmp_path):
    ckpt = copy_with(tmp_path)
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[:100])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        MossAudioDecoder.from_pretrained(ckpt)


@pytest.mark.parametrize("edit,field", [
    (lambda c: c["decoder_kwargs"][2].pop("d_model"), r"decoder_kwargs\[2\]\.d_model"),
    (lambda c: c["decoder_kwargs"][1].update(module_type="Conv"), r"decoder_kwargs\[1\]\.module_type"),
    (lambda c: c["decoder_kwargs"][2].update(input_dimension=15), r"decoder_kwargs\[2\]\.input_dimension"),
    (lambda c: c.update(downsample_rate=960), "downsample_rate"),
    (lambda c: c["quantizer_kwargs"].update(num_quantizers=8), r"quantizer_kwargs\.num_quantizers"),
    (lambda c: c["decoder_kwargs"][0].update(causal=False), r"decoder_kwargs\[0\]\.causal"),
])
def test_config_errors_name_the_field(edit, field):
    config = copy.deepcopy(CONFIG)
    edit(config)
    with pytest.raises(ConfigError, match=field):
        CodecConfig.from_dict(config)


def test_release_shapes_give_the_published_windows_and_size():
    cfg = CodecConfig.from_dict(json.loads(SHAPES.joinpath("moss_audio_tokenizer_v2.json").read_text()))
    assert [s.window for s in cfg.stages] == [125, 250, 400, 400, 400, 400]
    assert cfg.hop == 3840 and cfg.frame_rate == 12.5
    params = sum(p.numel() for p in empty_model(MossAudioDecoder, cfg).parameters())
    assert 1.0e9 < params < 1.1e9


def test_bad_codes_are_refused_naming_the_argument(ref_codec):
    with pytest.raises(CodesError, match=r"codes: expected shape"):
        ref_codec.decode(torch.zeros(1, 11, 3, dtype=torch.long))
    with pytest.raises(CodesError, match=r"codes: values"):
        ref_codec.decode(torch.full((1, 12, 3), 1024))
    with pytest.raises(CodesError, match="lengths"):
        ref_codec.decode(torch.zeros(2, 12, 3, dtype=torch.long), torch.tensor([3, 4]))
    # values past a row's length are padding and are not checked
    padded = torch.zeros(2, 12, 3, dtype=torch.long)
    padded[1, :, 1:] = -1
    audio = ref_codec.decode(padded, torch.tensor([3, 1]))
    assert audio.shape == (2, 2, 3 * 480)
