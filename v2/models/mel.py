"""The Slaney mel filterbank (librosa's default `filters.mel`), computed: shared by every log-mel front end (a
speaker encoder's, the AuT encoder's Whisper features).

Owns: the Slaney mel scale both ways and the triangular, area-normalised filters, in float64 then float32.
Must not know: windows, STFTs, logs, models.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _hz_to_mel(f: Tensor) -> Tensor:
    """Slaney mel scale: linear below 1 kHz (200/3 Hz per mel), logarithmic above."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return torch.where(f >= min_log_hz, min_log_mel + torch.log(f.clamp(min=1e-10) / min_log_hz) / logstep, f / f_sp)


def _mel_to_hz(m: Tensor) -> Tensor:
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return torch.where(m >= min_log_mel, min_log_hz * torch.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> Tensor:
    """[n_mels, n_fft // 2 + 1] float32 triangular filters on the Slaney mel scale with Slaney area
    normalisation (librosa's `filters.mel` defaults), computed in float64."""
    f64 = torch.float64
    fft_freqs = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1, dtype=f64)
    lo, hi = _hz_to_mel(torch.tensor(fmin, dtype=f64)), _hz_to_mel(torch.tensor(fmax, dtype=f64))
    mel_f = _mel_to_hz(torch.linspace(float(lo), float(hi), n_mels + 2, dtype=f64))  # [n_mels + 2] band edges
    fdiff = mel_f.diff()  # [n_mels + 1]
    ramps = mel_f[:, None] - fft_freqs[None, :]  # [n_mels + 2, F]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = torch.minimum(lower, upper).clamp(min=0.0)  # [n_mels, F]
    enorm = 2.0 / (mel_f[2:] - mel_f[:-2])
    return (weights * enorm[:, None]).float()
