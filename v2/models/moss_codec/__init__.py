"""The codec experts: the MOSS-Audio-Tokenizer-v2 decoder (codes -> 48 kHz stereo, batched and streaming),
its encoder (waveforms -> codes, batched with lengths) and reference-audio preparation."""

from v2.models.moss_codec.audio_in import AudioError, prepare_reference
from v2.models.moss_codec.config import CodecConfig
from v2.models.moss_codec.decoder import CodecState, CodesError, MossAudioDecoder
from v2.models.moss_codec.encoder import MossAudioEncoder

__all__ = ["AudioError", "CodecConfig", "CodecState", "CodesError", "MossAudioDecoder", "MossAudioEncoder",
           "prepare_reference"]
