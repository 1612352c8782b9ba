"""The Qwen3-TTS speaker encoder: a 24 kHz waveform -> log-mel -> ECAPA-TDNN -> one x-vector (a talker row).

Owns: the log-mel front-end on the shared Slaney filterbank (v2/models/mel.py)
(reflect pad, STFT without centring, magnitude, log), and the ECAPA-TDNN under the release's key names
(`blocks.0` TDNN, `blocks.1..` SE-Res2Net, `mfa`, `asp` attentive statistics pooling, `fc`). Every Conv1d
keeps the length with reflect padding (left = total // 2), as torch's `padding="same"` does.
Must not know: the talker, prompts, files, the runtime.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from v2.models.mel import mel_filterbank
from v2.models.persist import persistent
from v2.models.qwen3_tts.config import SpeakerEncoderConfig


class MelFrontEnd(nn.Module):
    """waveform [B, N] in [-1, 1] -> log-mel [B, frames, mel_dim]."""

    def __init__(self, cfg: SpeakerEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self._tables: dict[torch.device, tuple[Tensor, Tensor]] = {}  # computed on first use per device

    def tables(self, device: torch.device) -> tuple[Tensor, Tensor]:
        """The filterbank [mel_dim, n_fft // 2 + 1] and the periodic Hann window [win_size] on `device`."""
        if device not in self._tables:
            self._tables[device] = self._made_tables(device)
        return self._tables[device]

    @persistent
    def _made_tables(self, device: torch.device) -> tuple[Tensor, Tensor]:
        cfg = self.cfg
        fb = mel_filterbank(cfg.sample_rate, cfg.n_fft, cfg.mel_dim, cfg.fmin, cfg.mel_fmax)
        return fb.to(device), torch.hann_window(cfg.win_size, device=device)

    def forward(self, wav: Tensor) -> Tensor:
        cfg = self.cfg
        pad = (cfg.n_fft - cfg.hop_size) // 2
        if wav.shape[-1] <= pad:
            raise ValueError(f"reference audio too short: {wav.shape[-1]} samples, need more than {pad}")
        filters, window = self.tables(wav.device)
        x = torch.nn.functional.pad(wav.float()[:, None], (pad, pad), mode="reflect")[:, 0]  # [B, N + 2 pad]
        spec = torch.stft(x, cfg.n_fft, hop_length=cfg.hop_size, win_length=cfg.win_size, window=window,
                          center=False, normalized=False, onesided=True, return_complex=True)  # [B, F, frames]
        mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
        mel = torch.matmul(filters, mag)  # [B, mel, frames]
        return torch.log(mel.clamp(min=1e-5)).transpose(1, 2)


def _conv(cin: int, cout: int, kernel: int = 1, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(cin, cout, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class TDNN(nn.Module):
    """Conv1d + ReLU (key `conv`)."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.conv = _conv(cin, cout, kernel, dilation)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.conv(x))


class Res2Net(nn.Module):
    def __init__(self, channels: int, scale: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.scale = scale
        width = channels // scale
        self.blocks = nn.ModuleList(TDNN(width, width, kernel, dilation) for _ in range(scale - 1))

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.chunk(x, self.scale, dim=1)
        outs = [parts[0]]
        for i in range(1, self.scale):
            inp = parts[i] if i == 1 else parts[i] + outs[-1]
            outs.append(self.blocks[i - 1](inp))
        return torch.cat(outs, dim=1)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, se_channels: int) -> None:
        super().__init__()
        self.conv1 = _conv(channels, se_channels)
        self.conv2 = _conv(se_channels, channels)

    def forward(self, x: Tensor) -> Tensor:
        s = torch.sigmoid(self.conv2(torch.relu(self.conv1(x.mean(dim=2, keepdim=True)))))  # [B, C, 1]
        return x * s


class SERes2NetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, scale: int, se_channels: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.tdnn1 = TDNN(cin, cout, 1, 1)
        self.res2net_block = Res2Net(cout, scale, kernel, dilation)
        self.tdnn2 = TDNN(cout, cout, 1, 1)
        self.se_block = SqueezeExcite(cout, se_channels)

    def forward(self, x: Tensor) -> Tensor:
        return self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x)))) + x


def _stats(x: Tensor, w: Tensor, eps: float = 1e-12) -> tuple[Tensor, Tensor]:
    """Weighted mean and std over time: x [B, C, L], w [B, C or 1, L] summing to 1 -> [B, C] each."""
    mean = (w * x).sum(2)
    std = torch.sqrt((w * (x - mean[:, :, None]).pow(2)).sum(2).clamp(eps))
    return mean, std


class AttentiveStatsPool(nn.Module):
    def __init__(self, channels: int, attention_channels: int) -> None:
        super().__init__()
        self.tdnn = TDNN(3 * channels, attention_channels, 1, 1)
        self.conv = _conv(attention_channels, channels)

    def forward(self, x: Tensor) -> Tensor:
        """x [B, C, L] -> [B, 2C] (weighted mean, weighted std)."""
        length = x.shape[-1]
        uniform = torch.full((x.shape[0], 1, length), 1.0 / length, dtype=x.dtype, device=x.device)
        mean, std = _stats(x, uniform)
        context = torch.cat([x, mean[:, :, None].expand(-1, -1, length), std[:, :, None].expand(-1, -1, length)], 1)
        attn = torch.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)  # [B, C, L]
        mean, std = _stats(x, attn)
        return torch.cat([mean, std], dim=1)


class SpeakerEncoder(nn.Module):
    """ECAPA-TDNN (release prefix `speaker_encoder.`) with its mel front-end (no weights)."""

    def __init__(self, cfg: SpeakerEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        ch, ks, ds = cfg.channels, cfg.kernel_sizes, cfg.dilations
        self.mel = MelFrontEnd(cfg)
        self.blocks = nn.ModuleList([TDNN(cfg.mel_dim, ch[0], ks[0], ds[0])])
        for i in range(1, len(ch) - 1):
            self.blocks.append(SERes2NetBlock(ch[i - 1], ch[i], cfg.res2net_scale, cfg.se_channels, ks[i], ds[i]))
        self.mfa = TDNN(ch[-1], ch[-1], ks[-1], ds[-1])
        self.asp = AttentiveStatsPool(ch[-1], cfg.attention_channels)
        self.fc = _conv(2 * ch[-1], cfg.enc_dim)

    def forward(self, mel: Tensor, trace: dict[str, Tensor] | None = None) -> Tensor:
        """mel [B, frames, mel_dim] -> x-vectors [B, enc_dim]. `trace` collects `block{i}` [B, C, L],
        `mfa` [B, C, L] and `asp` [B, 2C]."""
        x = mel.transpose(1, 2)  # [B, mel, L]
        outs = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            outs.append(x)
            if trace is not None:
                trace[f"block{i}"] = x
        x = self.mfa(torch.cat(outs[1:], dim=1))
        pooled = self.asp(x)
        if trace is not None:
            trace["mfa"], trace["asp"] = x, pooled
        return self.fc(pooled[:, :, None])[:, :, 0]

    @torch.no_grad()
    def embed_waveform(self, wav: Tensor) -> Tensor:
        """wav [B, N] or [N] at `cfg.sample_rate`, same length per batch -> [B, enc_dim] (or [enc_dim])."""
        single = wav.dim() == 1
        w = wav[None] if single else wav
        dtype = self.fc.weight.dtype
        out = self(self.mel(w.to(self.fc.weight.device)).to(dtype))
        return out[0] if single else out
