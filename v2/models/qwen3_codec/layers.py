"""The Qwen3 codec decoder's modules under the release's names, each a causal streaming step.

Owns: `ConvNeXtBlock`, `SnakeBeta`, `ResidualUnit`, `DecoderBlock`, built on the shared streaming convs
(v2/models/stream_conv.py: `Stream`, `CausalConvNet`, `CausalTransConvNet`, re-exported here for the
decoder). All modules are time-major [B, L, C].
Must not know: checkpoints, the quantizer, the transformer, how slots are allocated, the runtime.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models.conv_ops import depthwise_causal_conv, last_rows, snake_beta, tile_rows, tiled_linear
from v2.models.stream_conv import Cached, CausalConvNet, CausalTransConvNet, Stream


class SnakeBeta(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self._a, self._b = Cached(), Cached()

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


__all__ = ["CausalConvNet", "CausalTransConvNet", "ConvNeXtBlock", "DecoderBlock", "ResidualUnit", "SnakeBeta",
           "Stream"]
