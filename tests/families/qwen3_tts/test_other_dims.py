"""Nothing is tuned to the shared fixture: a seeded model of other dimensions (other widths, layer and head
counts, head_dim, RoPE bases, 8 code groups, equal talker and predictor widths, other speaker
encoder channels, a 0.6B custom voice) runs through the same `Runtime.from_card` path and request fields:
every mode, batched == alone, streamed == whole."""

from __future__ import annotations

import copy
import tomllib

import numpy as np
import pytest
import torch

from v2.errors import RequestError
from v2.card import card_path
from v2.families.qwen3_tts.card import Qwen3Card

G = 8


def other_card() -> Qwen3Card:
    data = tomllib.loads(card_path("qwen3_tts_tiny").read_text())
    tts = copy.deepcopy(data["seeded"]["tts"]["config"])
    t = tts["talker_config"]
    t.update(hidden_size=40, num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=3, head_dim=24,
             intermediate_size=72, rope_theta=10000.0, num_code_groups=G, text_hidden_size=24)
    t["code_predictor_config"].update(hidden_size=40, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                      head_dim=16, intermediate_size=48, rope_theta=5000.0, num_code_groups=G)
    tts["speaker_encoder_config"].update(enc_channels=[24, 24, 24, 24, 72], enc_res2net_scale=4, enc_se_channels=8,
                                         enc_attention_channels=8, enc_dim=40, mel_dim=64)
    tts["tts_model_size"] = "0b6"
    codec = data["seeded"]["codec"]["config"]
    codec["decoder_config"].update(num_quantizers=G, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                   sliding_window=6)
    codec["encoder_valid_num_quantizers"] = G
    data["seeded"]["tts"]["config"], data["seeded"]["tts"]["seed"] = tts, 7
    data["loops"]["talker"].update(max_frames=12)
    return Qwen3Card.model_validate(data)


@pytest.fixture(scope="module")
def other_rt():
    from v2.runtime import Runtime

    with Runtime.from_card(other_card(), device="cpu") as rt:
        yield rt


def test_every_mode_batched_alone_and_streamed(other_rt):
    rt = other_rt
    assert rt.family.code_width == G and rt.family.model.cfg.talker.hidden_size == 40
    wav = (np.sin(np.arange(24000) / 9.0) * 0.3).astype(np.float32)
    reqs = [
        {"text": "Hello there.", "speaker": "Vivian", "language": "english"},
        {"text": "Hello there.", "speaker": "eric", "language": "Chinese", "text_feed": "streaming"},
        {"text": "Good day.", "instruction": "A deep voice.", "language": "Auto"},
        {"text": "Good day.", "reference_audio": (wav, 24000), "x_vector_only": True},
        {"text": "Good day.", "reference_audio": (wav, 16000), "reference_text": "A reference.", "text_feed": "whole"},
    ]
    reqs = [{**r, "seed": i, "max_frames": 8, "stream": True} for i, r in enumerate(reqs)]
    alone = [rt.submit(r).result() for r in reqs]
    handles = rt.submit_many(reqs)
    streamed = [np.concatenate([c.audio for c in h], axis=1) for h in handles]
    for h, a, s in zip(handles, alone, streamed):
        r = h.result()
        assert r.error is None and r.codes.shape[1] == G and len(r.codes) >= 2
        np.testing.assert_array_equal(r.codes, a.codes)
        assert np.array_equal(s, r.audio) and r.audio.shape == (1, len(r.codes) * rt.family.codec.hop)
    whole = rt.family.codec.decode(torch.from_numpy(alone[0].codes)[None])[0]
    assert torch.equal(torch.from_numpy(alone[0].audio[0]), whole)
    # the 0.6B rule: the reference drops a custom voice's instruction; here it is refused, naming the field
    with pytest.raises(RequestError, match="^instruction: the 0.6B CustomVoice"):
        rt.submit({**reqs[0], "instruction": "whisper"})
