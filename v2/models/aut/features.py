"""AuT's audio front end: a 16 kHz waveform -> the log-mel features the encoder reads.

Owns: Whisper's log-mel as the release's processor configures it (128 Slaney mel bins 0..8000 Hz, n_fft 400,
hop 160, periodic Hann window, centred STFT with reflect padding, power spectrum, last frame dropped,
log10 of max(mel, 1e-10), floored at the clip's max - 8, then (x + 4) / 4): [mel, samples // hop], and the
audio token count of a feature length (`audio_token_count`: the encoder's rows). The filterbank is the shared
Slaney one (v2/models/mel.py); the log, the floor and the scaling are Whisper's. One clip per call: the floor
is the clip's own max, so a clip's features never depend on another's.
Must not know: the encoder's weights, tokens, prompts, requests.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from v2.models.persist import persistent
from v2.models.aut.config import AudioEncoderConfig
from v2.models.mel import mel_filterbank


@functools.lru_cache(maxsize=4)
@persistent
def mel_filters(cfg: AudioEncoderConfig, device: torch.device) -> Tensor:
    """[n_fft // 2 + 1, mel] float32 Slaney filters (0 .. rate / 2), read-only."""
    return mel_filterbank(cfg.sampling_rate, cfg.n_fft, cfg.num_mel_bins, 0.0, cfg.sampling_rate / 2).T.contiguous().to(device)


def log_mel(wave: Tensor, cfg: AudioEncoderConfig) -> Tensor:
    """wave [samples] float at `cfg.sampling_rate` -> log-mel [mel, samples // hop] float32."""
    if wave.dim() != 1:
        raise ValueError(f"audio: one mono clip [samples] is expected, got shape {list(wave.shape)}")
    if wave.shape[0] < cfg.hop_length:
        raise ValueError(f"audio: {wave.shape[0]} samples is shorter than one {cfg.hop_length}-sample hop")
    x = wave.float()
    window = torch.hann_window(cfg.n_fft, device=x.device)  # periodic
    spec = torch.stft(x, cfg.n_fft, cfg.hop_length, window=window, center=True, pad_mode="reflect",
                      return_complex=True)  # [F, frames + 1]
    power = spec[:, :-1].abs() ** 2  # [F, frames]
    mel = mel_filters(cfg, x.device).T @ power  # [mel, frames]
    logs = torch.clamp(mel, min=1e-10).log10()
    logs = torch.maximum(logs, logs.max() - 8.0)
    return (logs + 4.0) / 4.0


def rows_after_convs(frames: int) -> int:
    """Rows the three stride-2 convs leave of a chunk of `frames` mel frames (ceil(ceil(ceil(n/2)/2)/2))."""
    for _ in range(3):
        frames = (frames - 1) // 2 + 1
    return frames


def audio_token_count(frames: int, cfg: AudioEncoderConfig) -> int:
    """The `<|audio_pad|>` count (= encoder output rows) of a clip with `frames` mel frames."""
    chunk = 2 * cfg.n_window
    full, rest = divmod(frames, chunk)
    return full * rows_after_convs(chunk) + (rows_after_convs(rest) if rest else 0)
