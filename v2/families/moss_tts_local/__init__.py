"""Driven loops: stateless objects that turn per-request state into work plans and take results back."""

from v2.families.moss_tts_local.ar_decode import ARDecodeLoop, ARState, FramePlan, FrameRow, PrefillPlan
from v2.families.moss_tts_local.vocoder import AudioChunk, ChunkPlan, VocoderLoop, VocoderState

__all__ = ["ARDecodeLoop", "ARState", "AudioChunk", "ChunkPlan", "FramePlan", "FrameRow", "PrefillPlan",
           "VocoderLoop", "VocoderState"]
