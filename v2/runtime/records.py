"""The engine's record of each request: plain mutable data.

Owns: what the engine tracks per request between submit and result (the request, what its family prepared
of it, its prompt rows, its loops' states by loop name, the state of the work done before admission,
slots held, timestamps, group membership, weight version, its prompt's KV block keys; the prompts of its
other paged loops, given while it runs).
Must not know: any family's fields (they live in `work`), scheduling, executors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Hashable

from v2.contracts import LoopState
from v2.runtime.groups import Group
from v2.runtime.handles import SpeechHandle

if TYPE_CHECKING:
    from torch import Tensor

    from v2.runtime.family import FrontState, Request


@dataclass
class RequestRecord:
    id: int
    handle: SpeechHandle
    request: Request         # the family's typed request (`stream` and `timeout` are read here)
    work: Any                # what the family prepared of it at submit (its own: limits, settings, segments ...)
    rows: Tensor | None      # the current prompt: rows [T, W] (the paged KV keys and counts them)
    submitted: float
    states: dict[Hashable, LoopState] = field(default_factory=dict)  # loop name -> its state, from admission
    front: FrontState | None = None  # the state of its work before admission (references to encode), if any
    admitted: float | None = None
    first_audio: float | None = None
    error: str | None = None
    ended: bool = False
    slots: dict[str, int] = field(default_factory=dict)  # pool name -> slot held
    group: Group | None = None
    group_id: int = 0
    sample_id: int = 0
    version: int = 0  # weights it runs under, fixed at admission
    kv_keys: list[bytes] | None = None  # chained keys of its prompt's full KV blocks (made once it is ready)
    prompts: dict[Hashable, Tensor] = field(default_factory=dict)  # another paged loop's prompt, by loop name
    prompt_keys: dict[Hashable, list[bytes]] = field(default_factory=dict)  # and its blocks' keys
    input_ended: bool = False  # an open request: all its input has been given (`end_text`)
    unprompted: bool = False   # an open request waiting for the input its first prompt needs (not admissible)

    @property
    def ready(self) -> bool:
        """Its prompt is final: nothing left to do before admission."""
        return not self.unprompted and (self.front is None or self.front.finish is not None)
