"""The Qwen3 codec decoder's modules under the release's names, each a causal streaming step.

Owns: `CausalConvNet` (`.conv`, history = the last (k - 1) * dilation input rows), `CausalTransConvNet`
(`.conv`, a transposed conv with kernel = taps x stride computed as a causal conv over `taps` input frames:
history = the last taps - 1 input rows, the "overlap" of the reference's overlap-add), `ConvNeXtBlock`,
`SnakeBeta`, `ResidualUnit`, `DecoderBlock`, and `Stream`: one call's view of the per-slot state (each
stateful op takes its history rows for the call's slots and writes back the rows ending at each row's
last real step). All modules are time-major [B, L, C].
Must not know: checkpoints, the quantizer, the transformer, how slots are allocated, the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models.qwen3_codec.ops import (
    causal_conv, conv_weight, depthwise_causal_conv, last_rows, snake_beta, tile_rows, tiled_linear,
)


@dataclass
class Stream:
    """A decode call over `slots` [B]: conv histories `convs[i]` [slots + 1, ctx_i, C_i] are read for and
    written back to those slots; `frames` [B] real frames of each row (None: all n)."""

    convs: list[Tensor]
    slots: Tensor
    frames: Tensor | None
    trace: dict[str, Tensor] | None = None

    def valid(self, rows_per_frame: int) -> Tensor | None:
        return None if self.frames is None else self.frames * rows_per_frame

    def with_history(self, index: int, x: Tensor) -> Tensor:
        """history + x along time: [B, ctx + n, C]."""
        return torch.cat([self.convs[index][self.slots].to(x.dtype), x], dim=1)

    def keep(self, index: int, xp: Tensor, rows_per_frame: int) -> None:
        store = self.convs[index]
        store[self.slots] = last_rows(xp, store.shape[1], self.valid(rows_per_frame)).to(store.dtype)

    def record(self, name: str, x: Tensor) -> None:
        if self.trace is not None:
            self.trace[name] = x.detach().clone()


class _Cached:
    """A derived tensor (a matmul layout, exp of a log-scale parameter) computed once per parameter value."""

    def __init__(self) -> None:
        self.source: Any = None
        self.value: Tensor | None = None

    def get(self, source: Tensor, make: Any) -> Tensor:
        if self.source is not source or self.value is None:
            self.source, self.value = source, make(source)
        return self.value


class CausalConvNet(nn.Module):
    """Conv1d (bias) left-padded with its own (k - 1) * dilation history rows; stride 1."""

    def __init__(self, cin: int, cout: int, kernel: int, rows_per_frame: int, dilation: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, dilation=dilation)
        self.kernel, self.dilation, self.rows_per_frame = kernel, dilation, rows_per_frame
        self.context, self.channels = (kernel - 1) * dilation, cin
        self.tile = tile_rows(rows_per_frame)
        self.state_index = -1  # set by the decoder when context > 0
        self._w = _Cached()

    def forward(self, x: Tensor, io: Stream) -> Tensor:
        n = x.shape[1]
        xp = io.with_history(self.state_index, x) if self.context else x
        w = self._w.get(self.conv.weight, conv_weight)
        y = causal_conv(xp, n, w, self.conv.bias, self.kernel, self.dilation, self.tile)
        if self.context:
            io.keep(self.state_index, xp, self.rows_per_frame)
        return y


class CausalTransConvNet(nn.Module):
    """ConvTranspose1d (bias, kernel = taps x stride) with the last kernel - stride samples dropped: output
    block j (stride samples) = sum_m W[:, :, q + m * stride] . x[j - m] + bias, a causal conv over `taps`
    input frames into stride x C_out outputs. rows_per_frame counts INPUT rows."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, rows_per_frame: int) -> None:
        super().__init__()
        if kernel % stride:
            raise ValueError(f"transposed conv kernel {kernel} is not a multiple of its stride {stride}")
        self.conv = nn.ConvTranspose1d(cin, cout, kernel, stride=stride)
        self.stride, self.taps, self.rows_per_frame = stride, kernel // stride, rows_per_frame
        self.context, self.channels = self.taps - 1, cin
        self.tile = tile_rows(rows_per_frame)
        self.state_index = -1
        self._w, self._b = _Cached(), _Cached()

    def _weight(self, w: Tensor) -> Tensor:
        cin, cout, _ = w.shape
        # [Cin, Cout, taps (m), stride (q)] -> [q, Cout, a = taps - 1 - m (oldest first), Cin]
        w4 = w.reshape(cin, cout, self.taps, self.stride).flip(2).permute(3, 1, 2, 0)
        return w4.reshape(self.stride * cout, self.taps * cin)

    def forward(self, x: Tensor, io: Stream) -> Tensor:
        b, n, _ = x.shape
        xp = io.with_history(self.state_index, x) if self.context else x
        w = self._w.get(self.conv.weight, self._weight)
        conv_bias = self.conv.bias
        assert conv_bias is not None  # built with a bias
        bias = self._b.get(conv_bias, lambda t: t.repeat(self.stride))  # [stride * Cout]
        y = causal_conv(xp, n, w, bias, self.taps, 1, self.tile)  # [B, n, stride * Cout]
        if self.context:
            io.keep(self.state_index, xp, self.rows_per_frame)
        return y.reshape(b, n * self.stride, -1)  # [B, n * stride, Cout]


