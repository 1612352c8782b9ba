"""The aligner's work kind: a batch of spans, of any requests, in one forward of the forced aligner.

Owns: `pack` (host: each span's audio made 16 kHz, soxr "HQ"), `launch` (the device: each clip's log-mel and
prompt, one `ForcedAligner.marker_classes` call for every span that has words: the head's class at each marker,
the first maximum on ties: int64 [sum of markers]), and `read` (the release's fix-up per span, each word's times
clamped to its span's audio, as the aligner may place a marker past it, then moved to the request's time:
seconds from the start of its audio, rounded to 3 decimals, never past the span's end: `SentenceWords`). A
span's result never depends on the others in its batch (the model is exact per clip).
Must not know: requests, families, the engine's queues.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from v2.aligner.loop import Span
from v2.aligner.service import RATE, Aligner
from v2.events import SentenceWords, WordTime
from v2.models.audio_in import resample
from v2.models.forced_aligner.align import prompt_ids
from v2.models.forced_aligner.features import audio_tokens, clip_features
from v2.models.forced_aligner.fixup import fix_timestamps
from v2.runtime.family import Batch

Packed = list[tuple[torch.Tensor, tuple[tuple[int, ...], ...]] | None]  # per span: (wave [m] at 16 kHz, ids)


class AlignExecutor:
    def __init__(self, aligner: Aligner) -> None:
        self.aligner = aligner

    def pack(self, batch: Batch) -> Packed:
        out: Packed = []
        for plan in batch.plans:
            span: Span = plan.payload
            if not span.words or span.audio.shape[0] == 0:
                out.append(None)
                continue
            wave = resample(span.audio[None], span.rate, RATE)[0]  # [m]
            out.append((torch.from_numpy(np.ascontiguousarray(wave)), span.word_ids))
        return out

    @torch.no_grad()
    def launch(self, packed: Packed) -> torch.Tensor:
        model = self.aligner.model
        cfg, device = model.cfg, self.aligner.device
        clips = [p for p in packed if p is not None]
        if not clips:
            return torch.zeros(0, dtype=torch.int64, device=device)
        mels = [clip_features(wave.to(device), cfg.audio) for wave, _ in clips]  # [mel, T] each
        prompts = [torch.tensor(prompt_ids(ids, audio_tokens(mel.shape[1], cfg.audio), cfg.ids), device=device)
                   for (_, ids), mel in zip(clips, mels)]
        return model.marker_classes(prompts, mels)  # [sum of markers] int64, span by span

    def read(self, host: object, batch: Batch) -> list[SentenceWords]:
        classes = np.asarray(host).tolist()
        ms = float(self.aligner.segment_ms)
        rows, at = [], 0
        for plan in batch.plans:
            span: Span = plan.payload
            words: tuple[WordTime, ...] = ()
            if span.words and span.audio.shape[0]:
                n = 2 * len(span.words)
                fixed = fix_timestamps([c * ms for c in classes[at: at + n]])
                at += n
                cap = math.floor((span.offset + span.duration) * 1000) / 1000
                t = [min(round(span.offset + min(round(f / 1000, 3), span.duration), 3), cap) for f in fixed]
                words = tuple(WordTime(w, t[2 * i], t[2 * i + 1]) for i, w in enumerate(span.words))
            elif span.words:  # words without audio: they take no time, at the span's start
                t0 = round(span.offset, 3)
                words = tuple(WordTime(w, t0, t0) for w in span.words)
            rows.append(SentenceWords(span.index, span.text_start, span.text_end, words))
        return rows
