"""Qwen3-Omni code2wav's blocks that differ from the Qwen3-TTS codec's: the mean-of-codebooks input, the
transformer without input/output projections, and the decoder block whose transposed conv is cut at BOTH ends.

Owns: `decoder_config` (config.py's `Code2WavConfig` as the Qwen3 codec's `DecoderConfig`: the same fields,
latent width = transformer width), `code_mean` (`code_embedding`: mean over groups g of row
c_g + g * codebook_size), `Code2WavTransformer` (the Qwen3 codec's sliding-window layers, run on the embedding
itself), `TrimmedDecoderBlock`, `decoder_blocks` and `lead_rows`.

Why the lead: the release's decoder-block transposed conv (kernel 2r, stride r) drops r samples at both ends, so
an input of L rows gives (L - 1) r rows and output row j reads input rows j // r and j // r + 1. That is the
causal transposed conv of the Qwen3 codec (`CausalTransConvNet`: output block i reads rows i - 1 and i) with its
first block dropped. So code2wav here runs the causal form and carries, per stage, `lead` rows at the start of
each stream that are not signal (stage k: lead_k = (lead_(k-1) + 1) r_k; 8, 45, 184, 555 samples at release
rates): they are zeroed after the transposed conv and after each residual unit, so every convolution that reads
history sees zeros there (as the reference's zero padding at the start of its shorter sequence), and the stream's first lead samples are dropped. Every other row is computed
by the same per-row arithmetic whatever the chunk, so a stream decoded chunk by chunk equals the whole decode.
Must not know: checkpoints, slots, requests, the talker.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.qwen3_omni.config import Code2WavConfig
from v2.models.qwen3_codec.config import DecoderConfig
from v2.models.qwen3_codec.layers import DecoderBlock
from v2.models.qwen3_codec.transformer import PreTransformer
from v2.models.stream_conv import Stream


def decoder_config(c: Code2WavConfig) -> DecoderConfig:
    """config.py's `Code2WavConfig` as the Qwen3 codec's `DecoderConfig` (latent width = transformer width; no
    RVQ, so `codebook_dim` is unused)."""
    t = c.transformer
    return DecoderConfig(
        num_quantizers=c.num_quantizers, codebook_size=c.codebook_size, codebook_dim=t.hidden_size,
        latent_dim=t.hidden_size, hidden_size=t.hidden_size, num_layers=t.num_layers, num_heads=t.num_heads,
        num_kv_heads=t.num_kv_heads, head_dim=t.head_dim, intermediate_size=t.intermediate_size,
        rms_norm_eps=t.rms_norm_eps, rope_theta=t.rope_theta, attention_bias=False, sliding_window=c.sliding_window,
        upsampling_ratios=c.upsampling_ratios, upsample_rates=c.upsample_rates, decoder_dim=c.decoder_dim)


def code_mean(table: Tensor, codes: Tensor, codebook_size: int) -> Tensor:
    """`code_embedding` table [G * V, H], codes [B, n, G] -> mean_g table[c_g + g V] [B, n, H], summed group after
    group (the same bits per frame whatever the chunk) then divided by G."""
    groups = codes.shape[-1]
    acc = table[codes[..., 0]]
    for g in range(1, groups):
        acc = acc + table[codes[..., g] + g * codebook_size]
    return acc / groups


class Code2WavTransformer(PreTransformer):
    """The Qwen3 codec's `pre_transformer` layers and final norm with no input/output projection (the code
    embedding is already at the transformer's width)."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__(cfg)
        del self.input_proj, self.output_proj  # not in this model (no such tensors)

    def forward(self, x: Tensor, first_frame: Tensor, k: list[Tensor], v: list[Tensor], slots: Tensor,
                valid: Tensor | None, trace: dict[str, Tensor] | None = None) -> Tensor:
        """x [B, n, H] at frames first_frame[b] + i; k[i]/v[i] each layer's window, per slot. -> [B, n, H]."""
        n = x.shape[1]
        positions = first_frame[:, None] + torch.arange(n, device=x.device)  # [B, n]
        h = x
        for i, layer in enumerate(self.layers):
            attn, new_k, new_v = layer.self_attn(layer.input_layernorm(h), positions, k[i][slots], v[i][slots], valid)
            k[i][slots], v[i][slots] = new_k.to(k[i].dtype), new_v.to(v[i].dtype)
            h = h + layer.self_attn_layer_scale.scale * attn
            h = h + layer.mlp_layer_scale.scale * layer.mlp(layer.post_attention_layernorm(h))
            if trace is not None:
                trace[f"pre_transformer_layer{i}"] = h.clone()
        return self.norm(h)


def lead_rows(first_frame: Tensor, n_rows: int, rows_per_frame: int, lead: int) -> Tensor:
    """[B, n_rows, 1] bool: the rows of a chunk (starting at frame first_frame[b]) among a stream's first `lead`."""
    row = first_frame[:, None] * rows_per_frame + torch.arange(n_rows, device=first_frame.device)  # [B, n_rows]
    return (row < lead)[..., None]


class TrimmedDecoderBlock(DecoderBlock):
    """The Qwen3 codec's decoder block (SnakeBeta, transposed conv x rate, residual units 1, 3, 9; same names)
    where the rows in `lead` [B, L, 1] are zeroed after the transposed conv and after each residual unit."""

    def forward_lead(self, x: Tensor, io: Stream, lead: Tensor | None) -> Tensor:
        """lead None: no row of the call is a lead row (the plain block)."""
        x = self.block[1](self.block[0](x), io)
        if lead is None:
            for unit in self.block[2:]:
                x = unit(x, io)
            return x
        x = x.masked_fill(lead, 0.0)
        for unit in self.block[2:]:
            x = unit(x, io).masked_fill(lead, 0.0)
        return x


def decoder_blocks(cfg: DecoderConfig, rows: int) -> list[TrimmedDecoderBlock]:
    """The decoder blocks for `rows` rows per frame at their input, rates in order."""
    out = []
    for i, rate in enumerate(cfg.upsample_rates):
        out.append(TrimmedDecoderBlock(*cfg.block_dims(i), rate, rows))
        rows *= rate
    return out


