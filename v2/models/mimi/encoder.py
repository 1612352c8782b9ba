"""Mimi's encoder side: mono waveforms -> latent frames -> codes (shared by the Mimi codec and the Qwen3-TTS
speech tokenizer's encoder, which is a Mimi encoder).

Owns: the SEANet convs (`encoder.layers.*`: causal MimiConv1d, each padding its own input with zeros on the
left and up to a whole number of strides on the right; residual blocks; ELU), the encoder transformer
(`encoder_transformer`, from step 0; a window of `sliding_window` steps or none, as the owner says), the
stride-2 `downsample` (replicate padding), the split RVQ's encode side, and `MimiEncoder.latent` with an
optional per-row length: a row of a right-padded batch is then computed as if alone (before each strided or
replicate-padded conv the row's positions past its own length are set to what its own padding would hold),
every op call-invariant on the CPU (`v2.models.mimi.ops`, `v2.models.exact`), so a row's latent and codes
are the same bits in any batch. Without lengths every row is as long as the batch (the Qwen3 tokenizer's
zero-padded batch rule). Time-major [B, L, C] inside; the latent API is channel-major [B, hidden, frames].
Must not know: files, resampling, the decoder side, streaming slots, the runtime.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models.mimi.config import MimiConfig
from v2.models.mimi.ops import elu, strided_conv, taps_weight
from v2.models.mimi.quantizer import SplitRVQ
from v2.models.mimi.transformer import MimiTransformer
from v2.models.persist import persistent


def tile_for(rows_per_frame: int) -> int:
    """A call site's fixed matmul tile: a power of two in [64, 1024], about 16 codec frames' rows."""
    tile = 64
    while tile < 16 * rows_per_frame and tile < 1024:
        tile *= 2
    return tile


class ELU(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return elu(x)


class _Conv(nn.Module):
    """MimiConv1d over whole sequences: left pad (k - 1) * dilation + 1 - stride (zeros, or the first value
    when `replicate`), right pad to ceil(L / stride) whole strides (zeros, or the row's last value)."""

    def __init__(self, cin: int, cout: int, kernel: int, rows_per_frame: int, stride: int = 1, dilation: int = 1,
                 bias: bool = True, replicate: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, stride=stride, dilation=dilation, bias=bias)
        self.stride, self.dilation, self.replicate = stride, dilation, replicate
        self.left = (kernel - 1) * dilation + 1 - stride
        self.tile = tile_for(rows_per_frame)
        self._w: tuple[int, int, Tensor] | None = None

    def _taps(self) -> Tensor:
        w = self.conv.weight
        if self._w is None or self._w[:2] != (id(w), w._version):
            self._w = (id(w), w._version, persistent(taps_weight)(w).detach())
        return self._w[2]

    def forward(self, x: Tensor, lengths: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """x [B, L, C], lengths [B] (None: all L) -> ([B, ceil(L / stride), out], the rows' output lengths)."""
        b, length, c = x.shape
        n = -(-length // self.stride)
        padded = self.left + n * self.stride
        if self.replicate:
            last = torch.full((b,), length, device=x.device) if lengths is None else lengths
            index = (torch.arange(padded, device=x.device) - self.left).clamp(min=0)[None]
            index = torch.minimum(index, last[:, None] - 1)  # [B, padded]: own first / last value outside
            xp = x.gather(1, index[..., None].expand(b, padded, c))
        else:
            xp = F.pad(x, (0, 0, self.left, padded - self.left - length))  # [B, padded, C]
            if lengths is not None and self.stride > 1:  # a row's own right padding is zeros
                keep = torch.arange(padded, device=x.device)[None] < (self.left + lengths)[:, None]  # [B, padded]
                xp = torch.where(keep[..., None], xp, torch.zeros((), dtype=xp.dtype, device=xp.device))
        y = strided_conv(xp, n, self.conv.weight, self._taps(), self.conv.bias, self.stride, self.dilation, self.tile)
        return y, None if lengths is None else -(-lengths // self.stride)


class _ResnetBlock(nn.Module):
    """x + conv_1x1(ELU(conv_k_dilated(ELU(x)))), inner width dim / compress (`block.1`, `block.3`)."""

    def __init__(self, cfg: MimiConfig, dim: int, dilation: int, rows_per_frame: int) -> None:
        super().__init__()
        hidden = dim // cfg.compress
        self.block = nn.ModuleList([ELU(), _Conv(dim, hidden, cfg.residual_kernel_size, rows_per_frame, dilation=dilation),
                                    ELU(), _Conv(hidden, dim, 1, rows_per_frame)])

    def forward(self, x: Tensor, lengths: Tensor | None) -> Tensor:
        h = self.block[1](elu(x), lengths)[0]
        return x + self.block[3](elu(h), lengths)[0]


class SEANetEncoder(nn.Module):
    def __init__(self, cfg: MimiConfig) -> None:
        super().__init__()
        rows = cfg.hop  # samples per codec frame at the current stage
        layers: list[nn.Module] = [_Conv(cfg.audio_channels, cfg.num_filters, cfg.kernel_size, rows)]
        scale = 1
        for ratio in reversed(cfg.ratios):
            dim = scale * cfg.num_filters
            layers += [_ResnetBlock(cfg, dim, cfg.dilation_growth_rate ** j, rows) for j in range(cfg.num_residual_layers)]
            layers += [ELU(), _Conv(dim, dim * 2, 2 * ratio, rows, stride=ratio)]
            rows //= ratio
            scale *= 2
        layers += [ELU(), _Conv(scale * cfg.num_filters, cfg.hidden_size, cfg.last_kernel_size, rows)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: Tensor, lengths: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """x [B, S, 1] -> ([B, ceil(S / seanet_hop), hidden], lengths at that rate)."""
        for layer in self.layers:
            if isinstance(layer, _Conv):
                x, lengths = layer(x, lengths)
            elif isinstance(layer, _ResnetBlock):
                x = layer(x, lengths)
            else:
                x = layer(x)
        return x, lengths


class MimiEncoder(nn.Module):
    """`encoder`, `encoder_transformer`, `downsample`, `quantizer` (encode side; its `output_proj` too when
    `decodes`). `window`: the encoder transformer's attention window in steps (None: every earlier step)."""

    def __init__(self, cfg: MimiConfig, *, window: int | None, decodes: bool) -> None:
        super().__init__()
        self.mimi = cfg
        self.encoder = SEANetEncoder(cfg)
        self.encoder_transformer = MimiTransformer(cfg, window)
        self.downsample = _Conv(cfg.hidden_size, cfg.hidden_size, cfg.downsample_kernel, 2, stride=2, bias=False,
                                replicate=True)
        self.quantizer = SplitRVQ(cfg, decodes)

    @property
    def device(self) -> torch.device:
        return self.downsample.conv.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.downsample.conv.weight.dtype

    @torch.no_grad()
    def latent(self, audio: Tensor, trace: dict[str, Tensor] | None = None, lengths: Tensor | None = None) -> Tensor:
        """audio [B, S] -> the down-sampler output [B, hidden, ceil(S / hop)] (channel-major). lengths [B]
        (optional): each row's samples, the row computed as if alone (its frames past ceil(len / hop) are
        padding). `trace` receives the SEANet output [B, hidden, L], the transformer's [B, L, hidden] and the
        down-sampler's [B, hidden, F] (the layouts of the reference's modules)."""
        x = audio.to(device=self.device, dtype=self.dtype)[..., None]  # [B, S, 1]
        if lengths is not None:
            lengths = lengths.to(device=self.device, dtype=torch.long)
        seanet, steps = self.encoder(x, lengths)  # [B, L, hidden]
        first = torch.zeros(seanet.shape[0], dtype=torch.long, device=self.device)
        h = self.encoder_transformer(seanet, first)  # [B, L, hidden]
        latent, _ = self.downsample(h, steps)  # [B, F, hidden]
        if trace is not None:
            trace.update(seanet_out=seanet.transpose(1, 2), transformer_out=h, downsample_out=latent.transpose(1, 2))
        return latent.transpose(1, 2)

    @torch.no_grad()
    def quantize(self, latent: Tensor, count: int | None = None) -> Tensor:
        """latent [B, hidden, F] -> codes [B, F, count] (default: every quantizer), semantic first."""
        total = self.mimi.num_quantizers
        count = total if count is None else count
        if not 1 <= count <= total:
            raise ValueError(f"count: expected 1..{total}, got {count}")
        return self.quantizer.encode(latent.transpose(1, 2), count)

    def check_audio(self, audio: Tensor | np.ndarray, name: str = "audio") -> Tensor:
        """A non-empty, finite, 1-D float waveform, or a ValueError naming `name`."""
        t = torch.as_tensor(audio)
        if t.dim() != 1 or t.shape[0] < 1 or not t.dtype.is_floating_point:
            raise ValueError(f"{name}: expected a non-empty 1-D float waveform, got {t.dtype} {list(t.shape)}")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name}: contains NaN or infinite samples")
        return t
