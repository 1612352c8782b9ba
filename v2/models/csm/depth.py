"""The CSM depth decoder: codebooks 1..N-1 of a frame from the backbone's hidden state and codebook 0.

Owns: the module tree under the release's names (`depth_decoder.model.{embed_tokens, inputs_embeds_projector,
layers, norm}`, `depth_decoder.codebooks_head.weight` [N-1, H, V]), the input row of each position
(position 0 = the backbone hidden h, position p >= 1 = `embed_tokens[(p-1) * V + c_(p-1)]`, every row through
`inputs_embeds_projector`; the table is at backbone width), the per-position heads (head p-1 reads
position p and gives codebook p), the batched incremental pass over B rows with its own per-frame KV cache
(positions 0..N-1, every row at the same position) and the teacher-forced pass (one causal pass over
given codes). Where the layers' kernels run (`kernels.inference_kernels`), the per-frame pass is
`predict_fused`: five launches a layer step: the q/k/v matmul with the residual add and the input norm before it
(`norm_linear`), the attention (`frame_attention` without q/k norms: RoPE, the K/V write, attention), o_proj, the
gate/up matmul with the add and the norm before it and SwiGLU after it (`norm_linear`), down_proj; per codebook one
more, the head's matmul with the last add and the final norm before it; a step's input row is read inside the first
q/k/v launch from `projected_table` (the audio table through the input projection, made once per weights); the
Llama-3 RoPE tables made once per device (`rope.rotate_half_rows`); the raw logits made float32 once per frame.
On a CPU in float32 (inference) `predict` runs the same values through the kept frame pass
(`frame_stack_kept.kept_stack`: K/V, RoPE rows, masks, projection tiles and each step's buffers made once and kept
from frame to frame; each step's table row selected straight into the input projection's tile), and copies the
frame's K/V into the given cache at the end.
Must not know: how a code is chosen (the caller's `draw`), the backbone's cache, prompts, requests.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models import exact, frame_stack
from v2.models.csm.config import CsmConfig
from v2.models.kernels.frame_attention import MAX_FRAME_POSITIONS, frame_attention
from v2.models.kernels.norm_linear import norm_linear
from v2.models.kv_cache import KVCache
from v2.models.frame_stack_kept import kept_stack
from v2.models.qwen3 import Qwen3Backbone
from v2.models.rope import rotate_half_rows

# (codebook k in 1..N-1, logits [B, V] float32) -> (codes [B], logprobs [B])
Draw = Callable[[int, Tensor], tuple[Tensor, Tensor]]


class DepthDecoderModel(Qwen3Backbone):
    """The Llama layers at depth width, the audio table (backbone width) and the input projection."""

    def __init__(self, cfg: CsmConfig) -> None:
        super().__init__(cfg.depth, embed_tokens=False, qk_norm=False, rope_scaling=cfg.depth_rope)
        self.embed_tokens = nn.Embedding(cfg.audio_table_rows, cfg.hidden_size)  # type: ignore[assignment]
        self.inputs_embeds_projector = exact.Linear(cfg.hidden_size, cfg.depth.hidden_size, bias=False)


class CodebooksHead(nn.Module):
    """weight [N-1, H, V]: codebook p's logits = hidden @ weight[p-1] (not transposed)."""

    def __init__(self, cfg: CsmConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cfg.num_codebooks - 1, cfg.depth.hidden_size, cfg.vocab_size))
        self._cached: tuple[int, int, Tensor] | None = None  # (data_ptr, version, [N-1, V, H'] weights)

    def _heads(self) -> Tensor:
        """[N-1, V, H'] the heads as `exact.linear` weights (H zero-padded to its alignment), made once per
        parameter value while autograd is off (a differentiable pass transposes in its graph)."""
        w = self.weight
        if torch.is_grad_enabled() and w.requires_grad:
            return w.transpose(1, 2)
        key = (w.data_ptr(), w._version)
        if self._cached is None or self._cached[:2] != key:
            pad = -w.shape[1] % exact.ALIGN
            with torch.inference_mode(False):  # kept past the call (v2/models/persist.py)
                self._cached = (*key, F.pad(w.detach().transpose(1, 2), (0, pad)).contiguous())
        return self._cached[2]

    def forward(self, hidden: Tensor, codebook: int) -> Tensor:
        """hidden [..., H] at position `codebook` -> logits of that codebook [..., V] (1 <= codebook <= N-1).
        On the CPU through `exact.linear` (a transposed copy of the heads is kept); elsewhere a plain matmul."""
        if not exact.on(hidden):
            return hidden @ self.weight[codebook - 1]
        heads = self._heads()[codebook - 1]  # [V, H']
        if heads.shape[-1] != hidden.shape[-1]:
            hidden = F.pad(hidden, (0, heads.shape[-1] - hidden.shape[-1]))
        return exact.linear(hidden, heads)


