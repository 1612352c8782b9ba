"""Call-invariant arithmetic on the CPU: a row's result never depends on the call it is computed in.

Owns: `linear` / `Linear` (a matmul in fixed-shape, fixed-alignment row tiles; `Tile`, a call site's own
reused tile for the same calls without the copies; `tiles_linear_into`, those calls written into a given output),
`halving_sum` (a sum whose order is fixed by construction: pairwise halves of a power-of-two length), `attention`
(softmax attention from elementwise products and halving sums, so a query's result does not depend on how many
keys are masked after its own, on the batch, or on the chunk of queries it is in), and the tail-safe activations
(`silu`, `gelu`, `gelu_tanh`; the `_into` forms write the same values into a given tensor;
`silu_of_negated_into`, -silu of a negated input, for a block whose MLP weights are stored negated),
`rms_norm_into` (an RMSNorm's value, each step written into given buffers) and `scalar` (a Python number as a
kept 0-dim float32 operand: the one way these forms take a constant without wrapping it per call).

The rule (designs/model.md, "Exact on every CPU"): every value a row's result is made of is computed by
an operation whose inputs are that row's own data and whose instruction sequence is fixed by the call
site alone, never by the number of rows, keys or steps in the call. Measured causes on torch 2.13 CPU
(MKL 2024.2, oneDNN 3.12) under AVX-512, AVX2 and the default capability:
- MKL's sgemm picks kernels by the row count (1 row differs from 2, small counts from large ones), and
  under AVX2 a row's last bits also depend on its byte alignment when the inner dim is not a multiple of
  16 floats (a row moved within a fixed call changed in 16-48 of 64 positions). So `linear` calls
  F.linear only on exactly `tile` rows, with the inner dim zero-padded to a multiple of `ALIGN` (weights
  padded once and cached): one shape, one alignment for every row of every call.
- torch's reductions change order with the reduced length (vector body vs scalar tail), so a masked key
  or a padded position would move the others' rounding. `halving_sum` pads to a power of two with zeros
  and adds halves: zeros past the data add exactly, so the result equals that of the data alone.
- F.silu, F.gelu (both forms), sigmoid and ELU give other bits in a call's scalar tail than in its
  vector body; exp, erf, tanh, sin, division do not, so the activations are written with those.
Off the CPU none of this runs: F.linear, SDPA and the fused kernels serve (designs/model.md says what is
promised there). Must not know: models, checkpoints, requests, the runtime.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models.persist import persistent

ALIGN = 16          # floats: the inner dim of every CPU matmul is padded to a multiple of this (64 bytes)
TILE = 16           # rows per matmul call at the layers' call sites (a decode batch of <= 16 is one call)


def on(x: Tensor) -> bool:
    """Whether `x` takes the call-invariant path (the CPU)."""
    return x.device.type == "cpu"


def _pad_inner(t: Tensor) -> Tensor:
    k = t.shape[-1]
    extra = -k % ALIGN
    return t if extra == 0 else F.pad(t, (0, extra))


def aligned_weight(weight: Tensor) -> Tensor:
    """weight [out, in] with `in` zero-padded to a multiple of ALIGN, contiguous; cached per parameter
    value while autograd is off (a differentiable pass pads it in its graph; an inference tensor, made in the
    call, has no version to key a cache on)."""
    if weight.shape[-1] % ALIGN == 0 and weight.is_contiguous():
        return weight
    if torch.is_grad_enabled() and weight.requires_grad or weight.is_inference():  # (nothing to key a cache on)
        return _pad_inner(weight).contiguous()
    hit = getattr(weight, "_exact_aligned", None)  # (version, padded): kept on the tensor, freed with it
    if hit is not None and hit[0] == weight._version:
        return hit[1]
    with torch.inference_mode(False):  # kept past the call: a normal tensor (v2/models/persist.py)
        value = _pad_inner(weight.detach()).contiguous()
    weight._exact_aligned = (weight._version, value)  # type: ignore[attr-defined]
    return value


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, tile: int = TILE) -> Tensor:
    """F.linear over the last dim of x [..., in] -> [..., out]; on the CPU in calls of exactly `tile` rows
    (zero rows pad the last) with `in` padded to a multiple of ALIGN."""
    if not on(x):
        return F.linear(x, weight, bias)
    lead = x.shape[:-1]
    rows = _pad_inner(x.reshape(-1, x.shape[-1]))  # [N, in'] (in' a multiple of ALIGN)
    w = aligned_weight(weight)
    n = rows.shape[0]
    if n == tile:
        return F.linear(rows, w, bias).view(*lead, weight.shape[0])
    parts = []
    for s in range(0, n, tile):
        part = rows[s : s + tile]
        if part.shape[0] < tile:
            part = torch.cat([part, part.new_zeros(tile - part.shape[0], part.shape[1])])
        parts.append(F.linear(part, w, bias)[: min(tile, n - s)])
    out = parts[0] if len(parts) == 1 else torch.cat(parts)  # [N, out]
    return out.view(*lead, weight.shape[0])


class Tile:
    """A call site's own zeroed row tile for `linear`'s CPU form without its copies: a caller writes the input
    into `rows(n)` (rows [:n], columns [:inner]; e.g. as the `out=` of the operation that makes it) and calls
    `linear(n, weight, bias)`, which runs F.linear on the whole tiles, as `linear` does on its padded copy: the
    same shape, alignment and bits. Columns past `inner` are never written (they stay zero); rows past n may
    hold an earlier call's values (a matmul's output row reads only its own input row).
    Inference only (autograd off): the tile is reused, call after call."""

    def __init__(self, rows: int, inner: int, dtype: torch.dtype, device: torch.device | str,
                 tile: int = TILE) -> None:
        if rows < 1 or inner < 1:
            raise ValueError(f"Tile needs rows >= 1 and inner >= 1, got {rows}, {inner}")
        self.tile, self.inner = tile, inner
        self.buf = torch.zeros(-(-rows // tile) * tile, inner + (-inner % ALIGN), dtype=dtype, device=device)
        self._first = self.buf[:tile]
        self._rows: dict[int, Tensor] = {}

    def rows(self, n: int) -> Tensor:
        """The input view [n, inner] (rows of one call)."""
        if n not in self._rows:
            self._rows[n] = self.buf[:n, : self.inner]
        return self._rows[n]

    def linear(self, n: int, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """F.linear of rows [:n] -> [n, out]: one call per `tile` rows (the tiles past n's are not run)."""
        w = aligned_weight(weight)
        if n <= self.tile:
            return F.linear(self._first, w, bias)[:n]
        parts = [F.linear(self.buf[s : s + self.tile], w, bias) for s in range(0, n, self.tile)]
        return torch.cat(parts)[:n]  # [n, out]

    def linear_into(self, n: int, weight_t: Tensor, bias: Tensor | None, out: Tensor) -> None:
        """`linear` of rows [:n] written into out (`tiles_linear_into` on this tile's buffer)."""
        tiles_linear_into(self.buf, n, weight_t, bias, out, self.tile)


def tiles_linear_into(x: Tensor, n: int, weight_t: Tensor, bias: Tensor | None, out: Tensor, tile: int = TILE) -> None:
    """`linear` of rows [:n] of x [tiles' rows, in'] written into out [tiles' rows, out_features]: x is what a
    `Tile`'s buffer is (contiguous, whole tiles of `tile` rows covering n, in' a multiple of ALIGN); per tile the call
    F.linear makes for it (torch.addmm with a bias, torch.mm without) on weight_t, an `aligned_weight`'s transpose
    (`.t()`, made once by the caller), so the same bits; out's rows past n hold the padding rows'."""
    if n <= tile:  # one call (x and out of one tile, or the first tile's rows)
        rows, dst = (x, out) if x.shape[0] == tile else (x[:tile], out[:tile])
        if bias is None:
            torch.mm(rows, weight_t, out=dst)
        else:
            torch.addmm(bias, rows, weight_t, out=dst)
        return
    for s in range(0, n, tile):
        rows, dst = x[s : s + tile], out[s : s + tile]
        if bias is None:
            torch.mm(rows, weight_t, out=dst)
        else:
            torch.addmm(bias, rows, weight_t, out=dst)


class Linear(nn.Linear):
    """nn.Linear (same parameters and names) computed by `linear` on the CPU."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


def halving_sum(x: Tensor, dim: int) -> Tensor:
    """Sum over `dim` in a fixed order: as if zero-padded to a power of two P, add the upper half to the
    lower until one entry is left (the padding's zeros are skipped: adding them changes nothing). So
    trailing zeros (masked entries) leave the result of the data unchanged, whatever the length."""
    dim = dim % x.dim()
    n = x.shape[dim]
    while n > 1:
        half = 1 << (n - 1).bit_length() - 1  # P / 2 for the smallest power of two P >= n
        lo, hi = x.narrow(dim, 0, half), x.narrow(dim, half, n - half)
        if n - half == half:
            x = lo + hi
        else:
            x = lo.clone()
            x.narrow(dim, 0, n - half).add_(hi)
        n = half
    return x.squeeze(dim)


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *, causal: bool = False,
              scale: float | None = None) -> Tensor:
    """Softmax attention as F.scaled_dot_product_attention (grouped-query when k has fewer heads).

    q [B, Hq, T, D]; k, v [B, Hkv, C, D] (Hq a multiple of Hkv); mask broadcastable to [B, Hq, T, C], True =
    attend; causal: query t sees keys 0 .. C - T + t. Returns [B, Hq, T, D]. On the CPU a query's scores are
    products summed over D (a fixed length), and everything summed over keys (whose count varies with the
    batch's context and the chunk) goes through halving sums, in blocks of queries (`attention_tiles.attention`;
    `attention_tiles.attention_reference` is the form it gives the bits of); elsewhere SDPA."""
    if not on(q):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                              enable_gqa=k.shape[1] != q.shape[1])
    from v2.models import attention_tiles  # (built on this module's halving_sum: imported at the call)

    return attention_tiles.attention(q, k, v, mask, causal=causal, scale=scale)


def silu(x: Tensor) -> Tensor:
    """x * sigmoid(x); on the CPU as x / (1 + exp(-x)) (the same bits wherever x sits in a call)."""
    return x / (1.0 + torch.exp(-x)) if on(x) else F.silu(x)


def gelu(x: Tensor) -> Tensor:
    """Exact GELU; on the CPU as x / 2 * (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0)))) if on(x) else F.gelu(x)


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU's tanh form; on the CPU from tanh, products and sums."""
    if not on(x):
        return F.gelu(x, approximate="tanh")
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))


