"""MOSS-TTS-Local: row embeddings, the Qwen3 backbone, and the batched 13-channel frame decode.

Owns: the module tree under the release's weight names (`transformer.*`, `audio_embeddings.*`,
`local_transformer.*`, `local_text_lm_head`), row embedding (pad codes add nothing), teacher-forced
frame logits, and `decode_frame`: stop decision + 12 codebooks + the next backbone input for a batch,
every per-row setting held in tensors.
Must not know: files (see loader.py), prompts and text, requests, scheduling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor, nn

from v2.models import exact

from v2.models.moss_tts_local.config import MossTTSLocalConfig
from v2.models.moss_tts_local.frame_cpu import FrameBuffers, FrameHeads, decode_frame_cpu
from v2.models.moss_tts_local.local_transformer import LocalKV, LocalTransformer, frame_stack_fits
from v2.models.kv_cache import KVCache, PagedKVCache
from v2.models.module_list import module_list_of
from v2.models.qwen3 import Qwen3Backbone
from v2.models.kernels import inference_kernels, kernels_on
from v2.models.kernels.layer_norm import embed_layer_norm_fused
from v2.models.kernels.sample import sample_fused
from v2.models.frame_sampler import FrameSampler
from v2.models.sampling import SamplingTensors, apply_repetition_penalty, frame_noise, sample
from v2.sampling_settings import CHANNELS

# one channel's draw: (settings, steps, channel, logits [B, V], presence [B, V] | None, full sort) -> ids, logprobs
Draw = Callable[[SamplingTensors, Tensor, int, Tensor, "Tensor | None", bool], tuple[Tensor, Tensor]]


@dataclass
class FrameOutput:
    """One decoded frame for a batch of B rows."""

    stop: Tensor        # [B] bool: the row chose to stop (its codes are then discarded)
    codes: Tensor       # [B, 12] int64
    logprobs: Tensor    # [B, 13] float32, channel 0 = stop decision, under the processed distributions
    next_embed: Tensor  # [B, H] backbone input for the next step: row [assistant_slot, codes]
    stop_logits: Tensor | None = None  # [B, 2] raw, when asked for
    code_logits: Tensor | None = None  # [B, 12, V] raw (before penalty), when asked for


class MossTTSLocal(nn.Module):
    def __init__(self, cfg: MossTTSLocalConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        self.transformer = Qwen3Backbone(cfg.backbone)
        self.audio_embeddings = module_list_of(nn.Embedding(cfg.codebook_size, h) for _ in range(cfg.n_vq))
        self.local_transformer = LocalTransformer(cfg.local)
        self.local_text_lm_head = exact.Linear(h, 2, bias=False)
        self.frame_buffers: dict[tuple[int, int], FrameBuffers] = {}  # the CPU frame pass's (frame_cpu.py)
        self.frame_heads: FrameHeads | None = None  # its kept head operands (frame_cpu.py)

    # ----- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu") -> "MossTTSLocal":
        """Load a release checkpoint directory (config.json + safetensors)."""
        from v2.models.moss_tts_local.loader import load_checkpoint

        return load_checkpoint(cls, Path(path), dtype=dtype, device=device)

    @classmethod
    def from_seed(cls, config: dict, seed: int, *, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu", init_device: torch.device | str = "cpu") -> "MossTTSLocal":
        """Build from a config dict with weights drawn from a fixed seed (no files)."""
        from v2.models.moss_tts_local.loader import init_seeded

        return init_seeded(cls, config, seed, dtype=dtype, device=device, init_device=init_device)

    @property
    def device(self) -> torch.device:
        return self.local_text_lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.local_text_lm_head.weight.dtype

    def allocate_kv(self, num_slots: int, max_len: int) -> KVCache:
        return KVCache.allocate(self.cfg.backbone, num_slots, max_len, dtype=self.dtype, device=self.device)

    def allocate_paged_kv(self, num_blocks: int, block_size: int) -> PagedKVCache:
        return PagedKVCache.allocate(self.cfg.backbone, num_blocks, block_size, dtype=self.dtype, device=self.device)

    # ----- embeddings ----------------------------------------------------------------------------
    def embed_codes(self, codes: Tensor) -> Tensor:
        """codes [..., 12] -> [..., H]: sum over codebooks, pad codes contributing exactly zero."""
        pad = codes == self.cfg.audio_pad_code
        safe = codes.masked_fill(pad, 0)
        out = None
        for c, table in enumerate(self.audio_embeddings):
            e = table(safe[..., c]).masked_fill(pad[..., c, None], 0.0)
            out = e if out is None else out + e
        assert out is not None
        return out

    def embed_rows(self, rows: Tensor) -> Tensor:
        """rows [..., 13] -> [..., H] = embed_tokens[ch0] + sum_c audio_embeddings[c][code_c]."""
        return self.transformer.embed_tokens(rows[..., 0]) + self.embed_codes(rows[..., 1:])

    @torch.no_grad()
    def prompt_hidden(self, rows: Tensor) -> Tensor:
        """rows [T, 13] -> backbone output after the final norm at every position [T, H] (no cache)."""
        return self.transformer(self.embed_rows(rows.to(self.device))[None])[0]

    def codebook_weights(self) -> Tensor:
        """The tied codebook heads stacked: [12, V, H]."""
        return torch.stack([t.weight for t in self.audio_embeddings])

    # ----- frame decode --------------------------------------------------------------------------
    def frame_logits(self, hidden: Tensor, codes: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher-forced local decode: hidden [B, H], codes [B, 12] -> (stop [B, 2], codes [B, 12, V]).

        Differentiable (one causal pass, no cache); codebook c's logits see codes 0..c-1.
        """
        fed = torch.stack([table(codes[:, c]) for c, table in enumerate(self.audio_embeddings[:-1])], dim=1)
        x = torch.cat([hidden[:, None], fed], dim=1)  # [B, 12, H]
        out = self.local_transformer(x)  # [B, 12, H]
        stop_logits = self.local_text_lm_head(out[:, 0]).float()
        if exact.on(out):  # one fixed-shape matmul per codebook (a batched matmul's rows are not call-invariant)
            code_logits = torch.stack([exact.linear(out[:, c], t.weight) for c, t in enumerate(self.audio_embeddings)],
                                      dim=1).float()  # [B, 12, V]
        else:
            code_logits = torch.einsum("bch,cvh->bcv", out, self.codebook_weights()).float()  # [B, 12, V]
        return stop_logits, code_logits

    def decode_frame(self, hidden: Tensor, sampling: SamplingTensors, steps: Tensor, *,
                     presence: Tensor | None = None, allow_stop: Tensor | None = None,
                     full_sort: bool = True, return_logits: bool = False) -> FrameOutput:
        """Decode one frame for every row.

        hidden [B, H]: backbone state; sampling: per-row settings; steps [B] int64: each row's frame
        index (keys the noise); presence [B, 12, V] bool: codes seen in earlier frames (repetition
        penalty); allow_stop [B] bool: False forces "continue" (the stop logit is masked out, so the
        processed distribution, and its logprob, say so); full_sort=False promises that no row's codebook
        settings need the full sort (`needs_full_sort`), which skips it. On CUDA each channel's draw is one
        fused kernel (`kernels.sample`), which sorts every row in full whatever `full_sort` says.
        """
        b = hidden.shape[0]
        fused = kernels_on(hidden.device)
        if not fused and frame_stack_fits(hidden):  # the CPU frame pass (no kernels: no inference kernels either)
            return self._decode_frame_cpu(hidden, sampling, steps, presence, allow_stop, full_sort, return_logits)
        kv = LocalKV.allocate(self.cfg.local, b, dtype=self.dtype, device=hidden.device)
        out = self.local_transformer.step(hidden, 0, kv)  # [B, H]
        stop_logits = self.local_text_lm_head(out)  # [B, 2]; the fused sampler reads any float dtype
        if return_logits or not fused:
            stop_logits = stop_logits.float()
        masked = stop_logits
        if allow_stop is not None:
            masked = torch.stack([stop_logits[:, 0], stop_logits[:, 1].masked_fill(~allow_stop, -math.inf)], dim=1)
        s = sampling
        draw: Draw
        if fused:
            draw = self._fused_draw
        elif hidden.device.type == "cpu" and not full_sort:  # every row a top-width row: the host sampler
            draw = self._host_draw(s, steps, presence)
        else:
            draw = self._torch_draw(s, steps)
        stop_id, stop_lp = draw(s, steps, 0, masked, None, full_sort)
        codes, logprobs, raw, fed = [], [stop_lp], [], []
        layer_kernels, slot_id = inference_kernels(hidden.device), self.cfg.ids.audio_assistant_slot
        acc = torch.empty(b, self.cfg.hidden_size, dtype=self.dtype, device=hidden.device)  # the next row's sum
        ln_1 = self.local_transformer.h[0].ln_1
        for c, table in enumerate(self.audio_embeddings):
            logits = exact.linear(out, table.weight)  # [B, V]; the fused sampler reads any float dtype in float32
            if return_logits or not fused:
                logits = logits.float()
            raw.append(logits)
            code, lp = draw(s, steps, 1 + c, logits, None if presence is None else presence[:, c], full_sort)
            codes.append(code)
            logprobs.append(lp)
            if layer_kernels:  # the code's row, its ln_1 and the running sum of the next row in one launch
                if c + 1 < self.cfg.n_vq:
                    e, normed = embed_layer_norm_fused(code, table.weight, acc, ln_1.weight, ln_1.bias, ln_1.eps,
                                                       first=c == 0)
                    out = self.local_transformer.step(e, c + 1, kv, normed=normed)
                else:
                    next_embed, _ = embed_layer_norm_fused(code, table.weight, acc, None, None, 0.0, first=False,
                                                           last_row=self.transformer.embed_tokens.weight[slot_id])
                continue
            fed.append(table(code))  # [B, H]: the next micro-step's input and a term of the next row's embedding
            if c + 1 < self.cfg.n_vq:
                out = self.local_transformer.step(fed[-1], c + 1, kv)
        code_t = torch.stack(codes, dim=1)  # [B, 12]
        if not layer_kernels:
            slot = torch.full((b,), slot_id, dtype=torch.long, device=hidden.device)
            summed = fed[0]
            for e in fed[1:]:  # as embed_codes sums them (drawn codes are never the pad code)
                summed = summed + e
            next_embed = self.transformer.embed_tokens(slot) + summed
        return FrameOutput(
            stop=stop_id == 1,
            codes=code_t,
            logprobs=torch.stack(logprobs, dim=1),
            next_embed=next_embed,
            stop_logits=stop_logits if return_logits else None,
            code_logits=torch.stack(raw, dim=1) if return_logits else None,
        )

    def _decode_frame_cpu(self, hidden: Tensor, s: SamplingTensors, steps: Tensor, presence: Tensor | None,
                          allow_stop: Tensor | None, full_sort: bool, return_logits: bool) -> FrameOutput:
        """`decode_frame` through the local transformer's CPU frame pass (frame_cpu.py): the same values."""
        draw = self._torch_draw(s, steps) if full_sort else self._host_draw(s, steps, presence)
        stop_id, codes, logprobs, next_embed, stop_logits, code_logits = decode_frame_cpu(
            self, hidden, s, steps, draw, presence=presence, allow_stop=allow_stop, full_sort=full_sort,
            return_logits=return_logits)
        return FrameOutput(stop=stop_id == 1, codes=codes, logprobs=logprobs, next_embed=next_embed,
                           stop_logits=stop_logits if return_logits else None,
                           code_logits=code_logits if return_logits else None)

    def _torch_draw(self, s: SamplingTensors, steps: Tensor) -> Draw:
        """Channel draws through `sampling.sample`, with the frame's noise for all 13 channels made once."""
        noise = frame_noise(s.seed, steps, self.cfg.codebook_size)  # [B, 13, V]

        def draw(s: SamplingTensors, steps: Tensor, ch: int, logits: Tensor, presence: Tensor | None,
                 full: bool) -> tuple[Tensor, Tensor]:
            if presence is not None:
                logits = apply_repetition_penalty(logits, presence, s.penalty[:, ch])
            return sample(logits, s.temperature[:, ch], s.top_k[:, ch], s.top_p[:, ch], noise[:, ch],
                          full=full or ch == 0)
        return draw

    def _host_draw(self, s: SamplingTensors, steps: Tensor, presence: Tensor | None) -> Draw:
        """Channel draws through `FrameSampler` (the same draws as `_torch_draw`, at the top candidates); presence:
        the frame's masks, or None when no draw reads one."""
        sampler = FrameSampler(s, steps, [2] + [self.cfg.codebook_size] * self.cfg.n_vq)
        # a penalty of 1 changes no logit: skipped when every row has it
        penalized = presence is not None and bool((s.penalty != 1).any())

        def draw(s: SamplingTensors, steps: Tensor, ch: int, logits: Tensor, presence: Tensor | None,
                 full: bool) -> tuple[Tensor, Tensor]:
            if presence is not None and penalized:
                logits = apply_repetition_penalty(logits, presence, s.penalty[:, ch])
            return sampler.draw(ch, logits)
        return draw

    @staticmethod
    def _fused_draw(s: SamplingTensors, steps: Tensor, ch: int, logits: Tensor, presence: Tensor | None,
                    full: bool) -> tuple[Tensor, Tensor]:
        """One channel's draw in one kernel (penalty, processing, noise, Gumbel-max, logprob)."""
        return sample_fused(logits, s.temperature[:, ch], s.top_k[:, ch], s.top_p[:, ch], s.seed, steps, ch,
                            presence, None if presence is None else s.penalty[:, ch], groups=CHANNELS)
