"""The audio front end and encoder against the reference (prompt c: 1.5 s at 16 kHz, 150 mel frames, 20 rows):
the Slaney filterbank, the log-mel, the token count, the rows entering the encoder layers, the encoder output;
a clip's rows the same encoded alone or beside a shorter clip (bit for bit); refusals that name the field."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from v2.models.aut.features import audio_token_count, log_mel, mel_filters, rows_after_convs
from v2.models.qwen3_omni.thinker import Thinker

TOL = dict(atol=1e-4, rtol=1e-4)


def test_filters_and_log_mel(thinker: Thinker, oref: dict[str, np.ndarray]) -> None:
    cfg = thinker.cfg.audio
    torch.testing.assert_close(mel_filters(cfg, torch.device("cpu")), torch.from_numpy(oref["c_mel_filters"]),
                               atol=1e-7, rtol=1e-6)
    mel = log_mel(torch.from_numpy(oref["c_audio_wave_16k"]), cfg)
    torch.testing.assert_close(mel, torch.from_numpy(oref["c_audio_mel"]), **TOL)
    assert mel.shape[1] == int(oref["c_audio_feature_mask"].sum()) == 150


def test_token_count_follows_the_readme_formula(thinker: Thinker, oref: dict[str, np.ndarray]) -> None:
    cfg = thinker.cfg.audio

    def readme(n: int) -> int:  # f(L) as written in the fixture's README
        g = (n % 100 - 1) // 2 + 1
        return ((g - 1) // 2 + 1 - 1) // 2 + 1 + (n // 100) * 13

    for n in [1, 2, 7, 8, 9, 50, 99, 100, 101, 150, 199, 200, 201, 1234, 3000]:
        assert audio_token_count(n, cfg) == readme(n), n
    assert audio_token_count(150, cfg) == int((oref["c_thinker_input_ids"] == 151675).sum()) == 20
    assert [rows_after_convs(int(n)) for n in oref["c_audio_chunk_lengths"]] == [13, 7]


def test_encoder_rows_and_output(thinker: Thinker, oref: dict[str, np.ndarray]) -> None:
    mel = torch.from_numpy(oref["c_audio_mel"])
    with torch.no_grad():
        rows = thinker.audio_tower.conv_rows([mel])[0]
        out = thinker.audio_tower.encode([mel])[0]
    torch.testing.assert_close(rows, torch.from_numpy(oref["c_audio_encoder_input_rows"]), **TOL)
    torch.testing.assert_close(out, torch.from_numpy(oref["c_audio_encoder_out"]), **TOL)
    assert thinker.audio_tower.window == 104


@pytest.mark.exact
def test_a_clip_alone_equals_beside_another(thinker: Thinker, oref: dict[str, np.ndarray]) -> None:
    """The shorter clip's chunks are padded to the longest chunk (100 frames) in both calls, so the longer
    clip's rows do not move by a bit; the shorter clip's own rows equal its call with a full chunk beside it."""
    mel = torch.from_numpy(oref["c_audio_mel"])
    other = torch.randn(128, 263) * 0.3
    with torch.no_grad():
        alone = thinker.audio_tower.encode([mel])[0]
        both = thinker.audio_tower.encode([other, mel])
        again = thinker.audio_tower.encode([mel, other[:, :40]])
    assert torch.equal(both[1], alone) and torch.equal(again[0], alone)
    assert both[0].shape[0] == 2 * 13 + 8 and again[1].shape[0] == 5


def test_refusals_name_the_field(thinker: Thinker) -> None:
    cfg = thinker.cfg.audio
    with pytest.raises(ValueError, match="audio"):
        log_mel(torch.zeros(2, 1600), cfg)
    with pytest.raises(ValueError, match="audio"):
        log_mel(torch.zeros(100), cfg)
    with pytest.raises(ValueError, match=r"audio\[1\]"):
        thinker.audio_tower.encode([torch.zeros(128, 10), torch.zeros(80, 10)])
    with pytest.raises(ValueError, match="audio"):
        thinker.embed(torch.tensor([1, 151675, 2]), None, 151675)
    with pytest.raises(ValueError, match="prompt_ids"):
        thinker.embed(torch.tensor([1, 151655, 2]), None, 151675, (151655, 151656))
    assert thinker.embed(torch.tensor([1, 2]), None, 151675, (151655, 151656)).shape == (2, 32)
