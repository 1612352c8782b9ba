"""The codec encoder: parity with the reference's encode arrays, batched == alone, partial frames, loading,
config checks, and the tiny card's seeded encoder (float32, CPU)."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from safetensors.torch import load_file, save_file

from v2.models.moss_codec import CodecConfig, MossAudioDecoder, MossAudioEncoder, prepare_reference
from v2.models.config import ConfigError
from v2.models.weights import CheckpointError

from conftest import CODEC_DIR

SRC = CODEC_DIR / "checkpoint"
CONFIG = json.loads((SRC / "config.json").read_text())
TOL = dict(atol=1e-4, rtol=1e-4)

# The tiny card's encoder: the release's structure (a x240 patch, then five x2 patches between six causal
# stages) at the decoder's tiny widths and windows. The card's [seeded.codec.config] carries this list.
TINY_CARD_ENCODER = tomllib.loads(
    (Path(__file__).with_name("tiny_card_encoder.toml")).read_text())["encoder_kwargs"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matmuls: one intra-op thread is as fast, and does not spin against other processes for a core."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def encoder() -> MossAudioEncoder:
    return MossAudioEncoder.from_pretrained(SRC)


@pytest.fixture(scope="module")
def batch_ref() -> dict[str, np.ndarray]:
    with np.load(CODEC_DIR / "encode_batch.npz") as data:
        return {k: data[k] for k in data.files}


def close(actual: torch.Tensor, expected) -> None:
    torch.testing.assert_close(actual.float(), torch.as_tensor(expected).float(), **TOL)


def test_reference_latent_and_codes(encoder, codec_ref):
    audio = torch.from_numpy(codec_ref["encode_input_audio"])[None]  # [1, 2, S]
    latent, frames = encoder.encode_latent(audio)
    close(latent[0].T, codec_ref["encode_latent"])
    codes, frames = encoder.encode(audio)
    assert frames.tolist() == [6]
    assert torch.equal(codes[0], torch.from_numpy(codec_ref["encode_codes"]))


@pytest.mark.parametrize("i", [0, 1])
def test_each_signal_alone(encoder, batch_ref, i):
    audio = torch.from_numpy(batch_ref[f"wav_{i}"])[None]
    latent, frames = encoder.encode_latent(audio)
    close(latent[0].T, batch_ref[f"latent_alone_{i}"])
    assert torch.equal(encoder.quantize(latent, frames)[0], torch.from_numpy(batch_ref[f"codes_alone_{i}"]))


def test_two_signals_in_one_batch(encoder, batch_ref):
    w0, w1 = batch_ref["wav_0"], batch_ref["wav_1"]
    audio = torch.full((2, 2, w0.shape[1]), float("nan"))  # what lies past a length is never read
    audio[0], audio[1, :, : w1.shape[1]] = torch.from_numpy(w0), torch.from_numpy(w1)
    lengths = [w0.shape[1], w1.shape[1]]
    codes, frames = encoder.encode(audio, lengths)
    assert frames.tolist() == batch_ref["lengths_batch"].tolist()
    # up to the lengths, and past them too: frames past a length get a zero residual's codes, as the reference's
    assert torch.equal(codes, torch.from_numpy(batch_ref["codes_batch"]))
    latent, _ = encoder.encode_latent(audio, lengths)
    for i, n in enumerate(frames.tolist()):
        close(latent[i, :n].T, batch_ref[f"latent_alone_{i}"])


def test_loudness_normalised_reference(encoder, batch_ref):
    wav = prepare_reference((batch_ref["wav_0"], 48000), sample_rate=48000)
    assert wav.dtype == np.float32 and np.array_equal(wav, batch_ref["normalized_0"])
    codes, _ = encoder.encode(torch.from_numpy(wav)[None])
    assert torch.equal(codes[0], torch.from_numpy(batch_ref["codes_normalized_0"]))


@pytest.mark.exact
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 5000), min_size=2, max_size=4), seed=st.integers(0, 2**31 - 1))
def test_batched_equals_alone(encoder, lengths, seed):
    gen = torch.Generator().manual_seed(seed)
    longest = max(lengths)
    audio = torch.randn(len(lengths), 2, longest, generator=gen) * 0.3
    latent, frames = encoder.encode_latent(audio, lengths)
    codes = encoder.quantize(latent, frames)
    assert frames.tolist() == [n // 480 for n in lengths]
    for i, n in enumerate(lengths):
        alone_latent, alone_frames = encoder.encode_latent(audio[i : i + 1, :, :n])
        alone_codes = encoder.quantize(alone_latent, alone_frames)
        f = int(alone_frames[0])
        assert f == frames[i]
        assert torch.equal(codes[i, :, :f], alone_codes[0, :, :f])
        assert torch.equal(latent[i, :f], alone_latent[0, :f])  # bit for bit, not just close


@pytest.mark.exact
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(splits=st.lists(st.integers(1, 12), min_size=1, max_size=6))
def test_chunked_encoding_equals_whole(encoder, batch_ref, splits):
    audio = torch.from_numpy(batch_ref["wav_0"])[None]  # 37 frames
    whole = torch.from_numpy(batch_ref["codes_alone_0"])[None]  # equal to encode(audio): test_each_signal_alone
    state = encoder.allocate_state(2)
    pieces, done = [], 0
    for k in splits + [37]:
        k = min(k, 37 - done)
        if k == 0:
            break
        pieces.append(encoder.encode_chunk(torch.tensor([1]), audio[:, :, done * 480 : (done + k) * 480], state=state))
        done += k
    assert torch.equal(torch.cat(pieces, dim=2), whole)


def test_chunked_streams_share_a_batch(encoder, batch_ref):
    """Two encodes in one state: unequal advances, a padding row in the dummy slot; each equals its whole."""
    w0, w1 = (torch.from_numpy(batch_ref[f"wav_{i}"]) for i in (0, 1))
    whole0, whole1 = encoder.encode(w0[None])[0][0], encoder.encode(w1[None])[0][0]
    state = encoder.allocate_state(2)
    first = torch.stack([w0[:, : 10 * 480], w1[:, : 10 * 480]])
    a = encoder.encode_chunk(torch.tensor([0, 1]), first, state=state, frames=torch.tensor([10, 4]))
    second = torch.stack([w1[:, 4 * 480 : 23 * 480], torch.zeros(2, 19 * 480)])
    b = encoder.encode_chunk(torch.tensor([1, state.dummy_slot]), second, state=state)
    assert torch.equal(a[0], whole0[:, :10])
    assert torch.equal(torch.cat([a[1, :, :4], b[0]], dim=1), whole1)
    assert state.frames[:2].tolist() == [10, 23]
    with pytest.raises(ValueError, match="whole frames"):
        encoder.encode_chunk(torch.tensor([0]), w0[None, :, :500], state=state)


def test_a_partial_last_frame_is_dropped(encoder, batch_ref):
    """Lengths that are not whole frames: the partial frame is zero-padded and computed, the length counts
    whole frames only, and the whole frames do not depend on it (the stages are causal)."""
    wav = torch.from_numpy(batch_ref["wav_1"])[None]  # 23 frames
    codes, frames = encoder.encode(wav[:, :, : 23 * 480 - 120])
    assert frames.tolist() == [22] and codes.shape == (1, 12, 23)
    assert torch.equal(codes[0, :, :22], torch.from_numpy(batch_ref["codes_alone_1"])[:, :22])


def test_bad_arguments_are_named(encoder):
    with pytest.raises(ValueError, match="audio: expected a tensor"):
        encoder.encode(torch.zeros(1, 1, 960))
    with pytest.raises(ValueError, match="audio: expected float"):
        encoder.encode(torch.zeros(1, 2, 960, dtype=torch.int16))
    with pytest.raises(ValueError, match="lengths"):
        encoder.encode(torch.zeros(2, 2, 960), [960, 961])


def test_windows_and_token_rates_of_the_encoder():
    cfg = CodecConfig.from_dict(CONFIG)
    assert [s.window for s in cfg.encoder_stages] == [8, 6, 4]
    assert [s.upsample for s in cfg.encoder_stages] == [4, 2, 1]
    assert cfg.encoder_dim == 32


@pytest.mark.parametrize("edit,field", [
    (lambda c: c["encoder_kwargs"][2].update(patch_size=7), r"encoder_kwargs\[2\]\.patch_size"),
    (lambda c: c["encoder_kwargs"][3].update(input_dimension=15), r"encoder_kwargs\[3\]\.input_dimension"),
    (lambda c: c["encoder_kwargs"].__delitem__(slice(-2, None)), "encoder_kwargs end with"),
    (lambda c: c["quantizer_kwargs"].update(input_dim=16), "input_dim"),
])
def test_encoder_config_errors_name_the_field(edit, field):
    config = copy.deepcopy(CONFIG)
    edit(config)
    with pytest.raises(ConfigError, match=field):
        CodecConfig.from_dict(config)


def test_a_config_without_an_encoder_decodes_but_cannot_encode():
    config = {k: v for k, v in CONFIG.items() if k != "encoder_kwargs"}
    assert CodecConfig.from_dict(config).encoder_modules == ()
    with pytest.raises(ConfigError, match="encoder_kwargs"):
        MossAudioEncoder.from_seed(config, 0)


def test_encoder_loading_skips_the_decoder_and_names_missing_keys(tmp_path, encoder, batch_ref):
    def save(edit) -> Path:
        tensors = load_file(str(SRC / "model.safetensors"))
        edit(tensors)
        dst = tmp_path / "codec"
        dst.mkdir(exist_ok=True)
        save_file(tensors, str(dst / "model.safetensors"))
        (dst / "config.json").write_text(json.dumps(CONFIG))
        return dst

    def drop_decoder_side(t):
        for k in [k for k in t if k.startswith(("decoder.", "quantizer.output_proj."))]:
            del t[k]

    lean = MossAudioEncoder.from_pretrained(save(drop_decoder_side))
    audio = torch.from_numpy(batch_ref["wav_1"])[None]
    assert torch.equal(lean.encode(audio)[0], encoder.encode(audio)[0])

    def break_encoder(t):
        del t["encoder.3.transformer.layers.0.ffn.0.weight"]
        del t["quantizer.quantizers.5.in_proj.parametrizations.weight.original0"]

    with pytest.raises(CheckpointError) as e:
        MossAudioEncoder.from_pretrained(save(break_encoder))
    assert "encoder.3.transformer.layers.0.ffn.0.weight" in str(e.value)
    assert "quantizer.quantizers.5.in_proj" in str(e.value)


def test_tiny_card_seeded_encoder(tiny_card, tiny_codec):
    config = copy.deepcopy(tiny_card.seeded["codec"].config)
    if "encoder_kwargs" in config:
        assert config["encoder_kwargs"] == TINY_CARD_ENCODER
    config["encoder_kwargs"] = TINY_CARD_ENCODER
    seed = tiny_card.seeded["codec"].seed
    enc = MossAudioEncoder.from_seed(config, seed, decoder=tiny_codec)
    assert [s.window for s in enc.cfg.encoder_stages] == [100, 100, 100, 100, 62, 31]
    for k in range(12):  # one checkpoint's two sides: the same codebooks and output projections
        dq, eq = tiny_codec.quantizer.quantizers[k], enc.quantizer.quantizers[k]
        assert torch.equal(dq.codebook.weight, eq.codebook.weight) and torch.equal(dq.out_proj.bias, eq.out_proj.bias)
    again = MossAudioEncoder.from_seed(config, seed)  # builds the same decoder itself
    assert all(torch.equal(a, b) for a, b in zip(enc.state_dict().values(), again.state_dict().values()))
    audio = torch.randn(2, 2, 48000, generator=torch.Generator().manual_seed(3)) * 0.1
    codes, frames = enc.encode(audio, [48000, 20000])
    assert codes.shape == (2, 12, 13) and frames.tolist() == [12, 5]
    assert torch.equal(codes[1, :, :5], enc.encode(audio[1:, :, :20000])[0][0, :, :5])
    assert codes[0].unique().numel() > 12  # codes vary: the seeded encoder is not degenerate
    decoded = tiny_codec.decode(codes[:1, :, :12])
    assert decoded.shape == (1, 2, 12 * 3840) and bool(torch.isfinite(decoded).all())


@pytest.mark.gpu
def test_cuda_encoder_matches_the_reference(batch_ref):
    """On CUDA (banded SDPA attention, float32): the reference codes exactly, latents within 1e-4."""
    enc = MossAudioEncoder.from_pretrained(SRC, device="cuda")
    w0, w1 = batch_ref["wav_0"], batch_ref["wav_1"]
    audio = torch.zeros(2, 2, w0.shape[1])
    audio[0], audio[1, :, : w1.shape[1]] = torch.from_numpy(w0), torch.from_numpy(w1)
    codes, frames = enc.encode(audio.cuda(), [w0.shape[1], w1.shape[1]])
    assert codes.device.type == "cuda" and frames.tolist() == [37, 23]
    assert torch.equal(codes.cpu(), torch.from_numpy(batch_ref["codes_batch"]))
    latent, _ = enc.encode_latent(audio[:1].cuda())
    close(latent[0].T.cpu(), batch_ref["latent_alone_0"])


def test_encode_bench_prints_one_json_line(capsys):
    from v2.families.moss_tts_local.bench.encode import main

    argv = ["--checkpoint", str(SRC), "--batch", "2", "--seconds", "0.2", "0.3", "--long-seconds", "0.5",
            "--chunk-frames", "10", "--iters", "1", "--device", "cpu", "--concurrency", "1", "2", "--frames", "2",
            "--reference-seconds", "0.3"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["bench"] == "v2.encode" and result["references"] == 2 and result["long_chunks"] == 5
    assert result["alone_audio_s_per_s"] > 0 and result["batched_audio_s_per_s"] > 0
    for c in (1, 2):  # cloned requests through the runtime: TTFA with the reference to encode, and with its codes
        assert result[f"c{c}_audio_ttfa_p50_s"] > 0 and result[f"c{c}_codes_ttfa_p50_s"] > 0
