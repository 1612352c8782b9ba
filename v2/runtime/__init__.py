"""The central runtime: one engine thread running every request's work as batched steps."""

from v2.loops.vocoder import AudioChunk
from v2.runtime.engine import Runtime
from v2.rollout import Trajectory
from v2.runtime.streams import Metrics, SpeechHandle, SpeechResult

__all__ = ["AudioChunk", "Metrics", "Runtime", "SpeechHandle", "SpeechResult", "Trajectory"]
