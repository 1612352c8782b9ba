"""The Qwen3 backbone: decoder layers over row embeddings, reading and writing a KV cache it is given.

A shared building block: "Qwen3" names the decoder architecture (several families' models are made of it),
not a family.

Owns: RMSNorm, rotate-half RoPE, grouped-query attention with q/k norms, SwiGLU (q/k/v and gate/up each
fused into one projection; `fused_parts` says which release keys make them, `release_layout` where
every release key of a model made of these stacks lives), and the layer stack. The
same stack without q/k norms and with Llama-3 scaled RoPE (`qk_norm=False`, `rope_scaling`) is a Llama
decoder. One
entry point serves prefill and decode: rows of several requests, each at its own positions, each reading
and writing only its own slot (`KVCache`) or its own blocks (`PagedKVCache`, through a block table).
Must not know: rows/codebooks, sampling, requests, the scheduler, which blocks a request holds. The
cache and the tables are always passed in (kv_cache.py owns both caches).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models import decode_row, exact

from v2.models.config import BackboneConfig
from v2.models.kernels.decode_attention import paged_decode_attention
from v2.models.kernels import inference_kernels, kernels_on
from v2.models.kv_cache import Cache, CacheView, KVCache, PagedKVCache
from v2.models.module_list import module_list_of
from v2.models.kernels.qk_rope import fits as qk_rope_fits, qk_norm_rope_write
from v2.models.kernels.norm_linear import norm_linear
from v2.models.kernels.rms_norm import add_rms_norm_fused, rms_norm_fused
from v2.models.rope import Llama3Scaling, apply_rotate_half, rotate_half_cos_sin
from v2.models.kernels.swiglu import silu_mul_fused


class RMSNorm(nn.Module):
    """RMSNorm computed in float32 (as the reference does), cast back to the input dtype. On CUDA, when
    autograd is not recording, one fused kernel (`kernels.rms_norm`)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        if inference_kernels(x.device):
            return rms_norm_fused(x, self.weight, self.eps)
        dtype = x.dtype
        h = x.float()
        h = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # not rsqrt: its scalar tail rounds otherwise
        return self.weight * h.to(dtype)


def fused_parts(cfg: BackboneConfig) -> dict[str, list[tuple[str, int]]]:
    """Fused parameters (name suffix) -> the release's keys they are made of, in row order, with their rows."""
    d = cfg.head_dim
    return {
        "self_attn.qkv_proj.weight": [("self_attn.q_proj.weight", cfg.num_heads * d),
                                      ("self_attn.k_proj.weight", cfg.num_kv_heads * d),
                                      ("self_attn.v_proj.weight", cfg.num_kv_heads * d)],
        "mlp.gate_up_proj.weight": [("mlp.gate_proj.weight", cfg.intermediate_size),
                                    ("mlp.up_proj.weight", cfg.intermediate_size)],
    }


class Qwen3Attention(nn.Module):
    def __init__(self, cfg: BackboneConfig, qk_norm: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_dim
        # q, k and v in one matmul; the release stores them as q_proj / k_proj / v_proj (see `fused_parts`)
        self.qkv_proj = exact.Linear(h, (cfg.num_heads + 2 * cfg.num_kv_heads) * d, bias=False)
        self.o_proj = exact.Linear(cfg.num_heads * d, h, bias=False)
        self.qk_norm = qk_norm
        if qk_norm:  # Qwen3's per-head norms; a Llama attention has none (and no such tensors)
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, layer: int,
                view: CacheView | None) -> Tensor:
        return self.attend(self.qkv_proj(x), cos, sin, mask, layer, view)

    def attend(self, qkv: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, layer: int,
               view: CacheView | None) -> Tensor:
        """The rest of `forward` from the fused projection's output qkv [B, T, (Hq + 2 Hkv) D] -> [B, T, H]."""
        cfg = self.cfg
        b, t, _ = qkv.shape
        if view is not None and (self.qk_norm or qk_rope_fits(cfg.head_dim)) and inference_kernels(qkv.device):
            kc, vc = view.cache.k[layer], view.cache.v[layer]  # [N + 1, Hkv, S, D]
            # q/k norms (when the stack has them), RoPE and the cache writes in one kernel
            qw, kw = (self.q_norm.weight, self.k_norm.weight) if self.qk_norm else (None, None)
            q = qk_norm_rope_write(qkv, cfg.num_heads, cfg.num_kv_heads, qw, kw, cfg.rms_norm_eps, cos, sin, kc, vc,
                                   view.write_blocks, view.write_pos).transpose(1, 2)  # [B, Hq, T, D]
        else:
            q, k, v = qkv.split([n * cfg.head_dim for n in (cfg.num_heads, cfg.num_kv_heads, cfg.num_kv_heads)], -1)
            q = q.view(b, t, cfg.num_heads, cfg.head_dim)  # [B, T, Hq, D]
            k = k.view(b, t, cfg.num_kv_heads, cfg.head_dim)  # [B, T, Hkv, D]
            if self.qk_norm:
                q, k = self.q_norm(q), self.k_norm(k)
            q, k = q.transpose(1, 2), k.transpose(1, 2)  # [B, Hq, T, D], [B, Hkv, T, D]
            v = v.reshape(b, t, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)  # [B, Hkv, T, D]
            q, k = apply_rotate_half(q, cos, sin), apply_rotate_half(k, cos, sin)
            if view is None:
                out = exact.attention(q, k, v, mask)  # [B, Hq, T, D]
                return self.o_proj(out.transpose(1, 2).reshape(b, t, cfg.num_heads * cfg.head_dim))
            kc, vc = view.cache.k[layer], view.cache.v[layer]  # [N + 1, Hkv, S, D]
            # advanced indices around a slice: indexed dims lead, so the target is [B, T, Hkv, D]
            kc[view.write_blocks, :, view.write_pos] = k.transpose(1, 2).to(kc.dtype)
            vc[view.write_blocks, :, view.write_pos] = v.transpose(1, 2).to(vc.dtype)
        if view.lengths is not None:  # one token per row: the decode kernel reads each row's own length
            out = paged_decode_attention(q[:, :, 0], kc, vc, view.tables, view.lengths, view.context_len)  # [B, Hq, D]
            return self.o_proj(out.reshape(b, t, cfg.num_heads * cfg.head_dim))
        k, v = view.keys(layer, q.dtype)  # [B, Hkv, C, D] each
        out = exact.attention(q, k, v, mask)  # [B, Hq, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, cfg.num_heads * cfg.head_dim))


