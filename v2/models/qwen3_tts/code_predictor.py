"""The Qwen3-TTS code predictor: groups 1..G-1 of a frame from the talker's hidden state and group 0.

Owns: the module tree under the release's names (`talker.code_predictor.model.{layers, norm,
codec_embedding.(g-1)}`, `lm_head.(g-1)`, `small_to_mtp_projection`, an identity with no tensors when the
widths match), the batched per-frame pass over B rows with its own per-frame KV cache (positions 0..G-1),
and the teacher-forced pass (one causal pass over given codes).
Must not know: how a code is chosen (the caller's `draw`), the talker's cache, prompts, requests.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from v2.models import exact

from v2.models.kv_cache import KVCache
from v2.models.qwen3 import Qwen3Backbone
from v2.models.qwen3_tts.config import CodePredictorConfig

# (group g in 1..G-1, logits [B, V] float32) -> (codes [B], logprobs [B])
Draw = Callable[[int, Tensor], tuple[Tensor, Tensor]]


class CodePredictorModel(Qwen3Backbone):
    """Decoder layers + final norm, and the G-1 input tables (talker width) for groups 1..G-1."""

    def __init__(self, cfg: CodePredictorConfig, talker_hidden: int) -> None:
        super().__init__(cfg.decoder, embed_tokens=False)
        self.codec_embedding = nn.ModuleList(
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