class DepthDecoder(nn.Module):
    def __init__(self, cfg: CsmConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = DepthDecoderModel(cfg)
        self.codebooks_head = CodebooksHead(cfg)
        self._projected: tuple[tuple, Tensor] | None = None  # (weights' key, `projected_table`)

    @property
    def num_codebooks(self) -> int:
        return self.cfg.num_codebooks

    def allocate_kv(self, batch: int, *, dtype: torch.dtype, device: torch.device | str) -> KVCache:
        """A per-frame cache for `batch` rows: N positions each (h, then codebooks 0..N-2)."""
        return KVCache.allocate(self.cfg.depth, batch, self.num_codebooks, dtype=dtype, device=device)

    def embed(self, codebook: int, codes: Tensor) -> Tensor:
        """The depth table's row of codebook k's codes: [...] -> [..., H] (backbone width)."""
        return self.model.embed_tokens(codes + codebook * self.cfg.vocab_size)

    def predict(self, hidden: Tensor, c0: Tensor, draw: Draw, *, cache: KVCache | None = None,
                valid: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """One frame for B rows, codebook after codebook.

        hidden [B, H]: the backbone state codebook 0 was chosen from; c0 [B]: codebook 0. Row b reads and
        writes only slot b of `cache` (allocated when not given; its contents are overwritten). valid [B]
        False sends a row's writes to the dummy slot (bucket padding). Returns codes [B, N-1] (codebooks
        1..N-1), raw logits [B, N-1, V] float32, logprobs [B, N-1].
        """
        if frame_stack.fits(self.model, hidden):
            return self._predict_cpu(hidden, c0, draw, cache)
        b, n = hidden.shape[0], self.num_codebooks
        dev = hidden.device
        if cache is None:
            cache = self.allocate_kv(b, dtype=hidden.dtype, device=dev)
        slots = torch.arange(b, device=dev)
        ok = torch.ones(b, 1, dtype=torch.bool, device=dev) if valid is None else valid[:, None]
        m = self.model
        x = m.inputs_embeds_projector(torch.stack([hidden, self.embed(0, c0)], dim=1))  # [B, 2, Hd]
        positions = torch.arange(2, device=dev).expand(b, 2)
        out = m.forward_cached(x, cache, slots, positions, ok.expand(b, 2), 2)[:, -1]  # [B, Hd]
        codes, logits, logprobs = [], [], []
        for k in range(1, n):
            lg = self.codebooks_head(out, k).float()  # [B, V]
            code, lp = draw(k, lg)
            codes.append(code)
            logits.append(lg)
            logprobs.append(lp)
            if k + 1 < n:
                x = m.inputs_embeds_projector(self.embed(k, code))[:, None]  # [B, 1, Hd]
                pos = torch.full((b, 1), k + 1, dtype=torch.long, device=dev)
                out = m.forward_cached(x, cache, slots, pos, ok, k + 2)[:, 0]
        return torch.stack(codes, 1), torch.stack(logits, 1), torch.stack(logprobs, 1)

    def _predict_cpu(self, hidden: Tensor, c0: Tensor, draw: Draw,
                     cache: KVCache | None) -> tuple[Tensor, Tensor, Tensor]:
        """`predict` through the kept frame pass (`frame_stack_kept.kept_stack`: the same values, few operations a step)."""
        b, n, v = hidden.shape[0], self.num_codebooks, self.cfg.vocab_size
        m = self.model
        stack = kept_stack(m, b, n)
        table = m.embed_tokens.weight  # [N V, H]: codebook k's rows are k V .. (k + 1) V - 1
        width, dtype, dev = hidden.shape[-1], hidden.dtype, hidden.device
        t_in = exact.Tile(2 * b, width, dtype, dev)
        heads = self.codebooks_head._heads()  # [N-1, V, H']
        t_head = exact.Tile(b, heads.shape[-1], dtype, dev)
        proj = m.inputs_embeds_projector.weight
        rows = t_in.rows(2 * b).view(b, 2, width)
        rows[:, 0] = hidden
        torch.index_select(table, 0, c0, out=rows[:, 1])
        stack.step(t_in.linear(2 * b, proj).view(b, 2, -1), 0, t_head.rows(b)[:, : self.cfg.depth.hidden_size])
        codes, logits, logprobs = [], [], []
        for k in range(1, n):
            lg = t_head.linear(b, heads[k - 1])  # [B, V] float32
            code, lp = draw(k, lg)
            codes.append(code)
            logits.append(lg)
            logprobs.append(lp)
            if k + 1 < n:
                torch.index_select(table[k * v: (k + 1) * v], 0, code, out=t_in.rows(b))
                stack.step(t_in.linear(b, proj)[:, None], k + 1, t_head.rows(b)[:, : self.cfg.depth.hidden_size])
        if cache is not None:
            stack.store(cache, n)
        return torch.stack(codes, 1), torch.stack(logits, 1), torch.stack(logprobs, 1)

    @property
    def fits_kernels(self) -> bool:
        """Whether `predict_fused` can run this decoder (a power-of-two head_dim, a frame of at most 32 positions)."""
        d = self.cfg.depth.head_dim
        return d & (d - 1) == 0 and self.num_codebooks <= MAX_FRAME_POSITIONS

    def predict_fused(self, hidden: Tensor, c0: Tensor, draw: Draw, *,
                      cache: KVCache | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """`predict` through the kernels (inference only; `fits_kernels`). Row b uses slot b of `cache` (a padding
        row's writes stay in its own slot, which the next frame overwrites). The draw reads the head's logits in
        the activations' dtype. Returns codes [B, N-1], raw logits [B, N-1, V] float32, logprobs [B, N-1]."""
        b, n, v = hidden.shape[0], self.num_codebooks, self.cfg.vocab_size
        if cache is None:
            cache = self.allocate_kv(b, dtype=hidden.dtype, device=hidden.device)
        dec, m = self.cfg.depth, self.model
        cos, sin = rotate_half_rows(n, dec.head_dim, dec.rope_theta, self.cfg.depth_rope, hidden.device)  # [N, D]
        table = m.embed_tokens.weight  # [N V, H]: codebook k's rows are k V .. (k + 1) V - 1
        x = m.inputs_embeds_projector(torch.stack([hidden, F.embedding(c0, table[:v])], dim=1))  # [B, 2, Hd]
        x, delta = _layers(m, x.reshape(b * 2, -1), b, 2, 0, cache, cos, sin)  # [B 2, Hd] each
        x, delta = x.view(b, 2, -1)[:, -1], delta.view(b, 2, -1)[:, -1]  # [B, Hd]: the last position's
        projected = self.projected_table()  # [N V, Hd]
        heads = self.codebooks_head.weight  # [N-1, Hd, V]
        codes, logits, logprobs = [], [], []
        for k in range(1, n):  # the last add, the final norm and the head in one launch
            lg = norm_linear(x, heads[k - 1].t(), m.norm.weight, m.norm.eps, delta=delta, keep_sum=False)[1]  # [B, V]
            code, lp = draw(k, lg)
            codes.append(code)
            logits.append(lg)
            logprobs.append(lp)
            if k + 1 < n:  # the input row read from the projected table inside the first layer's q/k/v launch
                x, delta = _layers(m, projected[k * v: (k + 1) * v], b, 1, k + 1, cache, cos, sin, rows=code)
        return torch.stack(codes, 1), torch.stack(logits, 1).float(), torch.stack(logprobs, 1)

    def projected_table(self) -> Tensor:
        """[N V, Hd] every row of the audio table through `inputs_embeds_projector` (inference only), made once per
        value of the two weights and device: a depth step of `predict_fused` reads its input row from it."""
        table, proj = self.model.embed_tokens.weight, self.model.inputs_embeds_projector.weight
        key = (table.data_ptr(), table._version, proj.data_ptr(), proj._version, table.device)
        if self._projected is None or self._projected[0] != key:
            with torch.inference_mode(False):  # kept past the call (v2/models/persist.py)
                self._projected = (key, self.model.inputs_embeds_projector(table.detach()).contiguous())
        return self._projected[1]

    def teacher_inputs(self, hidden: Tensor, codes: Tensor) -> Tensor:
        """[h, E[c_0], E[V + c_1], ..., E[(N-2) V + c_(N-2)]]: [B, N, H] before the projection.
        hidden [B, H], codes [B, N] (codebook N-1 unused)."""
        n = self.num_codebooks
        offsets = torch.arange(n - 1, device=codes.device) * self.cfg.vocab_size  # [N-1]
        rows = self.model.embed_tokens(codes[:, : n - 1] + offsets)  # [B, N-1, H]
        return torch.cat([hidden[:, None].to(rows.dtype), rows], dim=1)

    def teacher(self, inputs: Tensor) -> tuple[Tensor, Tensor]:
        """One causal pass over `teacher_inputs` [B, N, H] -> hidden after the final norm [B, N, Hd] and
        logits [B, N-1, V] float32 (row k-1 = codebook k, from the hidden at position k; differentiable)."""
        out = self.model(self.model.inputs_embeds_projector(inputs))  # [B, N, Hd]
        logits = torch.stack([self.codebooks_head(out[:, k], k) for k in range(1, self.num_codebooks)], 1)
        return out, logits.float()


def _layers(model: DepthDecoderModel, x: Tensor, b: int, t: int, position: int, cache: KVCache, cos: Tensor,
            sin: Tensor, *, rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The layers over the residual stream x [B T, Hd] of B rows at positions position .. position + T - 1 (with
    `rows` [B]: T = 1 and the stream's rows are x[rows], x a table) through the kernels: five launches a layer, each
    residual add and the norm after it inside the matmul that reads the norm (`norm_linear`). Returns the stream
    before the last layer's MLP output is added and that output: [B T, Hd] each (the final norm is the head's)."""
    cfg, delta = model.cfg, None
    for i, layer in enumerate(model.layers):
        att, mlp, norm, post = layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm
        s, qkv = norm_linear(x, att.qkv_proj.weight, norm.weight, norm.eps, delta=delta, rows=rows if i == 0 else None)
        heads = frame_attention(qkv.view(b, t, -1), cfg.num_heads, cfg.num_kv_heads, None, None, 0.0, cos, sin,
                                cache.k[i], cache.v[i], position)  # [B, T, Hq D]
        x, act = norm_linear(s, mlp.gate_up_proj.weight, post.weight, post.eps,
                             delta=att.o_proj(heads).view(b * t, -1), swiglu=True)  # [B T, Hd], [B T, I]
        delta = mlp.down_proj(act)  # [B T, Hd]
    if delta is None:
        raise ValueError("DepthDecoder: a stack without layers")
    return x, delta
