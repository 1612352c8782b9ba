"""The seam between the runtime and a model family: what a family gives the runtime, as small protocols. No torch.

Owns: what the runtime reads of a family's own values (`Request`, `Prepared`) and what a family
reads of a stored voice (`StoredVoice`); and the protocols each consumer of a bound family types against, no
more:
- `EngineFamily`: what the engine thread drives (engine.py, lifecycle.py, scatter.py);
- `FrontFamily`: what the caller's side of `Runtime` calls (parse, prepare, encode, weight updates);
- `ServedFamily`: what outer layers (the server, the CLI, rollouts) read through `Runtime`: the audio's format,
  built-in voices, the request fields it takes;
- optional capabilities, each checked with `isinstance`: `TextInput` (text fed while a request runs) and
  `VoiceArrays` (stored voices that carry more than codes); `VoiceEmbedding` (a voice made from a precomputed
  speaker embedding);
- `Family`: all three, what a family package's `Factory` binds (`FactoryBase`: a `Factory` whose `bind` is
  the bound family's class).
The parts a family hands the engine thread live beside it and are re-exported here, so a family imports the
whole seam from this module: loops.py (`Executor`, `Halves`, the driven loops `Loop`, `FedLoop`, `PagedLoop`,
`FrontLoop` with `FrontState`, `KVSpec`, `KVOps`, `PagedKV`, `Needs`) and loop_graph.py (`LoopSpec`,
`LoopGraph`).
The runtime imports this module and never a family; a family implements it.
Must not know: any family, tensors, models, threads (their types are named for the checker only).
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING, Any, Callable, Generic, Hashable, Mapping, NamedTuple, Protocol, Sequence, TypeVar,
    runtime_checkable,
)

from v2.contracts import FinishReason, LoopState
from v2.runtime.loop_graph import LAST, LoopGraph, LoopSpec  # re-exported: the graph's home is loop_graph.py
from v2.runtime.loops import (  # re-exported: the loops' and executors' home is loops.py
    AnyExecutor, AnyFedLoop, AnyFrontLoop, AnyLoop, AnyPagedLoop, Batch, Executor, FedLoop, FrontLoop, FrontState,
    Halves, KVOps, KVSpec, Loop, Needs, PagedKV, PagedLoop, PagedState, Publishing,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    import torch
    from torch import Tensor

    from v2.card import ModelCard
    from v2.runtime.results import SpeechResult
    from v2.runtime.records import RequestRecord
    from v2.runtime.weight_updates import WeightNames

LaunchState = Callable[[Callable[[], object]], object]  # queues a device state change on the engine's stream
C = TypeVar("C", bound="ModelCard", contravariant=True)  # a family's card class


# ----- what the runtime reads of a family's own values ----------------------------------------------------
class Request(Protocol):
    """A family's typed request, as the runtime reads it (the rest is the family's)."""

    @property
    def stream(self) -> bool: ...            # its chunks stream to the handle as they are made
    @property
    def timeout(self) -> float | None: ...   # seconds from submit; then it ends ("abort")
    @property
    def voice(self) -> str | None: ...       # a stored voice's name (the runtime looks it up)


class StoredVoice(Protocol):
    """A stored voice as a family reads it (the voice store's entries, `v2.voices.store.Voice`, are these; the
    seam names no store)."""

    @property
    def name(self) -> str: ...
    @property
    def codes(self) -> NDArray[Any]: ...                      # int64 [N, G]: the recording's codes
    @property
    def text(self) -> str | None: ...                         # its transcript, when known
    @property
    def arrays(self) -> Mapping[str, NDArray[Any]]: ...       # the named float32 arrays (e.g. "x_vector")


class Prepared(Protocol):
    """What a family prepared of a request at submit (`prepare`), as the runtime reads it."""

    @property
    def rows(self) -> Tensor | None: ...    # the first prompt [T, W] (None: not laid out yet, e.g. an open request)
    @property
    def inputs(self) -> tuple[object, ...]: ...  # inputs for the front loop (recordings to encode)


# ----- the bound family, as each consumer sees it ------------------------------------------------------
class EngineFamily(Protocol):
    """What the engine thread drives. The loops through `graph` and the executors through `executors` every
    step; in a request's order: `encoded` once its front work is done (the prompt laid out again), `needs` and
    `start` at admission (then `admitted` for device state: settings, fresh codec state), each paged loop's
    `recompute` (`paged_kv`) after a preemption, `more_input` when a loop waits for input (a long text's next segment, text fed to
    an open request) or, with `loop` None, when an open request waiting for admission got input (its first
    prompt's rows, or None while it has not enough), and `result` at the end. `more_input(record, loop)`
    returns a new prompt for a paged loop (the runtime gives it KV blocks; a fed paged loop's first prompt
    comes this way, once its first input arrived), or None: the family handed the
    loop what it needed itself (through the loop's own calls), or there is nothing yet (the loop stays
    waiting, holding no batch row; the runtime asks again when more input arrives), or the input has ended
    (the loop ends)."""

    @property
    def graph(self) -> LoopGraph: ...
    @property
    def executors(self) -> Mapping[Hashable, AnyExecutor]: ...  # by work kind, in launch order
    @property
    def buckets(self) -> Mapping[Hashable, list[int]]: ...  # batch-size buckets per kind (absent: unpadded)
    @property
    def pools(self) -> Mapping[str, int]: ...             # slot pools: name -> slots
    @property
    def prefill_budget(self) -> int: ...                  # prompt rows prefilled per step, all requests together
    @property
    def max_buffered_chunks(self) -> int: ...             # chunks a subscriber may fall behind
    @property
    def weights(self) -> torch.nn.Module: ...             # what weight updates write
    @property
    def sample_rate(self) -> int: ...                     # an error result's empty audio and codes
    @property
    def channels(self) -> int: ...
    @property
    def code_width(self) -> int: ...

    def bind(self, launch: LaunchState) -> None: ...
    def thread_setup(self) -> None: ...
    def front_start(self, slots: list[int]) -> None: ...
    def encoded(self, record: RequestRecord) -> Tensor | None: ...
    def needs(self, record: RequestRecord) -> Needs: ...
    def start(self, record: RequestRecord, slots: Mapping[str, int],
              share_from: int | None) -> dict[Hashable, LoopState]: ...
    def admitted(self, record: RequestRecord) -> None: ...
    def paged_kv(self) -> Mapping[Hashable, PagedKV]: ...  # each paged loop's KV, by loop name (graph.paged's)
    def more_input(self, record: RequestRecord, loop: Hashable | None) -> Tensor | None: ...
    def result(self, record: RequestRecord, outputs: Mapping[Hashable, object], reason: FinishReason,
               now: float) -> SpeechResult: ...
    def stats(self) -> Mapping[str, object]: ...


class FrontFamily(Protocol):
    """What the caller's side of `Runtime` calls: `parse` (a dict of fields -> the family's typed request;
    a `RequestError` whose `field` names the field), `prepare` (limits, the initial prompt layout),
    `check_group` (requests sharing one prompt), `read_input` / `front_state` (a recording for the front
    loop), and the weights and names an update writes. `graph` tells it whether the card makes audio."""

    @property
    def name(self) -> str: ...
    @property
    def graph(self) -> LoopGraph: ...
    @property
    def device(self) -> torch.device: ...                 # where its experts run (the default stream's device)
    @property
    def max_waiting(self) -> int: ...
    @property
    def max_buffered_chunks(self) -> int: ...
    @property
    def code_width(self) -> int: ...                # codes per frame, and each code's range (a voice's checks)
    @property
    def codebook_size(self) -> int: ...
    @property
    def weights(self) -> torch.nn.Module: ...
    @property
    def weight_names(self) -> WeightNames: ...

    def parse(self, request: object) -> Request: ...
    def prepare(self, request: Request, *, voice: StoredVoice | None = None) -> Prepared: ...
    def check_group(self, group: Sequence[tuple[Request, Prepared]]) -> None: ...
    def read_input(self, source: object) -> object: ...
    def front_state(self, request_id: int, inputs: tuple[object, ...]) -> FrontState: ...


class ServedFamily(Protocol):
    """What outer layers read through `Runtime`: the audio it makes (Hz, channels, frames per second), the
    checkpoint's built-in voices a request names as `speaker` (`()`: none), the request fields `parse`
    takes (what a server may send) and the keys of its nested `sampling` (`()`: the runtime's own)."""

    @property
    def name(self) -> str: ...
    @property
    def sample_rate(self) -> int: ...
    @property
    def channels(self) -> int: ...
    @property
    def frame_rate(self) -> float: ...
    @property
    def speakers(self) -> tuple[str, ...]: ...
    @property
    def request_fields(self) -> frozenset[str]: ...
    @property
    def sampling_keys(self) -> tuple[str, ...]: ...


class Family(EngineFamily, FrontFamily, ServedFamily, Protocol):
    """One model family bound to its card and experts: what its `Factory` binds and the runtime receives at
    construction. Each part of the runtime types against the part it uses."""


@runtime_checkable
class TextInput(Protocol):
    """What a family adds to take a request's text while it runs (`Runtime.open`). `open_text` checks the
    request like `parse` + `prepare` do, without its text (or with the text's first piece as `text`), and
    returns (request, work) with `work.rows` None and `work.inputs` as `prepare` gives them; `feed(request,
    work, text, end=)` is called on the caller's thread with each piece (`end`: the text is complete) and
    returns whether the engine has new input to hand over (`more_input`); it raises `RequestError` naming the
    field for a piece it refuses, and then takes none of it. Callers serialise `feed` per request."""

    def open_text(self, request: object, *, voice: StoredVoice | None = None,
                  split: str = "sentence") -> tuple[Request, Prepared]: ...
    def feed(self, request: Request, work: Prepared, text: str, *, end: bool = False) -> bool: ...


@runtime_checkable
class VoiceArrays(Protocol):
    """What a family adds whose stored voices carry more than codes (e.g. a speaker embedding):
    `voice_arrays` (name -> shape of each float32 array a voice carries; empty: codes alone), `read_voice`
    (the input a stored voice is encoded from, as `read_input`) and `voice_outputs(front_state)` (the arrays
    of a finished front-loop run)."""

    @property
    def voice_arrays(self) -> Mapping[str, tuple[int, ...]]: ...
    def read_voice(self, source: object) -> object: ...
    def voice_outputs(self, state: FrontState) -> Mapping[str, NDArray[np.float32]]: ...


@runtime_checkable
class VoiceEmbedding(Protocol):
    """What a family adds whose voice can be made from a precomputed speaker embedding alone (no recording):
    `voice_from_embedding(value)` -> the arrays such a voice carries (`voice_arrays`' names), the value
    checked (its width, finite: `v2.voices.arrays.check_embedding`), refusing a `FieldError` naming
    `speaker_embedding` where its checkpoint cannot (e.g. one without a speaker encoder). Such a voice has no
    codes ([0, G]) and no transcript: the family speaks it from its arrays alone. A family without this
    takes no embedding (its voices are what a recording encodes to)."""

    def voice_from_embedding(self, embedding: object) -> Mapping[str, NDArray[np.float32]]: ...


class VoiceSpec(NamedTuple):
    """What a voice store on a card checks its voices against: codes per frame, each code's range, and the
    float32 arrays every voice carries, name -> shape (empty: codes alone). A bound family has the same as
    `code_width`, `codebook_size`, `voice_arrays`."""

    width: int
    codebook_size: int
    arrays: Mapping[str, tuple[int, ...]]


class Factory(Protocol[C]):
    """A family package's `FAMILY` (`v2.card.family_of`). `bind` and `experts` build a runtime's family (the
    experts are the family's own: what `experts` returns, `bind` takes); `voice_spec` and `precheck` read
    the card and the checkpoint's config files only (no weights, no device), so a command that needs no
    model loads none and a refusal the config decides comes first."""

    name: str

    def bind(self, *args: Any, **kwargs: Any) -> Family: ...  # (card, *experts, graphs=True, **named)
    def experts(self, card: C, *, checkpoint: str | None = None, codec_checkpoint: str | None = None,
                device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> dict[str, object]: ...
    def voice_spec(self, card: C, checkpoint: str | None = None) -> VoiceSpec: ...
    def precheck(self, card: C, fields: Mapping[str, object], checkpoint: str | None = None) -> None:
        """Refuse (a `RequestError` naming the field) what the card and the checkpoint's config decide about
        request `fields`; what they cannot decide is left to `parse` and `prepare`."""


class FactoryBase(Generic[C]):
    """The base of a family package's `FAMILY` (a `Factory`): `bind` is the bound family's class (`bound`)
    called with the card and its experts, so a subclass names the class and gives `name`, `experts`,
    `voice_spec` and `precheck` (the checker holds `bound` to `Family`)."""

    name: str
    bound: Callable[..., Family]

    def bind(self, *args: Any, **kwargs: Any) -> Family:
        return self.bound(*args, **kwargs)