class SnakeBeta(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self._a, self._b = _Cached(), _Cached()

    def forward(self, x: Tensor) -> Tensor:
        alpha = self._a.get(self.alpha, torch.exp)
        inv_beta = self._b.get(self.beta, lambda t: 1.0 / (torch.exp(t) + 1e-9))
        return snake_beta(x, alpha, inv_beta)


class _DepthwiseConv(nn.Module):
    def __init__(self, dim: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, kernel, groups=dim)


class ConvNeXtBlock(nn.Module):
    """x + gamma * pwconv2(gelu(pwconv1(LayerNorm_1e-6(dwconv(x))))), dwconv causal depthwise k = 7."""

    def __init__(self, dim: int, rows_per_frame: int) -> None:
        super().__init__()
        self.dwconv = _DepthwiseConv(dim, 7)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))
        self.rows_per_frame, self.context, self.channels = rows_per_frame, 6, dim
        self.tile = tile_rows(rows_per_frame)
        self.state_index = -1

    def forward(self, x: Tensor, io: Stream) -> Tensor:
        n = x.shape[1]
        xp = io.with_history(self.state_index, x)
        conv_bias = self.dwconv.conv.bias
        assert conv_bias is not None  # built with a bias
        y = depthwise_causal_conv(xp, n, self.dwconv.conv.weight, conv_bias)
        io.keep(self.state_index, xp, self.rows_per_frame)
        y = F.layer_norm(y, y.shape[-1:], self.norm.weight, self.norm.bias, self.norm.eps)
        y = F.gelu(tiled_linear(y, self.pwconv1.weight, self.pwconv1.bias, self.tile).contiguous())
        y = tiled_linear(y, self.pwconv2.weight, self.pwconv2.bias, self.tile)
        return x + self.gamma * y


class ResidualUnit(nn.Module):
    """x + conv2_1x1(snake(conv1_k7_dilated(snake(x))))."""

    def __init__(self, dim: int, dilation: int, rows_per_frame: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConvNet(dim, dim, 7, rows_per_frame, dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConvNet(dim, dim, 1, rows_per_frame)

    def forward(self, x: Tensor, io: Stream) -> Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x), io)), io)


class DecoderBlock(nn.Module):
    """`block`: SnakeBeta, transposed conv x rate (kernel 2 x rate), residual units with dilations 1, 3, 9."""

    def __init__(self, cin: int, cout: int, rate: int, rows_per_frame: int) -> None:
        super().__init__()
        out_rows = rows_per_frame * rate
        self.block = nn.ModuleList([SnakeBeta(cin), CausalTransConvNet(cin, cout, 2 * rate, rate, rows_per_frame),
                                    *(ResidualUnit(cout, d, out_rows) for d in (1, 3, 9))])

    def forward(self, x: Tensor, io: Stream) -> Tensor:
        x = self.block[0](x)
        for module in self.block[1:]:
            x = module(x, io)
        return x
