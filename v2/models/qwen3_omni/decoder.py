"""The MoE decoder stack of Qwen3-Omni's thinker and talker: Qwen3 attention layers whose MLP is the MoE block.

Owns: `MoeLayer` (pre-norm residual attention + MoE: `h = x + o_proj(attn(input_layernorm(x)))`, `out = h +
moe(post_attention_layernorm(h))`) and `MoeDecoder` (optional token table, layers, final `norm`), with one full
causal pass (`forward`) and the cached prefill/decode pass (`forward_cached`) over a `KVCache` or a
`PagedKVCache`, each row at its own positions. Reused from `v2/models/qwen3.py`: `Qwen3Attention` (q/k/v fused,
q/k RMSNorm before RoPE, grouped-query, the CPU exact attention and the CUDA kernels) and `RMSNorm`. What
differs from `Qwen3Backbone`: the MLP is `SparseMoe`; RoPE is M-RoPE, so a call takes rotary positions
[3, B, T] (t, h, w) apart from the cache positions [B, T] (equal for text and audio; they part with images);
where the Triton kernels run (CUDA, autograd off) and no layer inputs are asked for, `_run_fused`: each
residual add inside the RMSNorm kernel after it, and for a pass of at most `DECODE_ROWS` rows (a decode step's)
the input norm inside the q/k/v matmul (`norm_linear`), as `Qwen3Backbone._run_rows` does, and the post-attention
add and norm inside the MoE block's routing launch (`add_norm_route`); the CPU runs the layers one by one.
Must not know: token ids, audio, the talker's inputs, sampling, requests, which blocks a request holds.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from v2.models.kernels import inference_kernels, kernels_on
from v2.models.kernels.moe_route import add_norm_route
from v2.models.kernels.norm_linear import norm_linear
from v2.models.kernels.rms_norm import add_rms_norm_fused, rms_norm_fused
from v2.models.kv_cache import Cache, CacheView, KVCache
from v2.models.module_list import module_list_of
from v2.models.qwen3 import Qwen3Attention, RMSNorm
from v2.models.qwen3_omni.config import MoeDecoderConfig
from v2.models.qwen3_omni.moe import SparseMoe
from v2.models.qwen3_omni.mrope import mrope_cos_sin, text_positions

DECODE_ROWS = 64  # where the kernels run, a pass of at most this many rows takes the input norm into `norm_linear`


class MoeLayer(nn.Module):
    def __init__(self, cfg: MoeDecoderConfig) -> None:
        super().__init__()
        d = cfg.decoder
        self.self_attn = Qwen3Attention(d)
        self.mlp = SparseMoe(cfg.moe)
        self.input_layernorm = RMSNorm(d.hidden_size, d.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(d.hidden_size, d.rms_norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, layer: int,
                view: CacheView | None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, layer, view)
        return x + self.mlp(self.post_attention_layernorm(x))


class MoeDecoder(nn.Module):
    """Token table (`embed_tokens`, when asked for), MoE layers and the final norm (release prefix `model.`)."""

    def __init__(self, cfg: MoeDecoderConfig, *, embed_tokens: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.decoder
        if embed_tokens:
            self.embed_tokens = nn.Embedding(d.vocab_size, d.hidden_size)
        self.layers = module_list_of(MoeLayer(cfg) for _ in range(d.num_layers))
        self.norm = RMSNorm(d.hidden_size, d.rms_norm_eps)

    def rope(self, rope_positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos/sin [B, T, head_dim] of rotary positions [3, B, T]."""
        d = self.cfg.decoder
        return mrope_cos_sin(rope_positions, d.head_dim, d.rope_theta, self.cfg.mrope_section, self.cfg.interleaved)

    def forward(self, x: Tensor, *, rope_positions: Tensor | None = None, valid: Tensor | None = None,
                layer_inputs: list[Tensor] | None = None) -> Tensor:
        """Full causal pass with no cache. x [B, T, H]; rope_positions [3, B, T] (default 0 .. T-1 on every
        component); valid [B, T] marks real (right-padded) rows. Returns the final-norm output [B, T, H];
        `layer_inputs`, when given, collects the residual stream entering each layer (index 0: x itself)."""
        b, t, _ = x.shape
        if rope_positions is None:
            rope_positions = text_positions(torch.arange(t, device=x.device).expand(b, t))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()[None, None]  # [1, 1, T, T]
        if valid is not None:
            mask = mask & valid[:, None, None, :]
        return self._run(x, rope_positions, mask, None, layer_inputs)

    def forward_cached(self, x: Tensor, cache: Cache, index: Tensor, positions: Tensor, *,
                       rope_positions: Tensor | None = None, valid: Tensor | None = None,
                       context_len: int | None = None, layer_inputs: list[Tensor] | None = None) -> Tensor:
        """Prefill or decode through a cache, as `Qwen3Backbone.forward_cached`: x [B, T, H]; positions [B, T]
        (cache positions, consecutive per row); index: slots [B] or block tables [B, W]; rope_positions
        [3, B, T] (default: `positions` on every component). Returns the final-norm output [B, T, H]."""
        b, t, _ = x.shape
        if valid is None:  # every row real: the positions stand as given
            valid = torch.ones(b, t, dtype=torch.bool, device=x.device)
        else:
            positions = torch.where(valid, positions, torch.zeros_like(positions))
        if rope_positions is None:
            rope_positions = text_positions(positions)
        ctx = context_len if context_len is not None else (
            cache.max_len if isinstance(cache, KVCache) else index.shape[1] * cache.block_size)
        lengths = positions[:, 0] + 1 if t == 1 and kernels_on(x.device) else None
        view = CacheView.build(cache, index, positions, valid, ctx, lengths)
        mask = None  # the decode kernel bounds each row by its length
        if view.lengths is None:
            keys = torch.arange(ctx, device=x.device)
            mask = (keys[None, None, :] <= positions[:, :, None])[:, None]  # [B, 1, T, C]
        return self._run(x, rope_positions, mask, view, layer_inputs)

    def _run(self, x: Tensor, rope_positions: Tensor, mask: Tensor | None, view: CacheView | None,
             layer_inputs: list[Tensor] | None) -> Tensor:
        cos, sin = self.rope(rope_positions)
        if layer_inputs is None and inference_kernels(x.device):
            return self._run_fused(x, cos, sin, mask, view)
        for i, layer in enumerate(self.layers):
            if layer_inputs is not None:
                layer_inputs.append(x)
            x = layer(x, cos, sin, mask, i, view)
        return self.norm(x)

    def _run_fused(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, view: CacheView | None) -> Tensor:
        """The same layers through the kernels: each residual add done by the norm kernel after it; up to
        `DECODE_ROWS` rows, the input norm and its add inside the q/k/v matmul, and the post-attention add and
        norm inside the MoE routing launch."""
        b, t, width = x.shape
        layers = list(self.layers)
        if b * t <= DECODE_ROWS and all(layer.self_attn.qkv_proj.bias is None for layer in layers):
            s, delta = x.reshape(b * t, width), None  # [B T, H]: the residual stream; delta: what joins it next
            for i, layer in enumerate(layers):
                att, norm, post = layer.self_attn, layer.input_layernorm, layer.post_attention_layernorm
                s, qkv = norm_linear(s, att.qkv_proj.weight, norm.weight, norm.eps, delta=delta)  # [B T, H], [B T, Q]
                out = att.attend(qkv.view(b, t, -1), cos, sin, mask, i, view)  # [B, T, H]
                moe = layer.mlp
                s, h, weights, experts = add_norm_route(s, out.reshape(b * t, width), post.weight, post.eps,
                                                        moe.gate.weight, moe.cfg.top_k, moe.cfg.norm_topk_prob)
                delta = moe.routed(h, weights, experts)  # [B T, H]
            if delta is None:
                raise ValueError("MoeDecoder: a stack without layers")
            return add_rms_norm_fused(s, delta, self.norm.weight, self.norm.eps)[1].view(b, t, width)
        first = layers[0].input_layernorm
        h = rms_norm_fused(x, first.weight, first.eps)
        for i, layer in enumerate(layers):
            post = layer.post_attention_layernorm
            x, h = add_rms_norm_fused(x, layer.self_attn(h, cos, sin, mask, i, view), post.weight, post.eps)
            after = layers[i + 1].input_layernorm if i + 1 < len(layers) else self.norm
            x, h = add_rms_norm_fused(x, layer.mlp(h), after.weight, after.eps)
        return h
