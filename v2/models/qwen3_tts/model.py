"""Qwen3-TTS (12 Hz): the talker, its code predictor and the speaker encoder, with the batched step functions.

Owns: the module tree under the release's weight names (`talker.model.{layers, norm, codec_embedding,
text_embedding}`, `talker.text_projection`, `talker.codec_head`, `talker.code_predictor.*`,
`speaker_encoder.*` for a "base" model), the text projection `P(ids)`, frame embeddings
`frame(c) = sum_g E_g[c_g]`, and the step functions a runtime batches: `prefill` (prompt rows -> last
hidden + group-0 logits), `predict_codes` (groups 1..G-1 of a frame for B rows), `frame_step` (complete
frame t-1, feed its row + a text row, one talker decode row, group-0 logits) and `choose` (group 0).
Every per-row setting, seed and frame index is a tensor: no Python loop over rows.
Must not know: files (loader.py), prompt modes and text (prompt.py), requests, scheduling, the codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models import exact

from v2.models.kernels import inference_kernels
from v2.models.kv_cache import Cache, KVCache, PagedKVCache
from v2.models.persist import persistent
from v2.models.qwen3 import Qwen3Backbone
from v2.models.qwen3_tts.code_predictor import CodePredictor
from v2.models.qwen3_tts.config import Qwen3TTSConfig
from v2.models.qwen3_tts.sampling import FrameDraws, Qwen3TTSSamplingTensors, group0_mask
from v2.models.qwen3_tts.speaker_encoder import SpeakerEncoder


class TalkerModel(Qwen3Backbone):
    """The talker's decoder with its two input tables (no token table of the backbone's own)."""

    def __init__(self, cfg: Qwen3TTSConfig) -> None:
        t = cfg.talker
        super().__init__(t.decoder, embed_tokens=False)
        self.codec_embedding = nn.Embedding(t.vocab_size, t.hidden_size)
        self.text_embedding = nn.Embedding(t.text_vocab_size, t.text_hidden_size)


class TextProjection(nn.Module):
    """P(x) = linear_fc2(silu(linear_fc1(x))): text width -> talker width."""

    def __init__(self, text_hidden: int, hidden: int) -> None:
        super().__init__()
        self.linear_fc1 = exact.Linear(text_hidden, text_hidden, bias=True)
        self.linear_fc2 = exact.Linear(text_hidden, hidden, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_fc2(exact.silu(self.linear_fc1(x)))


class Talker(nn.Module):
    def __init__(self, cfg: Qwen3TTSConfig) -> None:
        super().__init__()
        t = cfg.talker
        self.model = TalkerModel(cfg)
        self.text_projection = TextProjection(t.text_hidden_size, t.hidden_size)
        self.codec_head = exact.Linear(t.hidden_size, t.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg.code_predictor, t.hidden_size)


@dataclass
class CodeFrame:
    """Groups 1..G-1 of one frame for B rows."""

    codes: Tensor     # [B, G] int64, group 0 included
    logits: Tensor | None  # [B, G-1, V] float32 raw code-predictor logits (None when not asked for)
    logprobs: Tensor  # [B, G-1] under the processed distributions
    embedded: Tensor | None = None  # [B, H] frame(codes), when the pass made it on the way


@dataclass
class FrameStep:
    """One frame step for B rows: frame t-1 completed, its row fed, the talker's state and logits for frame t."""

    frame: CodeFrame  # frame t-1
    row: Tensor       # [B, H] the talker row fed: frame(codes) + text row
    hidden: Tensor    # [B, H] h_t
    logits: Tensor    # [B, V] float32 raw group-0 logits of frame t


