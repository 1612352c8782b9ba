"""The aligner's work kind: a batch of spans, of any requests, in forwards of the forced aligner.

Owns: `pack` (host: each span's audio made 16 kHz, soxr "HQ"), `launch` (the device: each clip's log-mel and
prompt, `ForcedAligner.marker_classes` for every span that has words: the head's class at each marker, the
first maximum on ties: int64 [sum of markers], span by span; on a GPU one call for them all, on a CPU one call
per group of `forward_groups`), `forward_groups` (a CPU forward's cost is the decoder's exact attention, which
grows with spans x the longest prompt squared, padding included, plus a fixed part per call: the spans sorted
by prompt length and cut where a shared call's padding would cost more than the call it saves), and `read`
(the release's fix-up per span, each word's times clamped to its span's audio, as the aligner may place a
marker past it, then moved to the request's time: seconds from the start of its audio, rounded to 3 decimals,
never past the span's end: `SentenceWords`). A span's result never depends on the others in its batch or
group (the model is exact per clip).
Must not know: requests, families, the engine's queues.
"""

from __future__ import annotations

import math
from typing import Sequence

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

# A CPU forward's fixed cost (the encoder's and the linears' calls, the head, the argmax) in the decoder's
# attention units, prompt rows squared: 144 ** 2. Measured 2026-12-07 on the tiny aligner, one thread, 16 spans
# of one serving run (prompts of 58-287 rows): one span alone costs 6.2 ms + 3.0 ms per 10^4 rows squared.
FIXED_ROWS = 144
MAX_GROUP = 64  # spans one CPU call holds at most (bounds the search: O(spans x MAX_GROUP))


def forward_groups(lengths: Sequence[int], fixed_rows: int = FIXED_ROWS) -> list[list[int]]:
    """The spans' indices (by prompt length `lengths`) in the groups that run as one forward each: sorted by
    length (ties in index order), cut into consecutive runs so that the sum over groups of fixed_rows ** 2 +
    size x longest ** 2 is least. Each group's indices ascending."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    fixed = fixed_rows * fixed_rows
    best = [0] + [0] * len(order)  # best[j]: the least cost of the first j sorted spans
    cut = [0] * (len(order) + 1)   # cut[j]: where the last group of that best split starts
    for j in range(1, len(order) + 1):
        longest = lengths[order[j - 1]] ** 2
        best[j], cut[j] = min((best[i] + fixed + (j - i) * longest, i) for i in range(max(0, j - MAX_GROUP), j))
    groups: list[list[int]] = []
    j = len(order)
    while j:
        groups.append(sorted(order[cut[j]:j]))
        j = cut[j]
    return groups[::-1]


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
        if device.type != "cpu" or len(clips) == 1:
            return model.marker_classes(prompts, mels)  # [sum of markers] int64, span by span
        parts: list[torch.Tensor] = [torch.empty(0)] * len(clips)
        for group in forward_groups([p.shape[0] for p in prompts]):
            classes = model.marker_classes([prompts[i] for i in group], [mels[i] for i in group])
            for i, part in zip(group, classes.split([2 * len(clips[i][1]) for i in group])):
                parts[i] = part  # [2 x words of span i]
        return torch.cat(parts)  # [sum of markers] int64, span by span

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
