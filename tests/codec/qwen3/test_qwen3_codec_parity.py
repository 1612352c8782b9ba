"""Parity with the reference implementation's arrays (codec_reference.npz): floats within 1e-4, codes exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from qwen3_codec_helpers import qdecoder, qencoder, qref  # noqa: F401 (fixtures)

TOL = dict(atol=1e-4, rtol=1e-4)
TIME_MAJOR = {"pre_transformer_in", "pre_transformer_layer0", "pre_transformer_layer1", "pre_transformer_out"}
LAYERS = ["quantizer_out", "pre_conv_out", *sorted(TIME_MAJOR), "upsample0_0_out", "upsample0_1_out",
          "upsample1_0_out", "upsample1_1_out", *(f"decoder{i}_out" for i in range(7))]


def close(got: torch.Tensor, want: np.ndarray) -> None:
    assert tuple(got.shape) == want.shape
    np.testing.assert_allclose(got.numpy(), want, **TOL)


@pytest.fixture(scope="module")
def trace(qdecoder, qref):
    trace: dict[str, torch.Tensor] = {}
    wav = qdecoder.decode(torch.from_numpy(qref["codes"])[None], trace=trace)
    return trace, wav


@pytest.mark.parametrize("name", LAYERS)
def test_every_decoder_layer(trace, qref, name):
    got = trace[0][name][0]  # time-major [L, C]
    close(got if name in TIME_MAJOR else got.T, qref[name])


def test_waveform_is_the_clamped_last_layer(trace, qref):
    _, wav = trace
    close(wav[0], qref["wav"])
    assert float(wav.abs().max()) <= 1.0


def test_public_batched_decode_with_minus_one_padding(qdecoder, qref):
    wav, lengths = qdecoder.decode_padded(torch.from_numpy(qref["batch_codes"]))
    assert lengths.tolist() == qref["batch_wav_lengths"].tolist()
    assert (qref["batch_codes"][..., 0] > -1).sum(1).tolist() == qref["batch_lengths"].tolist()
    close(wav, qref["batch_wav"])


@pytest.mark.parametrize("left", [25, 2])
def test_reference_chunked_decode(qdecoder, qref, left):
    got = qdecoder.reference_chunked_decode(torch.from_numpy(qref["codes"])[None], chunk_size=4, left_context=left)
    close(got[0], qref[f"chunked_4_{left}_wav"])


def test_a_short_left_context_departs_from_the_whole_decode(qdecoder, qref):
    codes = torch.from_numpy(qref["codes"])[None]
    whole = qdecoder.decode(codes)
    short = qdecoder.reference_chunked_decode(codes, chunk_size=4, left_context=2)
    assert float((short - whole).abs().max()) > 0.1


@pytest.fixture(scope="module")
def enc_trace(qencoder, qref):
    trace: dict[str, torch.Tensor] = {}
    latent = qencoder.latent(torch.from_numpy(qref["enc_wav0"])[None], trace)
    return trace, latent


def test_encoder_layers(enc_trace, qref):
    trace, _ = enc_trace
    close(trace["seanet_out"][0], qref["enc_wav0_seanet_out"])
    close(trace["transformer_out"][0], qref["enc_wav0_transformer_out"])
    close(trace["downsample_out"][0], qref["enc_wav0_downsample_out"])


def test_all_32_codebooks(qencoder, enc_trace, qref):
    codes = qencoder.quantize(enc_trace[1], 32)[0].T  # [32, F]
    assert torch.equal(codes, torch.from_numpy(qref["enc_wav0_all_codes"]))


@pytest.mark.exact
def test_public_encode_alone_and_batched(qencoder, qref):
    w0, w1 = qref["enc_wav0"], qref["enc_wav1"]
    assert torch.equal(qencoder.encode([w0])[0], torch.from_numpy(qref["enc_wav0_codes"]))
    assert torch.equal(qencoder.encode([w1])[0], torch.from_numpy(qref["enc_wav1_codes"]))
    both = qencoder.encode([w0, w1])
    want = qref["enc_batch_codes"]
    lengths = qref["enc_batch_lengths"].tolist()
    assert [len(c) for c in both] == lengths
    for i, c in enumerate(both):
        assert torch.equal(c, torch.from_numpy(want[i, : lengths[i]]))
    assert (want[1, lengths[1]:] == -1).all()
    # the partial last frame of the short item differs between alone and batched, as in the reference
    assert not torch.equal(both[1][-1], qencoder.encode([w1])[0][-1])
    assert torch.equal(both[1][:-1], qencoder.encode([w1])[0][:-1])
