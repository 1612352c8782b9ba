"""The contract between driven loops and the runtime: plain data, no torch.

Owns: the kinds of work the runtime knows (`WorkUnitKind`; a family may add its own), `Kind` (an enum
hashed by identity, for a family's own kinds and loop names), execution profiles, the batch key
(`ShapeSignature`) and its buckets (`bucket_for`), what a loop asks for one step (`WorkPlan`, typed by
its payload; its `loop` is the family's name for the loop). `LoopState` is the base of every per-request
loop state: loops themselves hold none, and a loop has ended exactly when its state's `finish` is set (the
engine reads it there).
Must not know: tensors, models, devices, threads.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Generic, Hashable, TypeVar

P = TypeVar("P")


class Kind(enum.Enum):
    """An enum hashed by identity (its members are singletons): the engine keys dicts by kinds once per row
    per step, and `Enum.__hash__` is a Python call."""

    __hash__ = object.__hash__


class WorkUnitKind(Kind):
    PREFILL = "prefill"          # prompt rows through the backbone into a request's KV slot
    AR_FRAME = "ar_frame"        # one frame step of an AR sequence (v2/kit/sequence.py): its codes and logprobs
    AUDIO_CHUNK = "audio_chunk"  # N frames of a stream through the codec decoder
    ENCODE = "encode"            # reference recordings through the codec encoder into codes


class ExecutionProfile(Kind):
    SERVE = "serve"      # audio out
    ROLLOUT = "rollout"  # serve + a trajectory with per-codebook logprobs


class FinishReason(Kind):
    STOP = "stop"      # the stop head chose to stop
    LENGTH = "length"  # max_frames reached
    ABORT = "abort"    # cancelled, timed out, or the runtime closed
    ERROR = "error"    # a failure inside this request's work


@dataclass(frozen=True)
class ShapeSignature:
    """What a plan's batch looks like. Plans run in one batched call exactly when their keys are equal.

    `bucket` is a bucketed size (prefill rows, chunk frames), never an exact sequence length; 0 when
    the kind has none (every AR_FRAME batches with every other).
    """

    kind: Kind   # a `WorkUnitKind`, or a family's own (a `Kind` subclass)
    expert: str
    bucket: int = 0

    @property
    def batch_key(self) -> tuple[Kind, str, int]:
        return (self.kind, self.expert, self.bucket)


def bucket_for(n: int, buckets: list[int]) -> int:
    """The smallest bucket >= n (buckets ascending); n beyond the largest is an error."""
    for b in buckets:
        if b >= n:
            return b
    raise ValueError(f"{n} exceeds the largest bucket {buckets[-1]}")


@dataclass(slots=True)
class WorkPlan(Generic[P]):
    """One step of one request's loop: `payload` is the loop's plain data for the executor of its kind
    (e.g. `WorkPlan[FramePlan]`). Made once per row per step, so a plain slotted class; never mutated."""

    request_id: int
    loop: Hashable  # the loop that made it: its name in the family's graph (a family's own: an enum member, a string)
    signature: ShapeSignature
    payload: P


@dataclass
class LoopState:
    """Per-request mutable state of one loop (subclassed by each loop; written only by its loop).

    `fresh`: what the last `advance` made (frames for the loop it feeds; chunks, at the last loop, for the
    caller). `wants_input`: the loop waits for more input (it plans nothing and holds no batch row, but has
    not ended); the family gives it (`Family.more_input`)."""

    request_id: int
    finish: FinishReason | None = None
    fresh: list[Any] = field(default_factory=list)

    @property
    def wants_input(self) -> bool:
        return False


@dataclass(frozen=True)
class AudioChunk:
    """A piece of a stream: `audio` float32 [channels, n] (numpy), made from `frames` decoded frames."""

    seq: int
    audio: Any
    sample_rate: int
    frames: int
    final: bool
