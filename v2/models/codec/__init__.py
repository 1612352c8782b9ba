"""The vocoder expert: the MOSS-Audio-Tokenizer-v2 decoder (codes -> 48 kHz stereo), batched and streaming."""

from v2.models.codec.config import CodecConfig
from v2.models.codec.decoder import CodecState, CodesError, MossAudioDecoder

__all__ = ["CodecConfig", "CodecState", "CodesError", "MossAudioDecoder"]
