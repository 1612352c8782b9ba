"""The Qwen3-TTS code predictor: groups 1..G-1 of a frame from the talker's hidden state and group 0.

Owns: the module tree under the release's names (`talker.code_predictor.model.{layers, norm,
codec_embedding.(g-1)}`, `lm_head.(g-1)`, `small_to_mtp_projection`, an identity with no tensors when the
widths match), the batched per-frame pass over B rows with its own per-frame KV cache (positions 0..G-1),
and the teacher-forced pass (one causal pass over given codes). Where the layers' kernels run
(`kernels.inference_kernels`), the per-frame pass is `predict_fused`: per layer step one launch each for the
q/k projection's attention (`frame_attention`: norms, RoPE, the K/V write, attention), the gate/up projection
with its activation (`gate_up_swiglu`) and each residual add with the norm after it, besides the three other
matmuls; per group one launch for the drawn code's row (the next input, its norm when there is no input
projection, and the frame's running sum, `frame(codes)`); RoPE tables made once per device (`rope.rotate_half_rows`);
no dtype copies.
On a CPU in float32 (inference) `predict` runs the same values through the kept frame pass
(`frame_stack_kept.kept_stack`: K/V, RoPE rows, masks, projection tiles and each step's buffers made once and
kept from frame to frame; each step's input row written into the input projection's tile), and copies the frame's K/V into the given cache at the end.
Must not know: how a code is chosen (the caller's `draw`), the talker's cache, prompts, requests.
"""

from __future__ import annotations

from typing import Callable, cast

import torch
from torch import Tensor, nn

from v2.models import exact, frame_stack

from v2.models.kernels.frame_attention import MAX_POSITIONS, frame_attention
from v2.models.kernels.rms_norm import add_rms_norm_fused, embed_rms_norm_fused, rms_norm_fused
from v2.models.kernels.swiglu import gate_up_swiglu
from v2.models.kv_cache import KVCache
from v2.models.module_list import module_list_of
from v2.models.frame_stack_kept import kept_stack
from v2.models.qwen3 import Qwen3Backbone
from v2.models.qwen3_tts.config import CodePredictorConfig
from v2.models.rope import rotate_half_rows

# (group g in 1..G-1, logits [B, V] float32) -> (codes [B], logprobs [B])
Draw = Callable[[int, Tensor], tuple[Tensor, Tensor]]


class CodePredictorModel(Qwen3Backbone):
    """Decoder layers + final norm, and the G-1 input tables (talker width) for groups 1..G-1."""

    def __init__(self, cfg: CodePredictorConfig, talker_hidden: int) -> None:
        super().__init__(cfg.decoder, embed_tokens=False)
        self.codec_embedding = module_list_of(
            nn.Embedding(cfg.codebook_size, talker_hidden) for _ in range(cfg.num_code_groups - 1))


