"""Mimi's arithmetic whose result for one time step never depends on the call it is computed in.

Owns: ELU from `expm1` (F.elu gives other bits in a call's scalar tail than in its vector body under AVX2
and AVX-512; expm1 was the same in body and tail on the AVX-512, AVX2 and default paths), the causal
convolution with a stride as one fixed-tile matmul over gathered taps (time-major; built in blocks of
output rows so memory stays bounded), and the nearest-codeword search in torch.cdist's matmul form with
the matmul in fixed tiles (cdist's own matmul rounds a row by the call's row count).
Off the CPU the plain torch forms run (`exact.on`): F.elu, F.conv1d, F.linear.
Must not know: checkpoints, key names, streaming slots, the Qwen3 codec, the runtime.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from v2.models import exact

COLS_ELEMENTS = 1 << 22     # floats of gathered taps per matmul block (16 MB)


def elu(x: Tensor) -> Tensor:
    """ELU (alpha 1): x where x > 0, else expm1(x)."""
    if not exact.on(x):
        return F.elu(x)
    return torch.where(x > 0, x, torch.expm1(x))


def taps_weight(weight: Tensor) -> Tensor:
    """Conv1d weight [out, in, k] -> the matmul weight [out, k * in] for taps gathered oldest first."""
    return weight.permute(0, 2, 1).reshape(weight.shape[0], -1)


def strided_conv(xp: Tensor, n: int, weight: Tensor, w2d: Tensor, bias: Tensor | None, stride: int,
                 dilation: int, tile: int) -> Tensor:
    """Conv1d without padding, time-major: xp [B, Lp, C] (already padded) -> the first n outputs [B, n, out];
    output t = sum_m W[:, :, m] . xp[t * stride + m * dilation] + bias. `weight` [out, C, k] is the conv's,
    `w2d` its `taps_weight`. On the CPU each block of output rows is one `exact.linear` over its taps."""
    kernel = weight.shape[-1]
    if not exact.on(xp):
        return F.conv1d(xp.transpose(1, 2), weight, bias, stride=stride, dilation=dilation)[..., :n].transpose(1, 2)
    b, _, c = xp.shape
    block = max(1, COLS_ELEMENTS // max(1, b * kernel * c))  # output rows per gathered block
    out = []
    for s in range(0, n, block):
        e = min(n, s + block)
        cols = torch.cat([xp[:, s * stride + m * dilation : (e - 1) * stride + m * dilation + 1 : stride]
                          for m in range(kernel)], dim=-1)  # [B, e - s, k * C]
        out.append(exact.linear(cols, w2d, bias, tile))
    return out[0] if len(out) == 1 else torch.cat(out, dim=1)


def nearest(x: Tensor, table: Tensor, tile: int) -> Tensor:
    """Index of the nearest row of table [K, D] (Euclidean; the first on ties) for each row of x [N, D].
    The distance is torch.cdist's matmul form (what the reference runs for K > 25): one product of
    [-2 x, |x|^2, 1] with [e, 1, |e|^2], clamped at 1e-30, square-rooted; the product an `exact.linear` in
    fixed tiles of `tile` rows, so a row's distances do not depend on the other rows."""
    ones = x.new_ones(x.shape[0], 1)
    rows = torch.cat([x * -2.0, (x * x).sum(-1, keepdim=True), ones], dim=-1)  # [N, D + 2]
    cols = torch.cat([table, table.new_ones(table.shape[0], 1), (table * table).sum(-1, keepdim=True)], dim=-1)
    dist = exact.linear(rows, cols, None, tile).clamp_min(1e-30).sqrt()  # [N, K]
    return dist.argmin(-1)
