"""The added loop "aligner" (registered under the entry-point group `v2.added_loops`): what the registry finds,
and what it builds on a runtime's device.

Owns: `FACTORY` (takes the audio loop's chunks, gives nothing another loop takes; `build`: the aligner its
`settings.card` names, an aligner card's name or path, a checkpoint directory or a hub id, loaded on the
host's device; `settings.max_streams` overrides the card's slot pool) and `BuiltAligner` (the loop, its work
kind's executor, its pool, and `align`, the service `Runtime.align` calls).
Must not know: any family, the engine's internals.
"""

from __future__ import annotations

from typing import Any, Hashable, Mapping, Sequence

from v2.aligner.card import resolve_aligner
from v2.aligner.executor import AlignExecutor
from v2.aligner.loop import AlignerLoop, AlignState
from v2.events import WordTime
from v2.runtime.added import AddedContext, Host
from v2.runtime.family import AnyExecutor, Halves

SETTINGS = ("card", "max_streams")


class BuiltAligner:
    def __init__(self, name: str, settings: Mapping[str, object], host: Host) -> None:
        from v2.aligner.service import Aligner  # the model loads here, not at import

        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise ValueError(f"settings.{unknown[0]}: the aligner takes {', '.join(SETTINGS)}")
        source = settings.get("card")
        if not isinstance(source, str) or not source:
            raise ValueError("settings.card: the aligner card's name or path, a checkpoint directory or a hub id")
        card = resolve_aligner(source)
        streams = settings.get("max_streams", card.max_streams)
        if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
            raise ValueError(f"settings.max_streams: a positive integer, got {streams!r}")
        self.aligner = Aligner.load(card, host.device)
        self.loop = AlignerLoop(name, self.aligner)
        executor = AlignExecutor(self.aligner)
        self.executors: Mapping[Hashable, AnyExecutor] = {self.loop.kind: Halves(executor.pack, executor.launch,
                                                                                 executor.read)}
        self.buckets: Mapping[Hashable, list[int]] = {}
        self.pools: Mapping[str, int] = {"streams": streams}

    def start(self, context: AddedContext) -> AlignState:
        return self.loop.start(context)

    def align(self, audio: Any, sample_rate: int, text: str | None = None, *, words: Sequence[str] | None = None,
              word_ids: Sequence[Sequence[int]] | None = None, language: str | None = None) -> list[WordTime]:
        return self.aligner.align(audio, sample_rate, text, words=words, word_ids=word_ids, language=language)


class AlignerFactory:
    takes = "audio"
    gives: str | None = None

    def build(self, name: str, settings: Mapping[str, object], host: Host) -> BuiltAligner:
        return BuiltAligner(name, settings, host)


FACTORY = AlignerFactory()
