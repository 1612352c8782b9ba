"""Mimi's decoder side as causal streaming steps: the up-sampler, the SEANet decoder, the per-slot state.

Owns: `GroupedTransConv` (the stride-2 `upsample`: a grouped ConvTranspose1d without bias whose last
kernel - stride outputs are dropped, computed as a causal conv over kernel / stride input frames with the
groups' block-diagonal weight, so its overlap with the next chunk is its last taps - 1 input rows),
`SEANetDecoder` (`decoder.layers.*`: causal convs, causal transposed convs with kernel 2 x ratio, residual
blocks, ELU) built from the Qwen3 codec's streaming conv modules (`CausalConvNet`, `CausalTransConvNet`,
`Stream`: the same maths, the same call-invariant matmuls and history rows), `MimiState` (every stateful
conv's history rows, each decoder-transformer layer's key/value window, a frame counter; a dummy slot for
padding rows) and `SlotKV` (the transformer's `KVWindow` over a call's slots).
Must not know: checkpoints, the quantizer, the encoder, how slots are allocated, the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from v2.models.mimi.config import MimiConfig
from v2.models.mimi.encoder import ELU
from v2.models.mimi.ops import elu
from v2.models.conv_ops import causal_conv, last_rows, tile_rows
from v2.models.stream_conv import Cached, CausalConvNet, CausalTransConvNet, Stream, StreamState


class MimiState(StreamState):
    """Mimi's streaming state (`StreamState`): its decoder transformer's step is steps-per-frame x frames."""


@dataclass
class SlotKV:
    """The decoder transformer's history for a call over `slots` [B]; valid [B] real steps per row (None: all)."""

    k: list[Tensor]
    v: list[Tensor]
    slots: Tensor
    valid: Tensor | None

    def history(self, layer: int) -> tuple[Tensor, Tensor]:
        return self.k[layer][self.slots], self.v[layer][self.slots]

    def keep(self, layer: int, keys: Tensor, values: Tensor) -> None:
        store_k, store_v = self.k[layer], self.v[layer]
        keep = store_k.shape[2]
        store_k[self.slots] = last_rows(keys, keep, self.valid, dim=2).to(store_k.dtype)
        store_v[self.slots] = last_rows(values, keep, self.valid, dim=2).to(store_v.dtype)


class GroupedTransConv(nn.Module):
    """ConvTranspose1d (`.conv`, groups, no bias, kernel = taps x stride) with the last kernel - stride outputs
    dropped: output block j (stride rows) = sum_m W[:, :, q + m * stride] . x[j - m]. rows_per_frame counts
    INPUT rows."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, groups: int, rows_per_frame: int) -> None:
        super().__init__()
        if kernel % stride:
            raise ValueError(f"transposed conv kernel {kernel} is not a multiple of its stride {stride}")
        self.conv = nn.ConvTranspose1d(cin, cout, kernel, stride=stride, groups=groups, bias=False)
        self.stride, self.taps, self.groups, self.rows_per_frame = stride, kernel // stride, groups, rows_per_frame
        self.context, self.channels = self.taps - 1, cin
        self.tile = tile_rows(rows_per_frame)
        self.state_index = -1  # set by the owner when context > 0
        self._w = Cached()

    def _weight(self, w: Tensor) -> Tensor:
        cin, cout_g, _ = w.shape
        g, cin_g = self.groups, cin // self.groups
        dense = w.new_zeros(g, cin_g, g, cout_g, self.taps * self.stride)  # block-diagonal [Cin, Cout, k]
        idx = torch.arange(g, device=w.device)
        dense[idx, :, idx] = w.detach().reshape(g, cin_g, cout_g, -1)
        cout = g * cout_g
        # [Cin, Cout, taps (m), stride (q)] -> [q, Cout, a = taps - 1 - m (oldest first), Cin]
        w4 = dense.reshape(cin, cout, self.taps, self.stride).flip(2).permute(3, 1, 2, 0)
        return w4.reshape(self.stride * cout, self.taps * cin)

    def forward(self, x: Tensor, io: Stream) -> Tensor:
        b, n, _ = x.shape
        xp = io.with_history(self.state_index, x) if self.context else x
        y = causal_conv(xp, n, self._w.get(self.conv.weight, self._weight), None, self.taps, 1, self.tile)
        if self.context:
            io.keep(self.state_index, xp, self.rows_per_frame)
        return y.reshape(b, n * self.stride, -1)  # [B, n, stride * Cout] -> [B, n * stride, Cout]


class _ResidualUnit(nn.Module):
    """x + conv_1x1(ELU(conv_k_dilated(ELU(x)))) (`block.1`, `block.3`), streaming."""

    def __init__(self, cfg: MimiConfig, dim: int, dilation: int, rows_per_frame: int) -> None:
        super().__init__()
        hidden = dim // cfg.compress
        self.block = nn.ModuleList([ELU(), CausalConvNet(dim, hidden, cfg.residual_kernel_size, rows_per_frame, dilation),
                                    ELU(), CausalConvNet(hidden, dim, 1, rows_per_frame)])

    def forward(self, x: Tensor, io: Stream) -> Tensor:
        return x + self.block[3](elu(self.block[1](elu(x), io)), io)


class SEANetDecoder(nn.Module):
    """`layers`: conv k -> per ratio (ELU, transposed conv x ratio, residual blocks) -> ELU, conv to mono."""

    def __init__(self, cfg: MimiConfig, rows_per_frame: int) -> None:
        super().__init__()
        scale = 2 ** len(cfg.ratios)
        rows = rows_per_frame  # rows per codec frame at the current stage
        layers: list[nn.Module] = [CausalConvNet(cfg.hidden_size, scale * cfg.num_filters, cfg.kernel_size, rows)]
        for ratio in cfg.ratios:
            dim = scale * cfg.num_filters
            layers += [ELU(), CausalTransConvNet(dim, dim // 2, 2 * ratio, ratio, rows)]
            rows *= ratio
            layers += [_ResidualUnit(cfg, dim // 2, cfg.dilation_growth_rate ** j, rows)
                       for j in range(cfg.num_residual_layers)]
            scale //= 2
        layers += [ELU(), CausalConvNet(cfg.num_filters, cfg.audio_channels, cfg.last_kernel_size, rows)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: Tensor, io: Stream) -> Tensor:
        """x [B, n * steps, hidden] -> [B, n * hop, 1]."""
        for layer in self.layers:
            x = layer(x) if isinstance(layer, ELU) else layer(x, io)
        return x
