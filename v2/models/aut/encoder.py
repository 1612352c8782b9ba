"""The AuT audio encoder (release prefix `thinker.audio_tower.`): log-mel clips -> rows of the reading decoder's width.

Owns: the chunking (2 * n_window mel frames a chunk; every chunk right-padded with zeros to the longest chunk
of the call, as the reference pads them), the three 3x3 stride-2 convs with GELU, `conv_out`, the per-chunk
sinusoidal positions, and the layer stack's maths, the one form every user runs: `Windows` (several clips' rows,
clip after clip, cut into attention windows of rows_after_convs(2 * n_window) * n_window_infer / (2 * n_window)
rows per clip), `encoder_layer` (one windowed non-causal pre-LN layer over all those rows: each linear on kept
`exact.TILE`-row tiles, every window in one `exact.attention` call, right-padded to the longest window with the
padding keys masked) and `AudioEncoder.encode_rows` (the layers, `ln_post`, `proj1` -> GELU -> `proj2`). One
clip is the same call with one clip (`EncoderLayer.forward`).
Exact on the CPU: the convs are `exact.linear` over unfolded 3x3 patches and every projection runs
`exact.linear`'s calls, attention is `exact.attention`, whose masked keys add exactly nothing, so a row's bits
do not depend on how many chunks, clips or windows share the call. One `encode` call is one prompt's clips (the
reference encodes a prompt's clips together, and the zero padding of a short last chunk reaches its last kept
rows: see `encode`). Inference only (autograd off in the layers).
Must not know: tokens, prompts, the decoders that read the rows, requests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models import exact
from v2.models.module_list import module_list_of
from v2.models.aut.config import AudioEncoderConfig
from v2.models.aut.features import rows_after_convs
from v2.models.aut.kept import KeptBuffers, gelu_into


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

    @torch.no_grad()
    def forward(self, x: Tensor, window: int) -> Tensor:
        """x [N, d] (one clip's rows) attending inside consecutive windows of `window` rows: `encoder_layer`
        with one clip."""
        return encoder_layer(self, x, Windows.of([x.shape[0]], window, x.device), KeptBuffers())


@dataclass(frozen=True)
class Windows:
    """Several clips' rows [R, d] (clip after clip, `sizes` rows each) cut into attention windows: each clip's
    rows in consecutive windows of `window` rows (its last one shorter), none across two clips. `count` windows
    of at most `width` rows. When they differ: `gather` [count * width], the row each padded slot reads (a
    padding slot reads row 0); `back` [R], each row's slot; `keys` [count, 1, 1, width], the slots that are keys;
    `pad`, the padding slots (their values are set to -0.0: a masked key's weight times -0.0 adds nothing to any
    sum, whatever row 0 holds). All None when every window has `width` rows (the rows are the windows' rows
    already)."""

    sizes: tuple[int, ...]
    count: int
    width: int
    gather: Tensor | None = None
    back: Tensor | None = None
    keys: Tensor | None = None
    pad: Tensor | None = None

    @classmethod
    def of(cls, sizes: Sequence[int], window: int, device: torch.device) -> Windows:
        if window < 1 or not sizes or min(sizes) < 1:
            raise ValueError(f"windows: clips of >= 1 row and window >= 1 are needed, got {list(sizes)}, {window}")
        spans, start = [], 0  # (first row, rows) of every window
        for n in sizes:
            spans += [(start + o, min(window, n - o)) for o in range(0, n, window)]
            start += n
        width = max(n for _, n in spans)
        if all(n == width for _, n in spans):
            return cls(tuple(sizes), len(spans), width)
        first = torch.tensor([s for s, _ in spans])[:, None]  # [W, 1]
        valid = torch.arange(width)[None] < torch.tensor([n for _, n in spans])[:, None]  # [W, width]
        at = torch.where(valid, first + torch.arange(width)[None], 0)  # padded slot -> row (padding: row 0)
        return cls(tuple(sizes), len(spans), width, at.view(-1).to(device),
                   valid.view(-1).nonzero().squeeze(1).to(device), valid.to(device)[:, None, None, :],
                   (~valid).view(-1).nonzero().squeeze(1).to(device))


def encoder_layer(layer: EncoderLayer, x: Tensor, win: Windows, bufs: KeptBuffers) -> Tensor:
    """One layer over several clips' rows x [R, d], each window of `win` attending inside itself: pre-LN
    attention (every window in one call, right-padded to `win.width`, the padding keys masked), then the pre-LN
    MLP; the linears on `bufs`' kept tiles. -> [R, d] (a new tensor: x is not written). Autograd off (the
    caller's: the tiles are written in place)."""
    r, d = x.shape
    a, heads = layer.self_attn, layer.heads
    h = bufs.tile("h", r, d, x)
    h.copy_(layer.self_attn_layer_norm(x))
    qkv = [bufs.linear(n, h, p) for n, p in (("q", a.q_proj), ("k", a.k_proj), ("v", a.v_proj))]  # [R, d] each
    if win.gather is not None:  # a padded slot reads row 0 (a masked key; its query's output is dropped)
        qkv = [t.index_select(0, win.gather) for t in qkv]  # [W width, d] each
        assert win.pad is not None
        qkv[2].index_fill_(0, win.pad, -0.0)  # its value adds -0.0 (nothing), not 0 x row 0 (NaN where row 0 is inf)
    q, k, v = (t.view(win.count, win.width, heads, d // heads).transpose(1, 2) for t in qkv)  # [W, heads, width, hd]
    o = exact.attention(q, k, v, win.keys).transpose(1, 2)  # [W, width, heads, hd]
    att = bufs.tile("att", r, d, x)
    if win.back is None:
        att.view(win.count, win.width, heads, d // heads).copy_(o)
    else:
        att.copy_(o.reshape(win.count * win.width, d).index_select(0, win.back))  # [R, d] in row order
    x = x + bufs.linear("out", att, a.out_proj)
    h.copy_(layer.final_layer_norm(x))
    g = bufs.tile("ffn", r, layer.fc1.weight.shape[0], x)
    gelu_into(bufs.linear("fc1", h, layer.fc1), g)
    return x + bufs.linear("fc2", g, layer.fc2)


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
        return self.encode_rows(self.conv_rows(mels))

    @torch.no_grad()
    def encode_rows(self, rows: list[Tensor], bufs: KeptBuffers | None = None) -> list[Tensor]:
        """Clips' rows entering the layers [N_i, d_model] each -> [N_i, output_dim] each: all clips' rows through
        every `encoder_layer` together (windows per clip), then `ln_post`, `proj1` -> GELU -> `proj2`. `bufs`:
        kept tiles to reuse (the caller's, one call at a time), else a set made for this call."""
        bufs = KeptBuffers() if bufs is None else bufs
        x = torch.cat(rows) if len(rows) > 1 else rows[0]  # [R, d]: every clip's rows
        win = Windows.of([t.shape[0] for t in rows], self.window, x.device)
        for layer in self.layers:
            x = encoder_layer(layer, x, win, bufs)
        r = x.shape[0]
        h = bufs.tile("h", r, x.shape[1], x)
        h.copy_(self.ln_post(x))
        g = bufs.tile("g", r, self.proj1.weight.shape[0], x)
        gelu_into(bufs.linear("proj1", h, self.proj1), g)
        return list(bufs.linear("proj2", g, self.proj2, fresh=True).split(win.sizes))  # [N_i, output_dim] each
