"""Sesame CSM: the backbone, its embeddings and codebook-0 head, the depth decoder, and the batched step functions.

Owns: the module tree under the release's weight names (`backbone_model.{embed_tokens.embed_audio_tokens,
layers, norm}`, `embed_text_tokens`, `lm_head`, `depth_decoder.*`), the rows the backbone reads (a text
row `embed_text_tokens[id]`; an audio row `frame(c) = sum_k A[k * V + c_k]` over the N codebooks of the
backbone's audio table A), and the step functions a runtime batches: `prefill` (prompt rows -> last
hidden + codebook-0 logits), `complete_frame` (codebook 0 chosen, codebooks 1..N-1 from the depth decoder,
the stop flag), `feed_frames` (a frame's audio row, one backbone decode row -> next hidden + logits) and
`frame_step` (both). Every per-row setting, seed and frame index is a tensor: no Python loop over rows.
Must not know: files (loader.py), conversations and text (prompt.py), requests, scheduling, the codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn

from v2.models import exact
from v2.models.csm.config import CsmConfig
from v2.models.csm.depth import DepthDecoder
from v2.models.csm.sampling import CsmSamplingTensors, FrameDraws
from v2.models.kernels import inference_kernels
from v2.models.kv_cache import Cache, KVCache, PagedKVCache
from v2.models.qwen3 import Qwen3Backbone


DECODE_ROWS = 64  # where the kernels run, a backbone pass of at most this many rows takes `norm_linear`


class BackboneEmbeddings(nn.Module):
    """`backbone_model.embed_tokens`: the audio table only (text rows come from `embed_text_tokens`)."""

    def __init__(self, cfg: CsmConfig) -> None:
        super().__init__()
        self.embed_audio_tokens = nn.Embedding(cfg.audio_table_rows, cfg.hidden_size)


class Backbone(Qwen3Backbone):
    """The Llama decoder over rows (no q/k norms, Llama-3 RoPE from the config) and its audio table. Where the
    kernels run, a decode row takes the fused RoPE + cache write (`qk_rope` without norms) and, up to `DECODE_ROWS`
    rows, each residual add and norm inside the matmul that reads the norm (`norm_linear`)."""

    def __init__(self, cfg: CsmConfig) -> None:
        super().__init__(cfg.backbone, embed_tokens=False, qk_norm=False, rope_scaling=cfg.backbone_rope,
                         norm_linear_rows=DECODE_ROWS)
        self.embed_tokens = BackboneEmbeddings(cfg)  # type: ignore[assignment]

    @property
    def audio_table(self) -> nn.Embedding:
        """`embed_tokens.embed_audio_tokens`: codebook k's code c is row k * V + c."""
        return cast(BackboneEmbeddings, self.embed_tokens).embed_audio_tokens


@dataclass
class FrameCodes:
    """One frame for B rows: codebook 0 chosen, codebooks 1..N-1 from the depth decoder."""

    codes: Tensor         # [B, N] int64
    logprobs: Tensor      # [B, N] of each chosen code (sampling.py says under which distribution)
    depth_logits: Tensor  # [B, N-1, V] float32 raw, row k-1 = codebook k
    stop: Tensor          # [B] bool: codebooks 0..N-2 all `codebook_eos` (the frame ends the sequence)


@dataclass
class FrameStep:
    """A frame completed for B rows, its audio row fed, the backbone's state and logits for the next frame."""

    frame: FrameCodes
    row: Tensor     # [B, H] the audio row fed
    hidden: Tensor  # [B, H] the next frame's h
    logits: Tensor  # [B, V] float32 raw codebook-0 logits of the next frame


