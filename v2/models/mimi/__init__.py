"""The Mimi codec (Kyutai's; the Sesame CSM-1B release's `codec_model`): 24 kHz mono waveforms <-> codes
[frames, num_quantizers] at 12.5 Hz, whole-utterance and streaming over per-slot state. Its encoder side
(`MimiEncoder`) is also the Qwen3-TTS speech tokenizer's encoder."""

from v2.models.mimi.config import MimiConfig
from v2.models.mimi.decoder import MimiState
from v2.models.mimi.encoder import MimiEncoder
from v2.models.mimi.model import CodesError, MimiModel

__all__ = ["CodesError", "MimiConfig", "MimiEncoder", "MimiModel", "MimiState"]
