"""Batched == alone, bit for bit on the CPU: the fixture's three clips and a clip under half a second (zero-padded
to 8000 samples, one part-chunk), aligned together in two orders, give each clip's own logits, classes and
word times. (Features are per clip, so no clip's padding reaches another: unlike transformers' batch, which
pads the waveforms together before the STFT.)"""

from __future__ import annotations

import pytest
import torch

from tests.models.forced_aligner.conftest import CASES
from v2.models.forced_aligner.align import Clip, align, prompt_ids
from v2.models.forced_aligner.features import audio_tokens, clip_features
from v2.models.forced_aligner.model import ForcedAligner


def _clips(fref: dict, fmeta: dict) -> list[Clip]:
    clips = [Clip(torch.from_numpy(fref[f"{c}/wave"]), tuple(fmeta["cases"][c]["words"]),
                  tuple(map(tuple, fmeta["cases"][c]["word_ids"]))) for c in CASES]
    short = torch.randn(5000, generator=torch.Generator().manual_seed(3)) * 0.1
    return clips + [Clip(short, ("a", "bc"), ((64,), (65, 66)))]


@torch.no_grad()
def _logits(aligner: ForcedAligner, clips: list[Clip]) -> list[torch.Tensor]:
    mels = [clip_features(c.wave, aligner.cfg.audio) for c in clips]
    ids = [torch.tensor(prompt_ids(c.word_ids, audio_tokens(m.shape[1], aligner.cfg.audio), aligner.cfg.ids))
           for c, m in zip(clips, mels)]
    return aligner.marker_logits(ids, mels)


@pytest.mark.exact
def test_batched_equals_alone(aligner: ForcedAligner, fref: dict, fmeta: dict) -> None:
    clips = _clips(fref, fmeta)
    alone = [_logits(aligner, [c])[0] for c in clips]
    for order in ([0, 1, 2, 3], [3, 2, 0, 1]):
        batched = _logits(aligner, [clips[i] for i in order])
        for i, got in zip(order, batched):
            assert torch.equal(got, alone[i]), (order, i)
    together = align(aligner, clips)
    for i, c in enumerate(clips):
        assert align(aligner, [c])[0] == together[i]
        assert together[i].classes == alone[i].argmax(-1).tolist()
