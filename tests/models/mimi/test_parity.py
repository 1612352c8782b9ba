"""Parity with transformers 5.0.0's MimiModel (codec_reference.npz): every array, floats within 1e-4 (float32,
bf16-stored weights), codes exact; the standalone (un-prefixed) checkpoint layout loads the same codec."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from .conftest import CHECKPOINT, TOL, codec_config
from v2.models.mimi import MimiModel


def close(got: torch.Tensor, want: np.ndarray) -> None:
    assert tuple(got.shape) == want.shape
    np.testing.assert_allclose(got.detach().cpu().numpy(), want, **TOL)


@pytest.fixture(scope="module")
def enc_trace(mimi, mref):
    trace: dict[str, torch.Tensor] = {}
    latent = mimi.latent(torch.from_numpy(mref["wav0"])[None], trace)
    return trace, latent


def test_encoder_stages(enc_trace, mref):
    trace, latent = enc_trace
    close(trace["seanet_out"][0], mref["wav0_enc_seanet"])  # [hidden, 25 Hz steps]
    close(trace["transformer_out"][0].T, mref["wav0_enc_transformer"])
    close(latent[0], mref["wav0_enc_latent"])


def test_codes_of_both_waveforms(mimi, mref):
    assert mref["wav1"].shape[0] % mimi.hop != 0  # a partial last frame
    for name in ("wav0", "wav1"):
        (codes,) = mimi.encode([mref[name]])
        assert codes.shape[0] == -(-mref[name].shape[0] // mimi.hop)
        assert torch.equal(codes, torch.from_numpy(mref[f"{name}_codes"])), name


@pytest.fixture(scope="module")
def dec_trace(mimi, mref):
    trace: dict[str, torch.Tensor] = {}
    wav = mimi.decode(torch.from_numpy(mref["wav0_codes"])[None], trace=trace)
    return trace, wav


def test_decoder_stages(dec_trace, mref):
    trace, _ = dec_trace
    close(trace["quantized"][0].T, mref["wav0_dec_quantized"])
    close(trace["upsample"][0].T, mref["wav0_dec_upsample"])
    close(trace["transformer"][0].T, mref["wav0_dec_transformer"])


def test_waveforms(dec_trace, mimi, mref):
    close(dec_trace[1][0], mref["wav0_decoded"])
    close(mimi.decode(torch.from_numpy(mref["wav1_codes"])[None])[0], mref["wav1_decoded"])
    close(mimi.decode(torch.from_numpy(mref["wav0_codes"][:5])[None])[0], mref["wav0_decoded_first5"])


def test_every_reference_array_is_checked(mref):
    """A new array in the fixture fails here until a test above reads it."""
    checked = {"wav0", "wav1", "wav0_codes", "wav1_codes", "wav0_enc_seanet", "wav0_enc_transformer",
               "wav0_enc_latent", "wav0_decoded", "wav1_decoded", "wav0_dec_quantized", "wav0_dec_upsample",
               "wav0_dec_transformer", "wav0_decoded_first5"}
    assert set(mref) == checked


def test_standalone_checkpoint_loads_the_same_codec(mimi, tmp_path):
    tensors = {k[len("codec_model."):]: v for k, v in load_file(str(CHECKPOINT / "model.safetensors")).items()
               if k.startswith("codec_model.")}
    assert any(k.endswith(".codebook.initialized") for k in tensors)  # stored, known and skipped
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(codec_config()))
    ours = dict(mimi.named_parameters())
    for alone in (MimiModel.from_pretrained(tmp_path), MimiModel.from_pretrained(tmp_path / "model.safetensors")):
        assert alone.cfg == mimi.cfg
        for name, p in alone.named_parameters():
            assert torch.equal(p, ours[name]), name
        assert all(p.dtype == torch.float32 for p in alone.parameters())  # bf16 storage, float32 compute
