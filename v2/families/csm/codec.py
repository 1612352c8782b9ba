"""CSM's codec loop: the kit's chunk stream (v2/kit/chunks.py) named "codec" on the codec expert; a
chunk's frames are N codes each (the frames the reference decodes), its audio Mimi's 24 kHz mono. Its state,
plans and result are the runtime's (`ChunkStream`, `ChunkPlan`, `ChunkResult`).
Must not know: tensors on a device, batching, other requests, the backbone.
"""

from __future__ import annotations

from v2.families.csm.card import CodecSettings
from v2.kit.chunks import ChunkLoop

CODEC = "codec"  # the loop's name and its expert's


class CodecLoop(ChunkLoop):
    def __init__(self, settings: CodecSettings) -> None:
        super().__init__(settings, CODEC, CODEC)
