"""A device result the engine copies only in part (`v2.runtime.kept.Kept`): the streams copy its host part and hand
its device part to the executor's `read` untouched, so items handed between loops stay the tensors the executor
made (no host copy, no upload back). Proved on the streams, and through the engine with two added loops on the
two-loop test family: the first measures each audio chunk and hands the second the chunk's samples as views of
its own launch's output tensor; the second gets exactly those tensors (their storage), in order, with the
values of the request's audio."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, Iterator, Mapping, Sequence

import numpy as np
import pytest
import torch

from v2 import registry
from v2.contracts import FinishReason, Kind, LoopState, ShapeSignature, WorkPlan
from v2.runtime import Runtime
from v2.runtime.added import AddedContext, Host
from v2.runtime.device import HostStream, SimulatedStream
from v2.runtime.family import Batch, Halves
from v2.runtime.kept import Kept

sys.path.insert(0, str(Path(__file__).parent))

from twoloop.card import card  # noqa: E402


@pytest.mark.parametrize("stream", [HostStream(), SimulatedStream(0.0)])
def test_a_stream_copies_the_host_part_and_hands_the_device_part_through(stream):
    rows = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    done = stream.fetch([stream.launch(lambda: Kept(torch.tensor([4, 4, 4]), rows)),
                         stream.launch(lambda: rows * 2), stream.launch(lambda: Kept(None, rows))]).wait()
    assert isinstance(done[0].host, np.ndarray) and done[0].host.tolist() == [4, 4, 4] and done[0].device is rows
    assert isinstance(done[1], np.ndarray) and done[1].tolist() == (rows * 2).tolist()
    assert done[2].host is None and done[2].device is rows
    if isinstance(stream, SimulatedStream):
        stream.close()


class Step(Kind):
    SAMPLES = "kept_samples"
    TAKE = "kept_take"


@dataclass
class State(LoopState):
    pending: list[Any] = field(default_factory=list)
    inflight: bool = False
    upstream: FinishReason | None = None
    made: list[Any] = field(default_factory=list)


class Relay:
    """One plan per item fed; `advance` hands the row on (`fresh`) and keeps it; ends after its upstream."""

    def __init__(self, name: str, kind: Step) -> None:
        self.name, self.kind = name, kind

    def next(self, s: State) -> WorkPlan | None:
        if s.finish is not None or s.inflight or not s.pending:
            return None
        return WorkPlan(s.request_id, self.name, ShapeSignature(self.kind, self.name), s.pending[0])

    def launched(self, s: State, plan: WorkPlan) -> None:
        s.pending.pop(0)
        s.inflight = True

    def expects(self, s: State, plan: WorkPlan) -> bool:
        return s.finish is None and s.inflight

    def advance(self, s: State, plan: WorkPlan, row: Any) -> bool:
        s.inflight = False
        s.made.append(row)
        s.fresh = [row]
        self._end(s)
        return True

    def feed(self, s: State, items: Sequence[Any], upstream: FinishReason | None) -> None:
        s.pending += items
        s.upstream = s.upstream or upstream
        self._end(s)

    def _end(self, s: State) -> None:
        if s.upstream is not None and not s.pending and not s.inflight and s.finish is None:
            s.finish = s.upstream

    def finalize(self, s: State) -> list[Any]:
        return list(s.made)


class Built:
    def __init__(self, name: str, kind: Step, executor: Halves) -> None:
        self.loop, self.executors = Relay(name, kind), {kind: executor}
        self.buckets: Mapping[Hashable, list[int]] = {}
        self.pools: Mapping[str, int] = {}

    def start(self, context: AddedContext) -> State:
        return State(context.request_id)


class Samples:
    """Takes audio chunks; its launch's output [B, N] stays on the device: each row hands on a view of it."""

    takes, gives = "audio", "samples"
    outputs: list[torch.Tensor] = []

    def launch(self, chunks: list[np.ndarray]) -> Kept[torch.Tensor, torch.Tensor]:
        n = max(c.shape[1] for c in chunks)
        out = torch.zeros(len(chunks), n)                                   # [B, N] the "device" output
        for b, c in enumerate(chunks):
            out[b, : c.shape[1]] = torch.from_numpy(c[0])
        self.outputs.append(out)
        return Kept(torch.tensor([c.shape[1] for c in chunks]), out)

    def read(self, host: Kept[np.ndarray, torch.Tensor], batch: Batch) -> list[torch.Tensor]:
        return [host.device[b, : int(host.host[b])] for b in range(len(batch.plans))]  # views, no copy

    def build(self, name: str, settings: Mapping[str, object], host: Host) -> Built:
        return Built(name, Step.SAMPLES, Halves(lambda b: [p.payload.audio for p in b.plans], self.launch, self.read))


class Take:
    """Takes the rows as they were handed (tensors); its result rows are the very tensors it was fed."""

    takes, gives = "samples", None

    def build(self, name: str, settings: Mapping[str, object], host: Host) -> Built:
        return Built(name, Step.TAKE, Halves(lambda b: [p.payload for p in b.plans], lambda rows: None,
                                             lambda host, b: [p.payload for p in b.plans]))


SAMPLES, TAKE = Samples(), Take()


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    registry.register("twoloop", "twoloop")
    registry.register_added_loop("samples", "test_kept:SAMPLES")
    registry.register_added_loop("take", "test_kept:TAKE")
    try:
        yield
    finally:
        registry.unregister("twoloop")
        registry.unregister_added_loop("samples")
        registry.unregister_added_loop("take")


def test_items_handed_between_loops_stay_the_executors_tensors():
    Samples.outputs.clear()
    with Runtime(card(), add_loops=["samples", "take=take"]) as rt:
        handles = rt.submit_many([{"prompt": [1, 2, 3 + i], "tokens": 6 + 3 * i, "stream": True} for i in range(3)])
        for h in handles:
            r = h.result(120)
            assert r.error is None
            taken = r.added["take"]
            assert [t.shape[0] for t in taken] == [c.audio.shape[1] for c in h]  # every chunk, in order
            assert torch.equal(torch.cat(taken), torch.from_numpy(r.audio[0]))
            storages = {o.untyped_storage().data_ptr() for o in Samples.outputs}
            assert all(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in storages for t in taken)
        assert rt.engine.graph.specs["samples"].feeds == ("take",)


def test_two_added_loops_with_one_work_kind_are_refused_naming_the_field():
    from v2.card import CardError

    with pytest.raises(CardError, match=r"add_loops\.again: its work kind <Step\.SAMPLES: 'kept_samples'> is one the "
                                        r"graph has already"):
        Runtime(card(), add_loops=["samples", "again=samples"])