_SCALARS: dict[float | str, Tensor] = {}  # zeros and NaN by their spelling: -0.0 is not 0.0, a NaN finds its own


def scalar(value: float) -> Tensor:
    """value as a 0-dim float32 CPU operand, made once: the float32 a Python number becomes in a float32 operation
    (the same bits as the number or a [1] tensor there), without the wrapped number and its conversion that each such
    operation makes; a 0-dim CPU tensor is also a valid operand of an operation on another device."""
    key: float | str = value if value == value and value != 0 else float(value).hex()
    t = _SCALARS.get(key)
    if t is None:
        t = _SCALARS[key] = persistent(torch.tensor)(value, dtype=torch.float32)
    return t


_ONE = scalar(1.0)


def rms_norm_into(x: Tensor, weight: Tensor, eps: float, sq: Tensor, ms: Tensor, out: Tensor | None = None) -> Tensor:
    """RMSNorm of float32 x [..., H] on the CPU (`qwen3.RMSNorm`'s x / sqrt(mean(x^2) + eps) * weight), written into
    out when given (else made), its steps into sq [..., H] (the square, then the quotient) and ms [..., 1]: nothing
    else made. The mean as `mean` computes it on a CPU (the sum, then its quotient by the count), eps added in the
    same operation (addcdiv: eps + 1 * (sum / count), the same quotient and sum; tests/models/test_decode_row.py
    holds both equalities in every leg)."""
    torch.pow(x, 2, out=sq)
    torch.sum(sq, -1, keepdim=True, out=ms)
    torch.addcdiv(scalar(eps), ms, scalar(float(x.shape[-1])), out=ms).sqrt_()
    torch.div(x, ms, out=sq)
    return torch.mul(weight, sq) if out is None else torch.mul(weight, sq, out=out)


