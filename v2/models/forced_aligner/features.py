"""The aligner's audio front end: one 16 kHz clip -> its log-mel features and its audio token count.

Owns: the release's short-clip rule (a clip under `MIN_SAMPLES` samples is zero-padded to it) before
AuT's Whisper log-mel (`aut.features.log_mel`: the same 128-bin Slaney filters, centred
STFT, last frame dropped, log10, clip max - 8 floor, (x + 4) / 4), so a clip's features are [mel,
samples // hop] of its own samples only: never another clip's padding (transformers pads a batch's waveforms
to the longest before the STFT, which moves a shorter clip's last frames and its floor: designs/model.md).
Must not know: the encoder's weights, words, tokens, the runtime.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from v2.models.aut.features import audio_token_count, log_mel
from v2.models.aut.config import AudioEncoderConfig

MIN_SAMPLES = 8000  # the release pads shorter clips to half a second of zeros


def clip_features(wave: Tensor, cfg: AudioEncoderConfig) -> Tensor:
    """wave [samples] float at `cfg.sampling_rate` -> log-mel [mel, max(samples, MIN_SAMPLES) // hop] float32."""
    if not isinstance(wave, Tensor) or wave.dim() != 1:
        raise ValueError(f"audio: one mono clip [samples] is expected, got {getattr(wave, 'shape', type(wave))}")
    if wave.shape[0] == 0:
        raise ValueError("audio: the clip is empty")
    if not torch.isfinite(wave).all():
        raise ValueError("audio: the clip holds NaN or infinite samples")
    x = wave.float()
    if x.shape[0] < MIN_SAMPLES:
        x = F.pad(x, (0, MIN_SAMPLES - x.shape[0]))
    return log_mel(x, cfg)


def audio_tokens(frames: int, cfg: AudioEncoderConfig) -> int:
    """`<|audio_pad|>` rows of a clip with `frames` mel frames (13 per 100 frames, then the rest's)."""
    return audio_token_count(frames, cfg)