class CodePredictor(nn.Module):
    def __init__(self, cfg: CodePredictorConfig, talker_hidden: int) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        self.model = CodePredictorModel(cfg, talker_hidden)
        self.lm_head = nn.ModuleList(exact.Linear(h, cfg.codebook_size, bias=False) for _ in range(cfg.num_code_groups - 1))
        self.small_to_mtp_projection: nn.Module = (
            exact.Linear(talker_hidden, h, bias=True) if h != talker_hidden else nn.Identity())

    def allocate_kv(self, batch: int, *, dtype: torch.dtype, device: torch.device | str) -> KVCache:
        """A per-frame cache for `batch` rows: G positions each (the hidden state, then groups 0..G-2)."""
        return KVCache.allocate(self.cfg.decoder, batch, self.cfg.num_code_groups, dtype=dtype, device=device)

    def embed(self, group: int, codes: Tensor) -> Tensor:
        """E_g[codes] for g in 1..G-1 (talker width)."""
        return self.model.codec_embedding[group - 1](codes)

    def predict(self, hidden: Tensor, first: Tensor, draw: Draw, *, cache: KVCache | None = None,
                valid: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """One frame for B rows, group after group.

        hidden [B, H_talker]: the talker state the frame's group 0 was chosen from; first [B, H_talker]:
        E_0[c_0]. Row b reads and writes only slot b of `cache` (allocated when not given; its contents
        are overwritten). valid [B] False sends a row's writes to the dummy slot (bucket padding).
        Returns codes [B, G-1] (groups 1..G-1), raw logits [B, G-1, V] float32, logprobs [B, G-1].
        """
        if frame_stack.fits(self.model, hidden):
            return self._predict_cpu(hidden, first, draw, cache)
        b, g_total = hidden.shape[0], self.cfg.num_code_groups
        dev = hidden.device
        if cache is None:
            cache = self.allocate_kv(b, dtype=hidden.dtype, device=dev)
        slots = torch.arange(b, device=dev)
        ok = torch.ones(b, 1, dtype=torch.bool, device=dev) if valid is None else valid[:, None]
        x = self.small_to_mtp_projection(torch.stack([hidden, first], dim=1))  # [B, 2, Hc]
        positions = torch.arange(2, device=dev).expand(b, 2)
        out = self.model.forward_cached(x, cache, slots, positions, ok.expand(b, 2), 2)[:, -1]  # [B, Hc]
        codes, logits, logprobs = [], [], []
        for g in range(1, g_total):
            lg = self.lm_head[g - 1](out).float()  # [B, V]
            code, lp = draw(g, lg)
            codes.append(code)
            logits.append(lg)
            logprobs.append(lp)
            if g + 1 < g_total:
                x = self.small_to_mtp_projection(self.embed(g, code))[:, None]  # [B, 1, Hc]
                pos = torch.full((b, 1), g + 1, dtype=torch.long, device=dev)
                out = self.model.forward_cached(x, cache, slots, pos, ok, g + 2)[:, 0]
        return torch.stack(codes, 1), torch.stack(logits, 1), torch.stack(logprobs, 1)

    def _predict_cpu(self, hidden: Tensor, first: Tensor, draw: Draw,
                     cache: KVCache | None) -> tuple[Tensor, Tensor, Tensor]:
        """`predict` through the kept frame pass (`frame_stack_kept.kept_stack`: the same values, few operations a step)."""
        b, g_total = hidden.shape[0], self.cfg.num_code_groups
        stack = kept_stack(self.model, b, g_total)
        proj = self.small_to_mtp_projection if isinstance(self.small_to_mtp_projection, exact.Linear) else None
        tables = [e.weight for e in self.model.codec_embedding]
        width = hidden.shape[-1]
        dtype, dev = hidden.dtype, hidden.device
        t_in = exact.Tile(2 * b, width, dtype, dev) if proj is not None else None
        t_head = exact.Tile(b, self.cfg.hidden_size, dtype, dev)
        heads = [exact.aligned_weight(cast(exact.Linear, h).weight) for h in self.lm_head]
        rows = torch.empty(b, 2, width, dtype=dtype, device=dev) if t_in is None else t_in.rows(2 * b).view(b, 2, width)
        rows[:, 0], rows[:, 1] = hidden, first
        x = rows if t_in is None or proj is None else t_in.linear(2 * b, proj.weight, proj.bias).view(b, 2, -1)  # [B, 2, Hc]
        stack.step(x, 0, t_head.rows(b))
        codes, logits, logprobs = [], [], []
        for g in range(1, g_total):
            lg = t_head.linear(b, heads[g - 1])  # [B, V] float32
            code, lp = draw(g, lg)
            codes.append(code)
            logits.append(lg)
            logprobs.append(lp)
            if g + 1 < g_total:
                if t_in is not None and proj is not None:
                    torch.index_select(tables[g - 1], 0, code, out=t_in.rows(b))
                    x = t_in.linear(b, proj.weight, proj.bias)[:, None]  # [B, 1, Hc]
                else:
                    x = torch.index_select(tables[g - 1], 0, code)[:, None]  # [B, 1, Hc]
                stack.step(x, g + 1, t_head.rows(b))
        if cache is not None:
            stack.store(cache, g_total)
        return torch.stack(codes, 1), torch.stack(logits, 1), torch.stack(logprobs, 1)

    @property
    def fits_kernels(self) -> bool:
        """Whether `predict_fused` can run this predictor (a power-of-two head_dim, a frame of at most 16 positions)."""
        d = self.cfg.decoder.head_dim
        return d & (d - 1) == 0 and self.cfg.num_code_groups <= MAX_POSITIONS

    def predict_fused(self, hidden: Tensor, c0: Tensor, table0: Tensor, draw: Draw, *, cache: KVCache | None = None,
                      return_logits: bool = True) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
        """`predict` through the kernels (inference only). hidden [B, H_talker]; c0 [B] group 0 and table0 its table
        (E_0). Row b uses slot b of `cache` (a padding row's writes stay in its own slot). Returns codes [B, G-1],
        raw logits [B, G-1, V] float32 (None unless `return_logits`), logprobs [B, G-1] and frame(codes) =
        sum_g E_g[c_g] [B, H_talker]."""
        b, g_total = hidden.shape[0], self.cfg.num_code_groups
        if cache is None:
            cache = self.allocate_kv(b, dtype=hidden.dtype, device=hidden.device)
        dec, model = self.cfg.decoder, self.model
        cos, sin = rotate_half_rows(g_total, dec.head_dim, dec.rope_theta, None, hidden.device)  # [G, D]; unscaled
        first = model.layers[0].input_layernorm
        direct = isinstance(self.small_to_mtp_projection, nn.Identity)  # the code rows are the decoder's inputs
        acc = torch.empty_like(hidden)  # frame(codes) so far
        e0, _ = embed_rms_norm_fused(c0, table0, acc, None, 0.0, first=True)
        x = self.small_to_mtp_projection(torch.stack([hidden, e0], dim=1))  # [B, 2, Hc]
        out = _layers(model, x, rms_norm_fused(x, first.weight, first.eps), 0, cache, cos, sin)  # [B, Hc]
        codes, logits, logprobs = [], [], []
        for g in range(1, g_total):
            lg = self.lm_head[g - 1](out)  # [B, V]; the draw reads any float dtype
            code, lp = draw(g, lg)
            codes.append(code)
            logprobs.append(lp)
            if return_logits:
                logits.append(lg.float())
            table = model.codec_embedding[g - 1].weight
            if g + 1 == g_total:  # the last code feeds nothing: only the frame's sum
                embed_rms_norm_fused(code, table, acc, None, 0.0, first=False)
                continue
            e, y = embed_rms_norm_fused(code, table, acc, first.weight if direct else None, first.eps, first=False)
            if direct and y is not None:
                x, h = e[:, None], y[:, None]  # [B, 1, Hc]
            else:
                x = self.small_to_mtp_projection(e)[:, None]  # [B, 1, Hc]
                h = rms_norm_fused(x, first.weight, first.eps)
            out = _layers(model, x, h, g + 1, cache, cos, sin)
        return (torch.stack(codes, 1), torch.stack(logits, 1) if return_logits else None, torch.stack(logprobs, 1),
                acc)

    def teacher_inputs(self, hidden: Tensor, first: Tensor, codes: Tensor) -> Tensor:
        """[h, E_0[c_0], E_1[c_1], ..., E_{G-2}[c_{G-2}]]: [B, G, H_talker] (before the projection).
        hidden [B, H], first = E_0[c_0] [B, H], codes [B, G] (group G-1 unused)."""
        rest = [self.embed(g, codes[:, g]) for g in range(1, self.cfg.num_code_groups - 1)]
        return torch.stack([hidden, first, *rest], dim=1)

    def teacher_logits(self, inputs: Tensor) -> Tensor:
        """One causal pass over `teacher_inputs` [B, G, H_talker] -> logits [B, G-1, V] float32, row g-1 from
        the hidden at position g (differentiable)."""
        out = self.model(self.small_to_mtp_projection(inputs))  # [B, G, Hc]
        return torch.stack([self.lm_head[g - 1](out[:, g]) for g in range(1, self.cfg.num_code_groups)], 1).float()


def _layers(model: CodePredictorModel, x: Tensor, h: Tensor, position: int, cache: KVCache, cos: Tensor,
            sin: Tensor) -> Tensor:
    """The decoder over x [B, T, Hc] (the residual stream at positions position .. position + T - 1; h its first
    norm) through the kernels: seven launches a layer. Returns the final norm's output at the last position [B, Hc]."""
    layers = list(model.layers)
    for i, layer in enumerate(layers):
        att, mlp, cfg = layer.self_attn, layer.mlp, model.cfg
        heads = frame_attention(att.qkv_proj(h), cfg.num_heads, cfg.num_kv_heads, att.q_norm.weight, att.k_norm.weight,
                                att.q_norm.eps, cos, sin, cache.k[i], cache.v[i], position)  # [B, T, Hq D]
        post = layer.post_attention_layernorm
        x, h = add_rms_norm_fused(x, att.o_proj(heads), post.weight, post.eps)
        after = layers[i + 1].input_layernorm if i + 1 < len(layers) else model.norm
        x, h = add_rms_norm_fused(x, mlp.down_proj(gate_up_swiglu(h, mlp.gate_up_proj.weight)), after.weight, after.eps)
    return h[:, -1]
