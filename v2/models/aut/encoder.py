"""The AuT audio encoder (release prefix `thinker.audio_tower.`): log-mel clips -> rows of the reading decoder's width.

Owns: the chunking (2 * n_window mel frames a chunk; every chunk right-padded with zeros to the longest chunk
of the call, as the reference pads them), the three 3x3 stride-2 convs with GELU, `conv_out`, the per-chunk
sinusoidal positions, the windowed non-causal pre-LN encoder layers (windows of rows_after_convs(2 * n_window)
* n_window_infer / (2 * n_window) rows, per clip), `ln_post`, `proj1` -> GELU -> `proj2`.
Exact on the CPU: the convs are `exact.linear` over unfolded 3x3 patches and every projection is
`exact.linear`, attention is `exact.attention` per window, so a row's bits do not depend on how many chunks or
windows share the call. One call is one prompt's clips (the reference encodes a prompt's clips together, and
the zero padding of a short last chunk reaches its last kept rows: see `encode`).
Must not know: tokens, prompts, the thinker, requests.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models import exact
from v2.models.module_list import module_list_of
from v2.models.aut.features import rows_after_convs
from v2.models.aut.config import AudioEncoderConfig


class Conv2d3x3(nn.Module):
    """Conv2d(cin, cout, 3, stride 2, padding 1) as unfolded patches through `exact.linear` (same weights)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cout, cin, 3, 3))
        self.bias = nn.Parameter(torch.empty(cout))

    def forward(self, x: Tensor) -> Tensor:
        """x [B, C, Hf, T] -> [B, cout, ceil(Hf/2), ceil(T/2)]."""
        b, _, hf, t = x.shape
        ho, to = (hf - 1) // 2 + 1, (t - 1) // 2 + 1
        patches = F.unfold(x, 3, padding=1, stride=2).transpose(1, 2)  # [B, ho * to, C * 9]
        y = exact.linear(patches, self.weight.flatten(1), self.bias)  # [B, ho * to, cout]
        return y.transpose(1, 2).reshape(b, -1, ho, to)


class SelfAttention(nn.Module):
    """q/k/v/out projections with biases (`self_attn.*`)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = exact.Linear(d, d), exact.Linear(d, d), exact.Linear(d, d)
        self.out_proj = exact.Linear(d, d)


class EncoderLayer(nn.Module):
    """Pre-LN: x + out_proj(MHA(self_attn_layer_norm(x))), then x + fc2(gelu(fc1(final_layer_norm(x))))."""

    def __init__(self, cfg: AudioEncoderConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.heads = cfg.num_heads
        self.self_attn = SelfAttention(d)
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=1e-5)
        self.fc1 = exact.Linear(d, cfg.ffn_dim)
        self.fc2 = exact.Linear(cfg.ffn_dim, d)
        self.final_layer_norm = nn.LayerNorm(d, eps=1e-5)

    def forward(self, x: Tensor, window: int) -> Tensor:
        """x [N, d] (one clip's rows) attending inside consecutive windows of `window` rows."""
        n, d = x.shape
        a = self.self_attn
        h = self.self_attn_layer_norm(x)
        q, k, v = (p(h).view(n, self.heads, d // self.heads).transpose(0, 1)  # [heads, N, hd]
                   for p in (a.q_proj, a.k_proj, a.v_proj))
        out = torch.empty_like(q)
        for s in range(0, n, window):
            e = min(n, s + window)
            out[:, s:e] = exact.attention(q[None, :, s:e], k[None, :, s:e], v[None, :, s:e])[0]
        x = x + a.out_proj(out.transpose(0, 1).reshape(n, d))
        return x + self.fc2(exact.gelu(self.fc1(self.final_layer_norm(x))))


def sinusoids(length: int, channels: int, device: torch.device) -> Tensor:
    """[length, channels]: sin(p * exp(-i ln(10000) / (channels/2 - 1))) for i < channels/2, then cos."""
    step = math.log(10000.0) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2, device=device).float())
    t = torch.arange(length, device=device)[:, None] * inv[None, :]  # [length, channels/2]
    return torch.cat([t.sin(), t.cos()], dim=1)


class AudioEncoder(nn.Module):
    def __init__(self, cfg: AudioEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c = cfg.downsample_hidden_size
        self.conv2d1 = Conv2d3x3(1, c)
        self.conv2d2 = Conv2d3x3(c, c)
        self.conv2d3 = Conv2d3x3(c, c)
        freq = rows_after_convs(cfg.num_mel_bins)
        self.conv_out = exact.Linear(c * freq, cfg.d_model, bias=False)
        self.layers = module_list_of(EncoderLayer(cfg) for _ in range(cfg.num_layers))
        self.ln_post = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.proj1 = exact.Linear(cfg.d_model, cfg.d_model)
        self.proj2 = exact.Linear(cfg.d_model, cfg.output_dim)

    @property
    def window(self) -> int:
        """Rows per attention window: a full chunk's rows * n_window_infer / (2 n_window) (104 at release)."""
        cfg = self.cfg
        return rows_after_convs(2 * cfg.n_window) * (cfg.n_window_infer // (2 * cfg.n_window))

    def conv_rows(self, mels: list[Tensor]) -> list[Tensor]:
        """Each clip's rows entering the layers [N_i, d_model] (after convs, conv_out and positions)."""
        size = 2 * self.cfg.n_window
        chunks = [m[:, s : s + size] for m in mels for s in range(0, m.shape[1], size)]  # [mel, len] each
        longest = max(c.shape[1] for c in chunks)
        x = torch.stack([F.pad(c, (0, longest - c.shape[1])) for c in chunks])[:, None]  # [chunks, 1, mel, longest]
        for conv in (self.conv2d1, self.conv2d2, self.conv2d3):
            x = exact.gelu(conv(x))  # [chunks, C, F', T']
        b, c, f, t = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).reshape(b, t, c * f))  # [chunks, T', d]: channel-major c * F' + f
        x = x + sinusoids(t, self.cfg.d_model, x.device)[None].to(x.dtype)
        kept = [x[i, : rows_after_convs(ch.shape[1])] for i, ch in enumerate(chunks)]
        out, i = [], 0
        for m in mels:
            n = -(-m.shape[1] // size)
            out.append(torch.cat(kept[i : i + n]))
            i += n
        return out

    def encode(self, mels: list[Tensor]) -> list[Tensor]:
        """One prompt's clips, log-mel [mel, L_i] each -> rows [N_i, output_dim] each (N_i =
        `audio_token_count(L_i)`). The clips are chunked together: a short last chunk is zero-padded to the
        longest chunk of the call before the convs, whose padding reaches its last kept rows, so encode a
        prompt's clips in one call to equal the reference."""
        if not mels:
            return []
        for i, m in enumerate(mels):
            if m.dim() != 2 or m.shape[0] != self.cfg.num_mel_bins or m.shape[1] < 1:
                raise ValueError(f"audio[{i}]: log-mel must be [{self.cfg.num_mel_bins}, frames >= 1], "
                                 f"got {list(m.shape)}")
        out = []
        for x in self.conv_rows(mels):
            for layer in self.layers:
                x = layer(x, self.window)
            out.append(self.proj2(exact.gelu(self.proj1(self.ln_post(x)))))
        return out