def silu_into(x: Tensor, out: Tensor) -> None:
    """`silu`'s CPU form of x written into out (x and out distinct): the same operations, each into out, so
    nothing is made (-x, exp, 1 + e, x / (1 + e): the same values)."""
    torch.neg(x, out=out)
    torch.exp(out, out=out)
    out.add_(_ONE)
    torch.div(x, out, out=out)


def silu_of_negated_into(y: Tensor, out: Tensor) -> None:
    """-silu(x) of y = -x written into out (y and out distinct): y / (1 + exp(y)), `silu_into`'s operations on the
    negated input with one fewer (no negation) and nothing made. Equal to -silu(x) bit for bit: exp reads the same
    -x, 1 + e is the same sum, and the quotient of a negated dividend is the negated quotient (round to nearest is
    symmetric). So a projection of negated weights and bias (whose outputs are exactly the negated outputs) feeding
    this, then a projection of negated weights (each product (-w) (-s) == w s), gives the unnegated block's bits."""
    torch.exp(y, out=out)
    out.add_(_ONE)
    torch.div(y, out, out=out)


# the gelu forms' kept operands (-0.0 kept apart from 0.0 by `scalar`)
_NEG_ZERO = scalar(-0.0)
_INV_SQRT2, _SQRT_2_PI, _CUBIC = scalar(1.0 / math.sqrt(2.0)), scalar(math.sqrt(2.0 / math.pi)), scalar(0.044715)


def gelu_into(x: Tensor, out: Tensor) -> None:
    """`gelu`'s CPU form of x written into out (x and out distinct), each operation into out, nothing made: x times
    1 / sqrt 2's float32, erf, 1 + e, then (0.5 * x) * that as -0.0 + (0.5 * x) * out in one addcmul (its kernel
    forms 0.5 * x, then the product; x + (-0.0) == x for every x, a zero's sign included, and a fused multiply-add
    with -0.0 rounds the product once): the same bits (tests/models/test_exact.py, every leg)."""
    torch.mul(x, _INV_SQRT2, out=out)
    torch.erf(out, out=out)
    out.add_(_ONE)
    torch.addcmul(_NEG_ZERO, x, out, value=0.5, out=out)


def gelu_tanh_into(x: Tensor, out: Tensor) -> None:
    """`gelu_tanh`'s CPU form of x written into out (x and out distinct), as `gelu_into`: x x x, 0.044715 times it,
    x + that, sqrt(2 / pi) times it, tanh, 1 + t, then (0.5 * x) times that (each other product or sum has two
    operands: their order does not matter)."""
    torch.mul(x, x, out=out)
    out.mul_(x).mul_(_CUBIC).add_(x).mul_(_SQRT_2_PI)
    torch.tanh(out, out=out)
    out.add_(_ONE)
    torch.addcmul(_NEG_ZERO, x, out, value=0.5, out=out)
