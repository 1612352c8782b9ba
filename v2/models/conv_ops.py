"""Arithmetic of the streaming codecs' convolutions whose result for one time step never depends on the call it
is computed in.

Owns: `tiled_linear` (a matmul in fixed-shape row tiles), the causal convolution as one such matmul over
gathered taps (time-major, with its history rows), the depthwise causal convolution as a fixed sequence of
elementwise products, SnakeBeta, SiLU and RMSNorm from operations that are exact per element, and
`last_rows` (the history a stream keeps after a chunk).

Why (measured on this CPU, torch 2.13, MKL, AVX-512; designs/model.md, "Exact on every CPU"): a matmul's last bits for
one row change with the number of rows in the call (MKL picks other kernels and blockings; a row of a
1999-row call differed from the same row in a 5000-row call, for [14 -> 1] and [4608 -> 1536]), and
`F.conv1d` switches between oneDNN and im2col paths by batch and input size. A call of a FIXED shape
computes every row with the same kernel, so `tiled_linear` only ever calls F.linear on exactly `tile`
rows (zero-padded) with the inner dim aligned to 16 floats (under AVX2 a row's bits also follow its
alignment: `v2.models.exact`), and each row's result is the same whichever rows share its tile. Elementwise sin,
cos, exp, erf, GELU, sqrt and division give the same bits in the vectorised body and the tail of a
call; sigmoid, SiLU, ELU and rsqrt do not, so SiLU is x / (1 + exp(-x)) and RMSNorm divides by sqrt.
Row-wise reductions over the last dim (mean, sum, softmax, LayerNorm) are per row.
Off the CPU none of this is promised: plain F.linear / F.conv1d run there (equal up to float rounding).
Must not know: checkpoints, key names, streaming slots, the runtime.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from v2.models.exact import linear as exact_linear, on as exact_path


COLS_ELEMENTS = 1 << 24  # at most 64 MB of gathered taps (float32) per matmul group


def tile_rows(rows_per_frame: int) -> int:
    """The fixed tile of a call site that sees `rows_per_frame` rows per codec frame per stream: a power of
    two in [64, 1024], about 16 frames' rows (fixed per layer, so the same in every call)."""
    tile = 64
    while tile < 16 * rows_per_frame and tile < 1024:
        tile *= 2
    return tile


def tiled_linear(x: Tensor, weight: Tensor, bias: Tensor | None, tile: int) -> Tensor:
    """F.linear over the last dim of x [..., in] -> [..., out]; on CPU in calls of exactly `tile` rows with
    the inner dim aligned (`v2.models.exact.linear`)."""
    return exact_linear(x, weight, bias, tile)


def conv_weight(weight: Tensor) -> Tensor:
    """Conv1d weight [out, in, k] -> the matmul weight [out, k * in] for taps gathered oldest first."""
    return weight.permute(0, 2, 1).reshape(weight.shape[0], -1)


def causal_conv(xp: Tensor, n: int, weight2d: Tensor, bias: Tensor | None, kernel: int, dilation: int,
                tile: int) -> Tensor:
    """Causal Conv1d, time-major: xp [B, ctx + n, C] = the ctx = (kernel - 1) * dilation history rows then
    n new rows -> [B, n, out]. Output t is sum_m W[:, :, m] . xp[t + m * dilation]: one matmul over the
    taps gathered oldest first ([rows, k * C]), built for a group of batch rows at a time (bounded memory)."""
    b, _, c = xp.shape
    if kernel == 1:
        return tiled_linear(xp, weight2d, bias, tile)
    if not exact_path(xp):
        w = weight2d.view(weight2d.shape[0], kernel, c).permute(0, 2, 1)  # [out, C, k]
        return F.conv1d(xp.transpose(1, 2), w, bias, dilation=dilation).transpose(1, 2)
    group = max(1, COLS_ELEMENTS // max(1, n * kernel * c))  # batch rows per im2col
    out = []
    for s in range(0, b, group):
        part = xp[s : s + group]
        cols = torch.cat([part[:, m * dilation : m * dilation + n] for m in range(kernel)], dim=-1)  # [g, n, k * C]
        out.append(tiled_linear(cols, weight2d, bias, tile))
    return out[0] if len(out) == 1 else torch.cat(out)


def depthwise_causal_conv(xp: Tensor, n: int, weight: Tensor, bias: Tensor) -> Tensor:
    """Depthwise causal conv (groups = channels), time-major: xp [B, ctx + n, C] (ctx = k - 1 history rows),
    weight [C, 1, k] -> [B, n, C]: bias + sum over taps in order, one elementwise product and sum each."""
    kernel = weight.shape[-1]
    w = weight[:, 0, :].t()  # [k, C]
    acc = xp[:, 0:n] * w[0]
    for m in range(1, kernel):
        acc = acc + xp[:, m : m + n] * w[m]
    return acc + bias


def snake_beta(x: Tensor, alpha: Tensor, inv_beta: Tensor) -> Tensor:
    """x + inv_beta * sin(x * alpha)^2 per channel (last dim); alpha = exp(log alpha), inv_beta =
    1 / (exp(log beta) + 1e-9), computed once."""
    s = torch.sin(x * alpha)
    return x + inv_beta * (s * s)


def silu(x: Tensor) -> Tensor:
    """x * sigmoid(x) as x / (1 + exp(-x)) (the same bits wherever x sits in a call)."""
    return x / (1.0 + torch.exp(-x))


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """weight * x / sqrt(mean(x^2) + eps) over the last dim, in float32."""
    h = x.float()
    return weight * (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def last_rows(seq: Tensor, keep: int, valid: Tensor | None, dim: int = 1) -> Tensor:
    """The `keep` entries of `seq` along `dim` before index keep + valid[b] of each row b (default: the last
    `keep`). seq holds `keep` history entries followed by the chunk's; valid [B] real entries of the chunk."""
    if keep == 0:
        return seq.narrow(dim, 0, 0)
    if valid is None:
        return seq.narrow(dim, seq.shape[dim] - keep, keep)
    shape = [1] * seq.dim()
    shape[0], shape[dim] = seq.shape[0], keep
    index = (valid.to(seq.device)[:, None] + torch.arange(keep, device=seq.device)).view(shape)
    size = list(seq.shape)
    size[dim] = keep
    return seq.gather(dim, index.expand(size))