class Qwen3TTS(nn.Module):
    def __init__(self, cfg: Qwen3TTSConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.talker = Talker(cfg)
        self.speaker_encoder = SpeakerEncoder(cfg.speaker_encoder) if cfg.speaker_encoder is not None else None
        self._suppress: dict[torch.device, Tensor] = {}  # per device, made on first use (the model may be built on meta)

    def suppress_mask(self, device: torch.device) -> Tensor:
        """[V] bool: the control ids the group-0 choice never takes (EOS excepted)."""
        if device not in self._suppress:
            self._suppress[device] = persistent(group0_mask)(self.cfg.talker.vocab_size, self.cfg.codec.eos, self.cfg.control_ids,
                                                 device)
        return self._suppress[device]

    # ----- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu") -> "Qwen3TTS":
        """Load a release checkpoint directory (config.json + safetensors)."""
        from v2.models.qwen3_tts.loader import load_checkpoint

        return load_checkpoint(Path(path), dtype=dtype, device=device)

    @classmethod
    def from_seed(cls, config: dict, seed: int, *, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu", init_device: torch.device | str = "cpu") -> "Qwen3TTS":
        """Build from a config dict (release schema) with weights drawn from a fixed seed (no files)."""
        from v2.models.qwen3_tts.loader import init_seeded

        return init_seeded(config, seed, dtype=dtype, device=device, init_device=init_device)

    @property
    def device(self) -> torch.device:
        return self.talker.codec_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.talker.codec_head.weight.dtype

    @property
    def num_code_groups(self) -> int:
        return self.cfg.num_code_groups

    def allocate_kv(self, num_slots: int, max_len: int) -> KVCache:
        return KVCache.allocate(self.cfg.talker.decoder, num_slots, max_len, dtype=self.dtype, device=self.device)

    def allocate_paged_kv(self, num_blocks: int, block_size: int) -> PagedKVCache:
        return PagedKVCache.allocate(self.cfg.talker.decoder, num_blocks, block_size, dtype=self.dtype,
                                     device=self.device)

    # ----- embeddings ----------------------------------------------------------------------------
    def embed_text(self, ids: Tensor) -> Tensor:
        """P(ids): ids [...] text ids -> [..., H]."""
        t = self.talker
        return t.text_projection(t.model.text_embedding(ids.to(self.device)))

    def embed_codec(self, ids: Tensor) -> Tensor:
        """E_0[ids] (group-0 codes and control ids): [...] -> [..., H]."""
        return self.talker.model.codec_embedding(ids.to(self.device))

    def special_text_rows(self) -> Tensor:
        """[3, H]: P(tts_bos), P(tts_eos), P(tts_pad)."""
        ids = self.cfg.text
        return self.embed_text(torch.tensor([ids.tts_bos, ids.tts_eos, ids.tts_pad]))

    def embed_frame(self, codes: Tensor) -> Tensor:
        """frame(c) = sum_g E_g[c_g]: codes [..., G] -> [..., H]."""
        codes = codes.to(self.device)
        cp = self.talker.code_predictor
        parts = [self.embed_codec(codes[..., 0])] + [cp.embed(g, codes[..., g]) for g in range(1, self.num_code_groups)]
        return torch.stack(parts, dim=-2).sum(-2)  # [..., G, H] -> [..., H]

    def frame_row(self, frame: "CodeFrame") -> Tensor:
        """frame(codes) [B, H] of a completed frame (the pass's own sum when it made one)."""
        return frame.embedded if frame.embedded is not None else self.embed_frame(frame.codes)

    def speaker_embedding(self, wav: Tensor) -> Tensor:
        """x-vector(s) of 24 kHz waveform(s) [N] or [B, N] -> [H] or [B, H] (a "base" model only)."""
        if self.speaker_encoder is None:
            raise ValueError(f"tts_model_type {self.cfg.model_type!r} has no speaker encoder (voice clone needs 'base')")
        return self.speaker_encoder.embed_waveform(wav).to(self.dtype)

    # ----- talker --------------------------------------------------------------------------------
    def group0_logits(self, hidden: Tensor) -> Tensor:
        return self.talker.codec_head(hidden).float()

    def prefill(self, rows: Tensor, cache: Cache, index: Tensor, positions: Tensor, valid: Tensor,
                last: Tensor, context_len: int | None = None) -> tuple[Tensor, Tensor]:
        """Prompt rows [B, T, H] (row b's tokens at positions[b], valid[b]) through the talker into `cache`
        (`index`: slots [B] or block tables [B, W]). Returns the hidden at column `last` [B] of each row
        and its raw group-0 logits: [B, H], [B, V] float32."""
        out = self.talker.model.forward_cached(rows.to(self.dtype), cache, index, positions, valid, context_len)
        h = out[torch.arange(out.shape[0], device=out.device), last]  # [B, H]
        return h, self.group0_logits(h)

    def draws(self, s: Qwen3TTSSamplingTensors, frame: Tensor, *, groups: list[int] | None = None) -> FrameDraws:
        """How frame `frame` [B]'s draws are made (`sampling.FrameDraws`); `groups`: the ones that will be drawn."""
        return FrameDraws(s, frame, self.num_code_groups,
                          (self.cfg.talker.vocab_size, self.cfg.code_predictor.codebook_size), groups=groups)

    def predict_codes(self, hidden: Tensor, c0: Tensor, s: Qwen3TTSSamplingTensors, frame: Tensor, *,
                      valid: Tensor | None = None, cache: KVCache | None = None,
                      draws: FrameDraws | None = None, return_logits: bool = True) -> CodeFrame:
        """Complete frames: hidden [B, H] (the state group 0 was chosen from), c0 [B] group 0, frame [B] the
        frame index (keys the noise). Codes for groups 1..G-1 come one after another (`draws`: made here
        when not given); with the layers' kernels in one fused pass (`CodePredictor.predict_fused`), whose raw
        logits are kept only when `return_logits`."""
        d = draws or self.draws(s, frame, groups=list(range(1, self.num_code_groups)))
        cp = self.talker.code_predictor
        if inference_kernels(hidden.device) and cp.fits_kernels:
            sub, lg, logprobs, embedded = cp.predict_fused(hidden, c0, self.talker.model.codec_embedding.weight, d.code,
                                                           cache=cache, return_logits=return_logits)
            return CodeFrame(torch.cat([c0[:, None], sub], dim=1), lg, logprobs, embedded)
        sub, logits, logprobs = cp.predict(hidden, self.embed_codec(c0), d.code, cache=cache, valid=valid)
        return CodeFrame(torch.cat([c0[:, None].to(sub.dtype), sub], dim=1), logits, logprobs)

    def frame_step(self, hidden: Tensor, c0: Tensor, text_rows: Tensor, s: Qwen3TTSSamplingTensors,
                   frame: Tensor, cache: Cache, index: Tensor, positions: Tensor, *,
                   valid: Tensor | None = None, context_len: int | None = None,
                   cp_cache: KVCache | None = None, return_logits: bool = True) -> FrameStep:
        """Frame t-1 -> talker state of frame t, for B rows.

        hidden [B, H] = h_(t-1); c0 [B] = group 0 of frame t-1; text_rows [B, H] = the trailing text row
        (or P(tts_pad)) fed with it; frame [B] = t-1; positions [B] = where each row's new talker row sits;
        valid [B] False = bucket padding (writes the dummy slot / block); return_logits: keep the code
        predictor's raw logits (`CodeFrame.logits`; without them the kernels' pass makes no float copies).
        """
        done = self.predict_codes(hidden, c0, s, frame, valid=valid, cache=cp_cache, return_logits=return_logits)
        row = self.frame_row(done) + text_rows.to(self.dtype)  # [B, H]
        ok = None if valid is None else valid[:, None]
        h = self.talker.model.forward_cached(row[:, None], cache, index, positions[:, None], ok, context_len)[:, 0]
        return FrameStep(done, row, h, self.group0_logits(h))

    def choose(self, logits: Tensor, s: Qwen3TTSSamplingTensors, frame: Tensor, *, seen: Tensor | None,
               allow_eos: Tensor, draws: FrameDraws | None = None) -> tuple[Tensor, Tensor]:
        """Group 0 of frame `frame` [B]: the reference's rule (penalty over `seen` [B, V], EOS only where
        `allow_eos` [B], control ids suppressed) then the row's sampling. -> ids [B], logprobs [B]."""
        d = draws or self.draws(s, frame, groups=[0])
        return d.group0(logits, seen=seen, allow_eos=allow_eos, eos=self.cfg.codec.eos,
                        suppress=self.suppress_mask(logits.device))

    # ----- teacher forcing -----------------------------------------------------------------------
    def code_predictor_teacher(self, hidden: Tensor, codes: Tensor) -> tuple[Tensor, Tensor]:
        """hidden [B, H], codes [B, G] -> (input rows [B, G, H] before the projection, logits [B, G-1, V])."""
        cp = self.talker.code_predictor
        inputs = cp.teacher_inputs(hidden, self.embed_codec(codes[:, 0]), codes.to(self.device))
        return inputs, cp.teacher_logits(inputs)
