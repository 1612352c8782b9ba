"""Qwen3-TTS's codec loop: the kit's chunk stream (v2/kit/chunks.py) named "codec" on the codec
expert; a chunk's frames are G codes each, its audio 24 kHz mono. An in-context clone's reference codes
are its left context (`init(context=...)`): the stream's state then holds them as the public API's
decode of reference + frames does, and what is delivered is that decode with the reference's samples cut
(R x hop samples). Its state, plans and result are the runtime's (`ChunkStream`, `ChunkPlan`, `ChunkResult`).
Must not know: tensors on a device, batching, other requests, the talker.
"""

from __future__ import annotations

from v2.families.qwen3_tts.card import CodecSettings
from v2.kit.chunks import ChunkLoop, ChunkPlan

__all__ = ["CODEC", "ChunkPlan", "CodecLoop"]
CODEC = "codec"  # the loop's name and its expert's


class CodecLoop(ChunkLoop):
    """The codec loop on a card's `[loops.codec]` settings."""

    def __init__(self, settings: CodecSettings) -> None:
        super().__init__(settings, CODEC, CODEC)
