"""MOSS-TTS-Local's vocoder loop: the kit's chunk stream (v2/kit/chunks.py) named
`LoopKind.VOCODER` on the vocoder expert; a chunk's frames are 12 codes each, its audio 48 kHz stereo.
`VocoderState`, `VocoderResult` and `ChunkPlan` are the runtime's. This family has no left context.
Must not know: tensors on a device, batching, other requests, the TTS model.
"""

from __future__ import annotations

from v2.contracts import AudioChunk
from v2.families.moss_tts_local.card import VocoderSettings
from v2.families.moss_tts_local.kinds import LoopKind
from v2.kit.chunks import ChunkLoop, ChunkPlan, ChunkResult, ChunkStream

EXPERT = "vocoder"
VocoderState = ChunkStream
VocoderResult = ChunkResult
__all__ = ["AudioChunk", "ChunkPlan", "EXPERT", "VocoderLoop", "VocoderResult", "VocoderState"]


class VocoderLoop(ChunkLoop):
    def __init__(self, settings: VocoderSettings) -> None:
        super().__init__(settings, LoopKind.VOCODER, EXPERT)
