"""The codec decoder's building blocks, written so that streaming equals whole decoding bit for bit.

Owns: `StableLinear` (a Linear whose per-row result does not depend on the call: fixed-shape tiles),
the window self-attention module (its arithmetic: `v2.models.window_attention`), the transformer layer and stage
(release names: `input_proj`, `transformer.layers.{j}.{norm1, self_attn, layer_scale_1, norm2, ffn,
layer_scale_2}`, `output_proj`), and the patch up-sampler (decoder) and down-sampler (encoder).

Why: on a CPU a chunk of n frames must produce exactly the samples the whole utterance produces. Every
op here is per position, with the same reduction order whatever the chunk: linears run in fixed-shape,
aligned row tiles (the BLAS picks kernels by row count and, under AVX2, by alignment), and each query attends over exactly its
own `window` keys (an unfold of history + new keys), reduced with elementwise products and sums, not a
batched matmul whose kernel choice varies with the batch count. That form needs [B, H, block, D, window]
temporaries (gigabytes at the release's sizes and batch 64), so on a GPU attention runs through SDPA with a
band mask instead (graph == eager there, chunked == whole up to float rounding).
Must not know: checkpoints, stream slots' allocation, the runtime.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from v2.models import exact
from v2.models.module_list import module_list_of
from v2.models.moss_codec.config import StageConfig
from v2.models.rope import apply_interleaved, interleaved_cos_sin
from v2.models.window_attention import window_attention

TILE_ROWS = 64     # rows per matmul call on the CPU (fixed: every row of every call sees one shape)


def stable_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """F.linear whose result for a row is the same for any number of rows in the call: on the CPU in
    fixed-shape, aligned tiles of TILE_ROWS rows (`v2.models.exact.linear`)."""
    return exact.linear(x, weight, bias, TILE_ROWS)


class StableLinear(nn.Linear):
    """nn.Linear computed by `stable_linear`."""

    def forward(self, x: Tensor) -> Tensor:
        return stable_linear(x, self.weight, self.bias)


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.scale


class WindowSelfAttention(nn.Module):
    def __init__(self, cfg: StageConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.in_proj = StableLinear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out_proj = StableLinear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: Tensor, positions: Tensor, k_hist: Tensor, v_hist: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x [B, n, d] at positions [B, n]; k_hist/v_hist [B, H, window - 1, D] the previous keys/values.

        Returns the output [B, n, d] and the keys/values [B, H, window - 1 + n, D] (history + new).
        """
        cfg = self.cfg
        b, n, _ = x.shape
        q, k, v = self.in_proj(x).view(b, n, 3, cfg.num_heads, cfg.head_dim).permute(2, 0, 3, 1, 4)  # 3 x [B, H, n, D]
        cos, sin = interleaved_cos_sin(positions, cfg.head_dim, cfg.max_period)  # [B, n, D]
        q, k = apply_interleaved(q, cos[:, None], sin[:, None]), apply_interleaved(k, cos[:, None], sin[:, None])
        keys, values = torch.cat([k_hist.to(k.dtype), k], dim=2), torch.cat([v_hist.to(v.dtype), v], dim=2)
        out = window_attention(q, keys, values, positions[:, 0], cfg.window)  # [B, H, n, D]
        return self.out_proj(out.transpose(1, 2).reshape(b, n, cfg.d_model)), keys, values


class CodecLayer(nn.Module):
    def __init__(self, cfg: StageConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.self_attn = WindowSelfAttention(cfg)
        self.layer_scale_1 = LayerScale(cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.ffn = nn.Sequential(StableLinear(cfg.d_model, cfg.ffn_dim, bias=False), nn.GELU(),
                                 StableLinear(cfg.ffn_dim, cfg.d_model, bias=False))
        self.layer_scale_2 = LayerScale(cfg.d_model)


class CodecTransformer(nn.Module):
    def __init__(self, cfg: StageConfig) -> None:
        super().__init__()
        self.layers = module_list_of(CodecLayer(cfg) for _ in range(cfg.num_layers))


class CodecStage(nn.Module):
    """input_proj -> causal local-window layers -> output_proj, on [B, n, C] (time-major)."""

    def __init__(self, cfg: StageConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_proj = StableLinear(cfg.input_dim, cfg.d_model, bias=False)
        self.transformer = CodecTransformer(cfg)
        self.output_proj = StableLinear(cfg.d_model, cfg.output_dim, bias=False)

    def forward(self, x: Tensor, first_pos: Tensor, history: list[tuple[Tensor, Tensor]],
                valid: Tensor | None = None) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """x [B, n, C_in]; first_pos [B] this stage's position of x[:, 0]; history per layer (k, v)
        [B, H, window - 1, D]; valid [B] tokens of each row that are real (default all n: later ones are
        padding, computed but never kept). Returns [B, n, C_out] and each layer's history for the next chunk:
        the window - 1 keys/values ending at the row's last valid token."""
        n = x.shape[1]
        positions = first_pos[:, None] + torch.arange(n, device=x.device)  # [B, n]
        keep = self.cfg.window - 1
        h = self.input_proj(x)
        new_history = []
        for layer, (k_hist, v_hist) in zip(self.transformer.layers, history):
            attn, keys, values = layer.self_attn(layer.norm1(h), positions, k_hist, v_hist)
            h = h + layer.layer_scale_1(attn)
            h = h + layer.layer_scale_2(layer.ffn(layer.norm2(h)))
            new_history.append((_last_keys(keys, keep, valid), _last_keys(values, keep, valid)))
        return self.output_proj(h), new_history


def _last_keys(seq: Tensor, keep: int, valid: Tensor | None) -> Tensor:
    """seq [B, H, keep + n, D] -> the `keep` entries before position keep + valid[b] of each row."""
    if valid is None:
        return seq[:, :, seq.shape[2] - keep :]
    b, h, _, d = seq.shape
    index = (valid[:, None] + torch.arange(keep, device=seq.device))[:, None, :, None]  # [B, 1, keep, 1]
    return seq.gather(2, index.expand(b, h, keep, d))


class PatchUpsample(nn.Module):
    """Decode-direction PatchedPretransform in time-major layout: [B, L, C] -> [B, L * patch, C / patch].

    Channel group g, member j of step t becomes output step t * patch + j of channel g.
    """

    def __init__(self, patch: int) -> None:
        super().__init__()
        self.patch = patch

    def forward(self, x: Tensor) -> Tensor:
        b, length, c = x.shape
        # [B, L, C/p, p] -> [B, L, p, C/p] -> [B, L * p, C/p]
        return x.view(b, length, c // self.patch, self.patch).transpose(2, 3).reshape(b, length * self.patch, c // self.patch)


class PatchDownsample(nn.Module):
    """Encode-direction PatchedPretransform in time-major layout: [B, L * patch, C] -> [B, L, C * patch].

    Step t * patch + j of channel c becomes channel c * patch + j of step t (the inverse of `PatchUpsample`).
    """

    def __init__(self, patch: int) -> None:
        super().__init__()
        self.patch = patch

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        # [B, L, p, C] -> [B, L, C, p] -> [B, L, C * p]
        return x.view(b, n // self.patch, self.patch, c).transpose(2, 3).reshape(b, n // self.patch, c * self.patch)