class Csm(nn.Module):
    def __init__(self, cfg: CsmConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone_model = Backbone(cfg)
        self.embed_text_tokens = nn.Embedding(cfg.text_vocab_size, cfg.hidden_size)
        self.lm_head = exact.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.depth_decoder = DepthDecoder(cfg)

    # ----- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu") -> "Csm":
        """Load a release checkpoint directory (config.json + safetensors; the codec's keys are left to it)."""
        from v2.models.csm.loader import load_checkpoint

        return load_checkpoint(Path(path), dtype=dtype, device=device)

    @classmethod
    def from_seed(cls, config: dict, seed: int, *, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu") -> "Csm":
        """Build from a config dict (release schema) with weights drawn from a fixed seed (no files)."""
        from v2.models.csm.loader import init_seeded

        return init_seeded(config, seed, dtype=dtype, device=device)

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def num_codebooks(self) -> int:
        return self.cfg.num_codebooks

    def allocate_kv(self, num_slots: int, max_len: int) -> KVCache:
        return KVCache.allocate(self.cfg.backbone, num_slots, max_len, dtype=self.dtype, device=self.device)

    def allocate_paged_kv(self, num_blocks: int, block_size: int) -> PagedKVCache:
        return PagedKVCache.allocate(self.cfg.backbone, num_blocks, block_size, dtype=self.dtype, device=self.device)

    def allocate_depth_kv(self, batch: int) -> KVCache:
        """A per-frame depth-decoder cache for `batch` rows (reusable: every frame overwrites it)."""
        return self.depth_decoder.allocate_kv(batch, dtype=self.dtype, device=self.device)

    # ----- rows ----------------------------------------------------------------------------------
    def embed_text(self, ids: Tensor) -> Tensor:
        """Text rows: ids [...] -> [..., H]."""
        return self.embed_text_tokens(ids.to(self.device))

    def embed_frame(self, codes: Tensor) -> Tensor:
        """Audio rows frame(c) = sum_k A[k * V + c_k]: codes [..., N] -> [..., H] (a fixed-order sum)."""
        codes = codes.to(self.device)
        offsets = torch.arange(self.num_codebooks, device=codes.device) * self.cfg.vocab_size  # [N]
        rows = self.backbone_model.audio_table(codes + offsets)  # [..., N, H]
        return exact.halving_sum(rows, -2)

    def eos_frame(self, *lead: int) -> Tensor:
        """The all-`codebook_eos` frame [*lead, N] (the `<|audio_eos|>` rows' codes)."""
        return torch.full((*lead, self.num_codebooks), self.cfg.ids.codebook_eos, dtype=torch.long, device=self.device)

    def is_stop(self, codes: Tensor) -> Tensor:
        """[..., N] -> [...] bool: codebooks 0..N-2 all `codebook_eos` (the last is not looked at)."""
        return (codes[..., : self.num_codebooks - 1] == self.cfg.ids.codebook_eos).all(-1)

    # ----- backbone ------------------------------------------------------------------------------
    def c0_logits(self, hidden: Tensor) -> Tensor:
        """lm_head: hidden [..., H] -> raw codebook-0 logits [..., V] float32."""
        return self.lm_head(hidden).float()

    def prefill(self, rows: Tensor, cache: Cache, index: Tensor, positions: Tensor, valid: Tensor,
                last: Tensor, context_len: int | None = None) -> tuple[Tensor, Tensor]:
        """Prompt rows [B, T, H] (row b's tokens at positions[b], valid[b]) through the backbone into `cache`
        (`index`: slots [B] or block tables [B, W]). Returns the hidden at column `last` [B] of each row and
        its raw codebook-0 logits: [B, H], [B, V] float32."""
        out = self.backbone_model.forward_cached(rows.to(self.dtype), cache, index, positions, valid, context_len)
        h = out[torch.arange(out.shape[0], device=out.device), last]  # [B, H]
        return h, self.c0_logits(h)

    def feed_frames(self, codes: Tensor, cache: Cache, index: Tensor, positions: Tensor, *,
                    valid: Tensor | None = None, context_len: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """codes [B, N] -> their audio rows fed at positions [B] (one decode row each) -> (row [B, H],
        h [B, H], raw codebook-0 logits [B, V] float32). valid [B] False = bucket padding (dummy writes)."""
        row = self.embed_frame(codes)  # [B, H]
        ok = None if valid is None else valid[:, None]
        h = self.backbone_model.forward_cached(row[:, None], cache, index, positions[:, None], ok, context_len)[:, 0]
        return row, h, self.c0_logits(h)

    # ----- choices -------------------------------------------------------------------------------
    def draws(self, s: CsmSamplingTensors, frame: Tensor, *, groups: list[int] | None = None) -> FrameDraws:
        """How frame `frame` [B]'s draws are made (`sampling.FrameDraws`); `groups`: the codebooks drawn."""
        return FrameDraws(s, frame, self.num_codebooks, self.cfg.vocab_size, groups=groups)

    def choose_c0(self, logits: Tensor, s: CsmSamplingTensors, frame: Tensor, *,
                  draws: FrameDraws | None = None) -> tuple[Tensor, Tensor]:
        """Codebook 0 of frame `frame` [B] from raw logits [B, V] -> ids [B], logprobs [B]."""
        return (draws or self.draws(s, frame, groups=[0])).draw(0, logits)

    def predict_codes(self, hidden: Tensor, c0: Tensor, s: CsmSamplingTensors, frame: Tensor, *,
                      valid: Tensor | None = None, cache: KVCache | None = None,
                      draws: FrameDraws | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Codebooks 1..N-1 of frame `frame` [B]: hidden [B, H] (the state c0 [B] was chosen from) ->
        codes [B, N-1], raw logits [B, N-1, V] float32, logprobs [B, N-1]. `cache`: a depth cache of >= B
        slots (`allocate_depth_kv`), allocated when not given. With the layers' kernels, one fused pass
        (`DepthDecoder.predict_fused`)."""
        d = draws or self.draws(s, frame, groups=list(range(1, self.num_codebooks)))
        if inference_kernels(hidden.device) and self.depth_decoder.fits_kernels:
            return self.depth_decoder.predict_fused(hidden, c0, d.draw, cache=cache)
        return self.depth_decoder.predict(hidden, c0, d.draw, cache=cache, valid=valid)

    def complete_frame(self, hidden: Tensor, logits: Tensor, s: CsmSamplingTensors, frame: Tensor, *,
                       valid: Tensor | None = None, depth_cache: KVCache | None = None) -> FrameCodes:
        """Frame `frame` [B] from the backbone's h [B, H] and its raw logits [B, V]: codebook 0, then the
        depth decoder, then the stop flag (the frame's N draws made one way: `draws`)."""
        d = self.draws(s, frame)
        c0, lp0 = self.choose_c0(logits, s, frame, draws=d)
        rest, depth_logits, lps = self.predict_codes(hidden, c0, s, frame, valid=valid, cache=depth_cache, draws=d)
        codes = torch.cat([c0[:, None], rest], dim=1)  # [B, N]
        return FrameCodes(codes, torch.cat([lp0[:, None], lps], dim=1), depth_logits, self.is_stop(codes))

    def frame_step(self, hidden: Tensor, logits: Tensor, s: CsmSamplingTensors, frame: Tensor, cache: Cache,
                   index: Tensor, positions: Tensor, *, valid: Tensor | None = None, context_len: int | None = None,
                   depth_cache: KVCache | None = None) -> FrameStep:
        """`complete_frame` then `feed_frames` at positions [B] (where each row's frame row sits). A row whose
        frame is a stop frame is fed too (its next state is never used; the caller ends it)."""
        done = self.complete_frame(hidden, logits, s, frame, valid=valid, depth_cache=depth_cache)
        row, h, lg = self.feed_frames(done.codes, cache, index, positions, valid=valid, context_len=context_len)
        return FrameStep(done, row, h, lg)

    # ----- teacher forcing -----------------------------------------------------------------------
    def backbone_teacher(self, rows: Tensor, *, valid: Tensor | None = None,
                         layer_inputs: list[Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """One causal pass over rows [B, T, H] (no cache) -> hidden [B, T, H], raw logits [B, T, V] float32
        (differentiable); `layer_inputs` collects the residual stream entering each layer."""
        out = self.backbone_model(rows.to(self.dtype), valid=valid, layer_inputs=layer_inputs)
        return out, self.c0_logits(out)

    def depth_teacher(self, hidden: Tensor, codes: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Frames codes [B, N] from states hidden [B, H] in one causal pass -> the depth inputs before the
        projection [B, N, H], its hidden [B, N, Hd] and logits [B, N-1, V] float32 (differentiable)."""
        dd = self.depth_decoder
        inputs = dd.teacher_inputs(hidden.to(self.dtype), codes.to(self.device))
        out, logits = dd.teacher(inputs)
        return inputs, out, logits
