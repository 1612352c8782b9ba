"""The Mimi codec (Kyutai's; the Sesame CSM-1B release's `codec_model`). Its encoder side (`MimiEncoder`) is
also the Qwen3-TTS speech tokenizer's encoder."""

from v2.models.mimi.config import MimiConfig
from v2.models.mimi.encoder import MimiEncoder

__all__ = ["MimiConfig", "MimiEncoder"]
