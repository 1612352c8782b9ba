"""The central runtime, the engine core: one engine thread running every request's work as batched steps.
What families are made of is the family kit (v2/kit/, which this package never imports); the voice store is
v2/voices/ (held by `Runtime`). Where to read: designs/runtime.md.

The names below load on first use, so importing a torch-free part of the runtime (the scheduler, the slot
pools) does not load torch.
"""

from __future__ import annotations

from v2.lazy import lazy_names

_WHERE = {"AudioChunk": "v2.contracts", "Metrics": "v2.runtime.handles", "Runtime": "v2.runtime.runtime",
          "SpeechHandle": "v2.runtime.handles", "SpeechResult": "v2.runtime.handles", "Trajectory": "v2.rl.trajectory"}

__all__ = sorted(_WHERE)

__getattr__, __dir__ = lazy_names(__name__, _WHERE)
