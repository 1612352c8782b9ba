"""A test-only added loop (`v2.runtime.added`): it takes the audio loop's chunks of any family and measures each
one on its own work kind, batched across requests: the chunk's sample count and the SHA-256 of its samples'
bytes. Its result (`SpeechResult.added[name]`, a `ProbeResult`) and its events (one `ChunkMark` per chunk) are
checked against the request's result audio: every chunk, in order, exactly. It also keeps what the request
speaks (`AddedContext.spoken()`, at its end) and the launch sizes of its kind.
Settings: `fail_text` / `fail_id`: a request whose text holds that string (whose first id is that id) fails at
its first chunk (a failing added loop fails that request alone); `streams`: its slot pool's size.
Registered by the tests as `registry.register_added_loop("probe", "added_probe:FACTORY")`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Sequence

import numpy as np
import torch

from v2.contracts import AudioChunk, FinishReason, Kind, LoopState, ShapeSignature, WorkPlan
from v2.runtime.added import AddedContext, Host, Spoken
from v2.runtime.family import Batch, Halves


def measure_kind(name: str) -> Kind:
    """The work kind of the probe named `name` (each added loop's kinds are its own: `<name>_measure`)."""
    kinds: Any = Kind(f"Measure_{name}", [("MEASURE", f"{name}_measure")])  # type: ignore[call-arg]
    return kinds.MEASURE  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ChunkMark:
    seq: int
    samples: int
    digest: str  # SHA-256 of the chunk's float32 samples, C order


@dataclass(frozen=True)
class ProbeResult:
    marks: tuple[ChunkMark, ...]
    spoken: Spoken
    finish: FinishReason
    slot: int
    segments: int = 0  # the request's segment marks at its end


@dataclass
class ProbeState(LoopState):
    context: AddedContext | None = None
    pending: list[AudioChunk] = field(default_factory=list)  # fed, not yet launched
    inflight: int | None = None                             # seq of the chunk on the device
    upstream: FinishReason | None = None
    marks: list[ChunkMark] = field(default_factory=list)
    spoken: Spoken = Spoken()


def digest(audio: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(audio, dtype=np.float32).tobytes()).hexdigest()


class ProbeLoop:
    def __init__(self, name: str, fail_text: str | None, fail_id: int | None, relay: bool = False) -> None:
        self.name, self.fail_text, self.fail_id, self.relay = name, fail_text, fail_id, relay
        self.kind = measure_kind(name)

    def next(self, s: ProbeState) -> WorkPlan | None:
        if s.finish is not None or s.inflight is not None or not s.pending:
            return None
        return WorkPlan(s.request_id, self.name, ShapeSignature(self.kind, "probe"), s.pending[0])

    def launched(self, s: ProbeState, plan: WorkPlan) -> None:
        s.inflight = s.pending.pop(0).seq

    def expects(self, s: ProbeState, plan: WorkPlan) -> bool:
        return s.finish is None and s.inflight == plan.payload.seq

    def advance(self, s: ProbeState, plan: WorkPlan, row: tuple[int, str]) -> bool:
        if not self.expects(s, plan):
            return False
        assert s.context is not None
        spoken = s.context.spoken()
        if (self.fail_text is not None and spoken.text is not None and self.fail_text in spoken.text) or (
                self.fail_id is not None and spoken.ids and spoken.ids[0] == self.fail_id):
            raise RuntimeError("probe: told to fail this request")
        chunk: AudioChunk = plan.payload
        if chunk.seq != len(s.marks):
            raise RuntimeError(f"probe: chunk {chunk.seq} came after {len(s.marks)} chunks")
        s.inflight = None
        mark = ChunkMark(chunk.seq, row[0], row[1])
        s.marks.append(mark)
        s.fresh = [chunk] if self.relay else [mark]  # a relay hands the chunk on to the loop added after it
        self._end(s)
        return True

    def feed(self, s: ProbeState, items: Sequence[AudioChunk], upstream: FinishReason | None) -> None:
        s.pending += items
        if upstream is not None and s.upstream is None:
            s.upstream = upstream
        self._end(s)

    def _end(self, s: ProbeState) -> None:
        if s.upstream is not None and not s.pending and s.inflight is None and s.finish is None:
            assert s.context is not None
            s.spoken = s.context.spoken()
            s.finish = s.upstream

    def finalize(self, s: ProbeState) -> ProbeResult:
        slot = s.context.slots["streams"] if s.context is not None else -1
        segments = len(s.context.segments()) if s.context is not None else 0
        return ProbeResult(tuple(s.marks), s.spoken, s.finish or FinishReason.ABORT, slot, segments)


class Measure:
    """The executor: per row, (samples, SHA-256) as int64 [B, 5] (a count, then the digest's 32 bytes)."""

    def __init__(self) -> None:
        self.calls: list[int] = []  # rows per launch

    def pack(self, batch: Batch) -> list[np.ndarray]:
        return [np.asarray(p.payload.audio, dtype=np.float32) for p in batch.plans]

    def launch(self, audio: list[np.ndarray]) -> torch.Tensor:
        self.calls.append(len(audio))
        rows = [[a.shape[1], *np.frombuffer(hashlib.sha256(np.ascontiguousarray(a).tobytes()).digest(), np.int64)]
                for a in audio]
        return torch.tensor(rows, dtype=torch.int64)  # [B, 5]

    def read(self, host: Any, batch: Batch) -> list[tuple[int, str]]:
        rows = np.asarray(host)[: len(batch.plans)]
        return [(int(r[0]), np.ascontiguousarray(r[1:], dtype=np.int64).tobytes().hex()) for r in rows]


class BuiltProbe:
    def __init__(self, name: str, settings: Mapping[str, object], host: Host, relay: bool = False) -> None:
        unknown = set(settings) - {"fail_text", "fail_id", "streams"}
        if unknown:
            raise ValueError(f"settings.{sorted(unknown)[0]}: the probe takes fail_text, fail_id, streams")
        fail_text, fail_id = settings.get("fail_text"), settings.get("fail_id")
        self.host = host
        self.loop = ProbeLoop(name, fail_text if isinstance(fail_text, str) else None,
                              fail_id if isinstance(fail_id, int) else None, relay)
        self.measure = Measure()
        self.executors: Mapping[Hashable, Any] = {self.loop.kind: Halves(self.measure.pack, self.measure.launch,
                                                                      self.measure.read)}
        self.buckets: Mapping[Hashable, list[int]] = {}
        streams = settings.get("streams", 64)
        self.pools = {"streams": streams if isinstance(streams, int) else 64}

    def start(self, context: AddedContext) -> ProbeState:
        return ProbeState(context.request_id, context=context)


class ProbeFactory:
    takes = "audio"
    gives: str | None = None

    def __init__(self) -> None:
        self.built: list[BuiltProbe] = []  # what it built (the tests read the launches)

    def build(self, name: str, settings: Mapping[str, object], host: Host) -> BuiltProbe:
        probe = BuiltProbe(name, settings, host, relay=self.gives is not None)
        self.built.append(probe)
        return probe


FACTORY = ProbeFactory()


class Words:
    """A factory that takes what no loop gives (an edge no loop can take)."""

    takes = "words"
    gives: str | None = None

    def build(self, name: str, settings: Mapping[str, object], host: Host) -> BuiltProbe:
        raise AssertionError("never built: refused at load")


WORDS = Words()


class Chained(ProbeFactory):
    """A probe that gives "audio" too (each chunk it measured, handed on), so another added loop may take from it
    (chains and cycles)."""

    gives: str | None = "audio"


CHAINED = Chained()
