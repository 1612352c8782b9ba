"""The Qwen3-TTS-Tokenizer-12Hz codec: the decoder (codes [B, T, G] -> 24 kHz mono, whole-utterance and
streaming over per-slot state) and the Mimi-style encoder (waveforms -> codes)."""

from v2.models.qwen3_codec.audio_in import AudioError, prepare_mono
from v2.models.qwen3_codec.config import Qwen3CodecConfig
from v2.models.qwen3_codec.decoder import CodesError, Qwen3CodecDecoder, Qwen3CodecState
from v2.models.qwen3_codec.encoder import Qwen3CodecEncoder

__all__ = ["AudioError", "CodesError", "Qwen3CodecConfig", "Qwen3CodecDecoder", "Qwen3CodecEncoder",
           "Qwen3CodecState", "prepare_mono"]
