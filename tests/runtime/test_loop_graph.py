"""A family of three small loops in a chain (thinker -> talker -> vocoder, as a thinker/talker/vocoder card
declares them) runs on the engine unchanged: each loop's work is batched across requests through the
executor registered for its kind, what a loop makes is fed along the declared edges, the last loop's chunks
stream to the caller, and nothing leaks. The experts are tiny torch functions on the CPU."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Hashable, Mapping, Sequence

import numpy as np
import pytest
import torch

from v2.card import ModelCard
from v2.contracts import AudioChunk, FinishReason, LoopState, ShapeSignature, WorkPlan
from v2.runtime import Runtime
from v2.runtime.family import Batch, LoopGraph, LoopSpec, Needs
from v2.runtime.handles import Metrics, SpeechResult


class Kind(enum.Enum):
    THINK = "think"
    TALK = "talk"
    VOICE = "voice"


@dataclass(frozen=True)
class Request:
    seed: int
    words: int = 3
    stream: bool = False
    timeout: float | None = None
    voice: str | None = None


@dataclass
class Step(LoopState):
    slot: int = -1
    made: int = 0                 # items this loop made
    launched: int = 0             # items on their way
    inbox: list[int] = field(default_factory=list)  # items fed, not yet launched
    upstream: FinishReason | None = None
    out: list[Any] = field(default_factory=list)


class ChainLoop:
    """Each plan carries one item (`x`) with the request's slot; `advance` takes the row's value. The source
    loop makes `words` items from the seed; a fed loop turns every item it is fed into one."""

    def __init__(self, kind: Kind, total: int | None = None) -> None:
        self.kind, self.total = kind, total

    def next(self, s: Step) -> WorkPlan | None:
        if s.finish is not None or s.launched > s.made:
            return None
        if self.total is not None:  # the source: one item a step until it has made its words
            if s.launched >= self.total:
                return None
            x = s.request_id * 100 + s.launched
        elif s.inbox:
            x = s.inbox[0]
        else:
            return None
        return WorkPlan(s.request_id, self.kind, ShapeSignature(self.kind, self.kind.value), (s.slot, x))

    def launched(self, s: Step, plan: WorkPlan) -> None:
        s.launched += 1
        if self.total is None:
            s.inbox.pop(0)

    def expects(self, s: Step, plan: WorkPlan) -> bool:
        return s.finish is None

    def advance(self, s: Step, plan: WorkPlan, row: Any) -> bool:
        s.made += 1
        item = row if self.kind is not Kind.VOICE else AudioChunk(s.made - 1, row, 8000, 1, False)
        s.out.append(item)
        s.fresh = [item]
        done = s.made >= self.total if self.total is not None else (s.upstream is not None and s.made == s.launched
                                                                    and not s.inbox)
        if done:
            s.finish = FinishReason.STOP if self.total is not None else s.upstream
        return True

    def feed(self, s: Step, items: list[Any], upstream: FinishReason | None) -> None:
        s.inbox.extend(items)
        if upstream is not None:
            s.upstream = upstream
            if not s.inbox and s.made == s.launched:
                s.finish = upstream

    def finalize(self, s: Step) -> list[Any]:
        return list(s.out)


class Expert:
    """One batched call per step: row i's value from its input (thinker: x * 3 + 1; talker: x + 7; vocoder:
    a numpy chunk of 4 samples)."""

    def __init__(self, kind: Kind, calls: list[tuple[Kind, int]]) -> None:
        self.kind, self.calls = kind, calls

    def pack(self, batch: Batch) -> torch.Tensor:
        return torch.tensor([p.payload[1] for p in batch.plans], dtype=torch.float64)  # [B]

    def launch(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append((self.kind, int(x.shape[0])))
        if self.kind is Kind.THINK:
            return x * 3 + 1
        if self.kind is Kind.TALK:
            return x + 7
        return torch.stack([x / 1000 + k for k in range(4)], dim=1)[:, None, :]  # [B, 1 channel, 4]

    def read(self, host: np.ndarray, batch: Batch) -> Sequence[Any]:
        return [float(v) for v in host] if self.kind is not Kind.VOICE else [np.array(r) for r in host]


class ChainFamily:
    name, device, weights, weight_names = "chain", torch.device("cpu"), torch.nn.Linear(1, 1), None
    sample_rate, channels, frame_rate, code_width, codebook_size = 8000, 1, 2000.0, 1, 1
    kv, kv_ops, prefill_budget, max_waiting, max_buffered_chunks = None, None, 0, 64, 64
    speakers: tuple[str, ...] = ()
    request_fields, sampling_keys = frozenset({"seed", "words", "stream", "timeout", "voice"}), ()

    def __init__(self, words: int) -> None:
        self.calls: list[tuple[Kind, int]] = []
        loops = {k: ChainLoop(k, words if k is Kind.THINK else None) for k in Kind}
        self.graph = LoopGraph((LoopSpec(Kind.THINK, loops[Kind.THINK], (Kind.TALK,), pools=("think",)),
                                LoopSpec(Kind.TALK, loops[Kind.TALK], (Kind.VOICE,)),
                                LoopSpec(Kind.VOICE, loops[Kind.VOICE])))
        self.executors = {k: Expert(k, self.calls) for k in Kind}
        self.buckets: dict[Hashable, list[int]] = {}
        self.pools = {"think": 4}

    def bind(self, launch: Any) -> None: ...
    def thread_setup(self) -> None: ...
    def parse(self, request: Any) -> Request:
        return request if isinstance(request, Request) else Request(**request)

    def prepare(self, request: Request, *, voice: Any = None) -> Any:
        return type("Work", (), {"rows": None, "inputs": ()})()

    def check_group(self, group: Any) -> None: ...
    def needs(self, record: Any) -> Needs:
        return Needs({"think": 1})

    def start(self, record: Any, slots: Mapping[str, int], share_from: int | None) -> dict[Hashable, LoopState]:
        return {k: Step(record.id, slot=slots.get(k.value, -1)) for k in Kind}

    def admitted(self, record: Any) -> None: ...
    def paged_kv(self) -> dict[Hashable, Any]:
        return {}

    def more_input(self, record: Any, loop: Hashable) -> None: ...
    def stats(self) -> dict[str, Any]:
        return {}

    def result(self, record: Any, outputs: Mapping[Hashable, Any], reason: FinishReason, now: float) -> SpeechResult:
        chunks = outputs.get(Kind.VOICE, [])
        audio = np.concatenate([c.audio for c in chunks], axis=1) if chunks else np.zeros((1, 0))
        codes = np.array(outputs.get(Kind.TALK, []), dtype=np.int64).reshape(-1, 1)
        return SpeechResult(audio, 8000, codes, reason.value, Metrics(0, len(codes), 0.0, None, 0.0, 0.0),
                            error=record.error)


class ChainCard(ModelCard):
    family: str = "chain"


def expected(rid: int, words: int) -> np.ndarray:
    talk = [(rid * 100 + i) * 3 + 1 + 7 for i in range(words)]
    return np.concatenate([np.array([[t / 1000 + k for k in range(4)]]) for t in talk], axis=1)


@pytest.mark.parametrize("n", [1, 6])
def test_three_loops_in_a_chain_run_batched_on_the_engine(n, tmp_path):
    family = ChainFamily(words=3)
    with Runtime(ChainCard(name="chain"), family=family, voices_dir=str(tmp_path)) as rt:
        handles = rt.submit_many([{"seed": i, "stream": i % 2 == 0} for i in range(n)])
        results = [h.result(30) for h in handles]
        for h, r in zip(handles, results):
            assert r.finish_reason == "stop" and r.error is None
            np.testing.assert_array_equal(r.audio, expected(h.request_id, 3))  # batched == alone: each its own
            assert r.codes[:, 0].tolist() == [(h.request_id * 100 + i) * 3 + 8 for i in range(3)]
        streamed = [np.concatenate([c.audio for c in h], axis=1) for h in handles]
        for s, r in zip(streamed, results):
            np.testing.assert_array_equal(s, r.audio)  # streamed == whole
        stats = rt.stats()
        assert stats["running"] == stats["waiting"] == stats["think_slots_in_use"] == 0  # nothing leaks
        rows = {k: sum(b for kind, b in family.calls if kind is k) for k in Kind}
        assert rows == {k: 3 * n for k in Kind}  # every item through each loop's executor
        if n > 1:  # the requests' rows ran together: fewer calls than rows, at most 4 at once (the pool)
            assert len([c for c in family.calls if c[0] is Kind.THINK]) < 3 * n
            assert max(b for _, b in family.calls) <= 4


def test_a_loop_graph_refuses_an_edge_to_an_unknown_or_earlier_loop():
    a, b = ChainLoop(Kind.THINK, 1), ChainLoop(Kind.TALK)
    with pytest.raises(ValueError, match="feeds: no loop named"):
        LoopGraph((LoopSpec(Kind.THINK, a, (Kind.VOICE,)), LoopSpec(Kind.TALK, b)))
    with pytest.raises(ValueError, match="comes before it"):
        LoopGraph((LoopSpec(Kind.THINK, a), LoopSpec(Kind.TALK, b, (Kind.THINK,))))


def test_a_loop_graph_refuses_a_target_that_takes_no_input_a_paged_loop_without_kv_and_an_unknown_audio_loop():
    a, b = ChainLoop(Kind.THINK, 1), ChainLoop(Kind.TALK)
    unfed = SimpleNamespace(next=b.next, launched=b.launched, expects=b.expects, advance=b.advance,
                            finalize=b.finalize)  # a loop with no `feed`
    with pytest.raises(ValueError, match="takes no input"):
        LoopGraph((LoopSpec(Kind.THINK, a, (Kind.TALK,)), LoopSpec(Kind.TALK, unfed)))
    with pytest.raises(ValueError, match="paged: .* PagedLoop"):
        LoopGraph((LoopSpec(Kind.THINK, a, (Kind.TALK,)), LoopSpec(Kind.TALK, b)), paged=Kind.THINK)
    with pytest.raises(ValueError, match="audio: .* no loop of the graph"):
        LoopGraph((LoopSpec(Kind.THINK, a, (Kind.TALK,)), LoopSpec(Kind.TALK, b)), audio=Kind.VOICE)
    feeding = LoopGraph((LoopSpec(Kind.THINK, a, (Kind.TALK,)), LoopSpec(Kind.TALK, b)), audio=Kind.THINK)
    assert feeding.audio is Kind.THINK  # the audio loop may feed further loops (an aligner of its chunks)
    assert LoopGraph((LoopSpec(Kind.THINK, a, (Kind.TALK,)), LoopSpec(Kind.TALK, b))).audio is Kind.TALK  # the last
    graph = LoopGraph((LoopSpec(Kind.THINK, a, (Kind.TALK,)), LoopSpec(Kind.TALK, b)), audio=None)
    assert graph.audio is None and graph.feeding[Kind.THINK] == ((Kind.TALK, b),) and graph.feeding[Kind.TALK] == ()


def test_a_chain_without_an_audio_loop_runs_streams_nothing_and_refuses_a_stream(tmp_path):
    """The same chain with `audio=None` (the graph makes no audio): every loop still runs and ends, nothing is
    delivered to a handle, and a request asking to stream is refused naming the field."""
    family = ChainFamily(words=3)
    family.graph = LoopGraph(family.graph.loops, audio=None)
    with Runtime(ChainCard(name="chain"), family=family, voices_dir=str(tmp_path)) as rt:
        with pytest.raises(ValueError, match="stream: the card 'chain' declares no loop that makes audio") as e:
            rt.submit({"seed": 0, "stream": True})
        assert getattr(e.value, "field", None) == "stream"
        handles = rt.submit_many([{"seed": i} for i in range(3)])
        results = [h.result(30) for h in handles]
        assert all(r.finish_reason == "stop" for r in results)
        for h, r in zip(handles, results):  # nothing streamed: the result's audio (this family's own) comes once
            chunks = list(h)
            assert len(chunks) == 1 and chunks[0].final
            np.testing.assert_array_equal(chunks[0].audio, r.audio)
        assert rt.stats()["running"] == rt.stats()["waiting"] == 0
