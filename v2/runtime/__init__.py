"""The central runtime: one engine thread running every request's work as batched steps.

The names below load on first use, so importing a torch-free part of the runtime (the scheduler, the slot
pools) does not load torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {"AudioChunk": "v2.loops.vocoder", "Metrics": "v2.runtime.handles", "Runtime": "v2.runtime.runtime",
          "SpeechHandle": "v2.runtime.handles", "SpeechResult": "v2.runtime.handles", "Trajectory": "v2.rl.trajectory"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'v2.runtime' has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)
