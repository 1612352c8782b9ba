"""The codec decoder reproduces the reference implementation's arrays (float32, CPU)."""

from __future__ import annotations

import torch

from v2.models.moss_codec.layers import CodecStage

TOL = dict(atol=1e-4, rtol=1e-4)


def close(actual: torch.Tensor, expected) -> None:
    torch.testing.assert_close(actual.float(), torch.as_tensor(expected).float(), **TOL)


@torch.no_grad()
def test_every_stage_output(ref_codec, codec_ref):
    codes = torch.from_numpy(codec_ref["codes"])[None]  # [1, 12, F]
    x = ref_codec.quantizer(codes)  # [1, F, C] time-major
    close(x[0].T, codec_ref["quantizer_out"])
    state = ref_codec.allocate_state(1)
    layer = 0
    for i, module in enumerate(ref_codec.decoder):
        if isinstance(module, CodecStage):
            n = module.cfg.num_layers
            history = [(state.k[j][:1], state.v[j][:1]) for j in range(layer, layer + n)]
            x, _ = module(x, torch.zeros(1, dtype=torch.long), history)
            layer += n
        else:
            x = module(x)
        close(x[0].T, codec_ref[f"stage{i}_out"])


def test_whole_utterance_audio(ref_codec, codec_ref):
    audio = ref_codec.decode(torch.from_numpy(codec_ref["codes"])[None])
    assert audio.shape == (1, 2, 4800)
    close(audio[0], codec_ref["audio"])


def test_batched_decode_with_different_lengths(ref_codec, codec_ref):
    lengths = torch.from_numpy(codec_ref["batch_lengths"])
    audio = ref_codec.decode(torch.from_numpy(codec_ref["batch_codes"]), lengths)
    assert audio.shape == (2, 2, 4800)
    for i, n in enumerate(codec_ref["batch_audio_lengths"]):
        close(audio[i, :, :n], codec_ref["batch_audio"][i, :, :n])
        assert bool((audio[i, :, n:] == 0).all())  # padding is silence, not garbage


def test_windows_come_from_context_duration_and_token_rate(ref_codec):
    assert [s.window for s in ref_codec.cfg.stages] == [4, 6, 8]
    assert [s.upsample for s in ref_codec.cfg.stages] == [1, 2, 4]
    assert ref_codec.cfg.hop == 480 and ref_codec.cfg.channels == 2