class Qwen3MLP(nn.Module):
    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        # gate and up in one matmul; the release stores them as gate_proj / up_proj
        self.gate_up_proj = exact.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = exact.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        if inference_kernels(x.device):
            return self.down_proj(silu_mul_fused(self.gate_up_proj(x)))
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(exact.silu(gate) * up)


class Qwen3Layer(nn.Module):
    def __init__(self, cfg: BackboneConfig, qk_norm: bool = True) -> None:
        super().__init__()
        self.self_attn = Qwen3Attention(cfg, qk_norm)
        self.mlp = Qwen3MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, layer: int,
                view: CacheView | None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, layer, view)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Backbone(nn.Module):
    """Embedding table, decoder layers and final norm (release prefix `transformer.`). With
    `embed_tokens=False` the stack has no token table (a model that builds its input rows itself).
    `qk_norm=False` drops the per-head q/k norms and `rope_scaling` scales the RoPE frequencies
    (Llama-3): together a Llama decoder. `norm_linear_rows`: where the kernels run, a pass of at most this
    many rows (a decode step's) takes each residual add and norm inside the matmul that reads the norm, the
    gate/up one with its activation (`_run_rows`; 0: never)."""

    def __init__(self, cfg: BackboneConfig, *, embed_tokens: bool = True, qk_norm: bool = True,
                 rope_scaling: Llama3Scaling | None = None, norm_linear_rows: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.rope_scaling = rope_scaling
        self.norm_linear_rows = norm_linear_rows
        if embed_tokens:
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = module_list_of(Qwen3Layer(cfg, qk_norm) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: Tensor, *, valid: Tensor | None = None, layer_inputs: list[Tensor] | None = None) -> Tensor:
        """Full causal pass with no cache. x [B, T, H]; valid [B, T] marks real (right-padded) rows.

        Returns the final-norm output [B, T, H]. `layer_inputs`, when given, collects the residual
        stream entering each layer.
        """
        b, t, _ = x.shape
        positions = torch.arange(t, device=x.device).expand(b, t)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()[None, None]  # [1, 1, T, T]
        if valid is not None:
            mask = mask & valid[:, None, None, :]
        return self._run(x, positions, mask, None, layer_inputs)

    def forward_cached(self, x: Tensor, cache: Cache, index: Tensor, positions: Tensor,
                       valid: Tensor | None = None, context_len: int | None = None) -> Tensor:
        """Prefill or decode through a cache.

        x [B, T, H]: row b's tokens sit at positions[b] ([B, T], consecutive). index: the slot of each row
        ([B], a `KVCache`) or its block table ([B, W], a `PagedKVCache`: position p in block index[b, p // size]).
        valid [B, T] (default all) marks real tokens; padding writes to the dummy slot / block.
        context_len bounds the keys read (must exceed every valid position; default: the whole slot or
        table). A decode call (T == 1) on CUDA reads each row's own length through the decode kernel instead; one
        on a CPU over a `PagedKVCache` in float32 (autograd off) runs `decode_row` (the same values, few operations).
        Returns the final-norm output [B, T, H]; outputs at padded tokens are meaningless.
        """
        b, t, _ = x.shape
        if valid is None:
            valid = torch.ones(b, t, dtype=torch.bool, device=x.device)
        ctx = context_len if context_len is not None else (
            cache.max_len if isinstance(cache, KVCache) else index.shape[1] * cache.block_size)
        if (isinstance(cache, PagedKVCache) and not kernels_on(x.device) and decode_row.fits(x, cache)
                and isinstance(self.layers[0].mlp, Qwen3MLP)):  # the decode row's MLP is the dense SwiGLU
            return decode_row.forward(self, x, cache, index, positions, valid, ctx)
        positions = torch.where(valid, positions, torch.zeros_like(positions))
        lengths = positions[:, 0] + 1 if t == 1 and kernels_on(x.device) else None
        view = CacheView.build(cache, index, positions, valid, ctx, lengths)
        mask = None  # the decode kernel bounds each row by its length
        if view.lengths is None:
            keys = torch.arange(ctx, device=x.device)
            mask = (keys[None, None, :] <= positions[:, :, None])[:, None]  # [B, 1, T, C]
        return self._run(x, positions, mask, view, None)

    def _run(self, x: Tensor, positions: Tensor, mask: Tensor | None, view: CacheView | None,
             layer_inputs: list[Tensor] | None) -> Tensor:
        cos, sin = rotate_half_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta, self.rope_scaling)
        if layer_inputs is None and inference_kernels(x.device):
            return self._run_fused(x, cos, sin, mask, view)
        for i, layer in enumerate(self.layers):
            if layer_inputs is not None:
                layer_inputs.append(x)
            x = layer(x, cos, sin, mask, i, view)
        return self.norm(x)

    def _run_fused(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, view: CacheView | None) -> Tensor:
        """The same layers with each residual add fused into the norm that follows it (one kernel each)."""
        if x.numel() // x.shape[-1] <= self.norm_linear_rows:
            return self._run_rows(x, cos, sin, mask, view)
        layers = list(self.layers)
        first = layers[0].input_layernorm
        h = rms_norm_fused(x, first.weight, first.eps)
        for i, layer in enumerate(layers):
            post = layer.post_attention_layernorm
            x, h = add_rms_norm_fused(x, layer.self_attn(h, cos, sin, mask, i, view), post.weight, post.eps)
            after = layers[i + 1].input_layernorm if i + 1 < len(layers) else self.norm
            x, h = add_rms_norm_fused(x, layer.mlp(h), after.weight, after.eps)
        return h

    def _run_rows(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, view: CacheView | None) -> Tensor:
        """The same layers for few rows: the q/k/v matmul with the residual add and the norm before it, and the
        gate/up matmul with the add and the norm before it and SwiGLU after it, one launch each (`norm_linear`);
        the last add with the final norm (one kernel)."""
        b, t, width = x.shape
        s, delta = x.reshape(b * t, width), None  # [B T, H]
        for i, layer in enumerate(self.layers):
            att, mlp, norm, post = layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm
            s, qkv = norm_linear(s, att.qkv_proj.weight, norm.weight, norm.eps, delta=delta)
            out = att.attend(qkv.view(b, t, -1), cos, sin, mask, i, view)  # [B, T, H]
            s, act = norm_linear(s, mlp.gate_up_proj.weight, post.weight, post.eps, delta=out.reshape(b * t, width),
                                 swiglu=True)  # [B T, H], [B T, I]
            delta = mlp.down_proj(act)
        if delta is None:
            raise ValueError("Qwen3Backbone: a stack without layers")
        return add_rms_norm_fused(s, delta, self.norm.weight, self.norm.eps)[1].view(b, t, width)


@dataclass(frozen=True)
class Part:
    """Where one release key lives: rows [start, start + shape[0]) of parameter `param`."""

    param: str
    start: int
    shape: tuple[int, ...]


def release_layout(model: nn.Module) -> dict[str, Part]:
    """Every release key the model's parameters are made of; a fused parameter of a decoder is split into
    its parts with that decoder's own sizes."""
    fused = {name + ".": fused_parts(m.cfg) for name, m in model.named_modules() if isinstance(m, Qwen3Backbone)}
    layout: dict[str, Part] = {}
    for name, p in model.named_parameters():
        prefix = max((k for k in fused if name.startswith(k)), key=len, default=None)
        parts = fused[prefix] if prefix is not None else {}
        suffix = next((s for s in parts if name.endswith(s)), None)
        if suffix is None:
            layout[name] = Part(name, 0, tuple(p.shape))
            continue
        base, start = name[: -len(suffix)], 0
        for key, rows in parts[suffix]:
            layout[base + key] = Part(name, start, (rows, *p.shape[1:]))
            start += rows
    return layout
