"""CSM's codec loop: the runtime's chunk stream (v2/runtime/chunks.py) named "codec" on the codec expert; a
chunk's frames are N codes each (the frames the reference decodes), its audio Mimi's 24 kHz mono.
`CodecState`, `CodecResult` and `ChunkPlan` are the runtime's.
Must not know: tensors on a device, batching, other requests, the backbone.
"""

from __future__ import annotations

from typing import Any

from v2.runtime.chunks import ChunkLoop, ChunkPlan, ChunkResult, ChunkStream

EXPERT = "codec"
CODEC = "codec"  # the loop's name
CodecState = ChunkStream
CodecResult = ChunkResult
__all__ = ["CODEC", "ChunkPlan", "CodecLoop", "CodecResult", "CodecState", "EXPERT"]


class CodecLoop(ChunkLoop):
    def __init__(self, settings: Any) -> None:
        super().__init__(settings, CODEC, EXPERT)
