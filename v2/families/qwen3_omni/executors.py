"""Qwen3-Omni's executors: the thinker's token step and prefill, the talker's frame step and prefill (Qwen3-TTS's
talker executor over this family's rows), and code2wav's chunks (the kit's chunk executor).

Owns: `ThinkerFrames` (the kit's `PagedFrames` over the thinker's paged KV: per slot its sampling settings and
seed, its prompt's audio-encoder rows (`audio`) and the rows A the talker reads at those positions (`accept`: the
residual stream entering layer `accept_hidden_layer`, written by the prefill); the token step: logits of the
slot's last final-norm row, the token (argmax, or drawn with Gumbel noise keyed by (seed, step) under temperature
/ top-k / top-p), its logprob under that processed distribution (greedy: 0), the token's row through the decoder;
packed [B, 3]: stop (the token is `<|im_end|>`), token, logprob); `TalkerFrames` (the Qwen3-TTS `TalkerExecutor`
with this family's prompt rows: Pt(thinker row) + C[codec id] + Ph(A[index]) + frame(codes); per slot the A rows
of its request, `accept`); `Code2WavExecutor` (the chunk executor over `Code2Wav`: a stream's first `lead` samples
are not audio and are cut when read); `executors_as` (a frame executor's halves under this family's work kinds).
Must not know: requests, loops' state, scheduling policy, threads.
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.contracts import WorkUnitKind
from v2.families.qwen3_omni.models import FedTalker, RuntimeThinker
from v2.families.qwen3_tts.talker_executor import TalkerExecutor
from v2.kit.chunk_executor import ChunkExecutor
from v2.kit.chunks import ChunkPlan
from v2.kit.frames import PagedFrames
from v2.models.kernels import kernels_on
from v2.models.kv_cache import PagedKVCache
from v2.models.sampling import gumbel_noise, sample
from v2.runtime.family import Halves

COLUMNS = 3  # thinker row: (token id, audio row index or -1, audio tag)


class ThinkerFrames(PagedFrames):
    def __init__(self, model: RuntimeThinker, *, num_slots: int, max_len: int, batch_buckets: list[int],
                 num_blocks: int, block_size: int, accept_layer: int, eos: int, graphs: bool = True) -> None:
        d, dev = model.cfg.text.decoder, model.device
        kv = PagedKVCache.allocate(d, num_blocks, block_size, dtype=model.dtype, device=dev)
        super().__init__(model, kv, num_slots=num_slots, max_len=max_len, block_size=block_size,
                         hidden_size=d.hidden_size, largest_bucket=batch_buckets[-1], code_width=1,
                         kernels=kernels_on(dev))
        self.eos, self.accept_layer, self.layers = eos, accept_layer, d.num_layers
        s = num_slots + 1
        self.temperature = torch.zeros(s, device=dev)
        self.top_k = torch.zeros(s, dtype=torch.long, device=dev)
        self.top_p = torch.ones(s, device=dev)
        self.seed = torch.zeros(s, dtype=torch.long, device=dev)
        self.audio: dict[int, Tensor] = {}   # slot -> [N, H] its prompt's encoder rows
        self.accept: dict[int, Tensor] = {}  # slot -> [N, H] A at its prompt's audio positions
        self.capture("omni_thinker", batch_buckets, enabled=graphs)

    # ----- state changes (queued on the stream) --------------------------------------------------
    def admit_host(self, slot: int, settings: Any) -> None:
        self.full_sort.discard(slot)
        if settings.temperature > 0:
            self.full_sort.add(slot)  # key flag: a row draws (the greedy path skips the sampler)

    @torch.no_grad()
    def admit_device(self, slot: int, settings: Any, seed: int, audio: Tensor | None) -> None:
        self.temperature[slot], self.top_k[slot] = settings.temperature, settings.top_k
        self.top_p[slot] = settings.top_p
        self.seed[slot] = seed
        self.audio.pop(slot, None)
        self.accept.pop(slot, None)
        if audio is not None:
            self.audio[slot] = audio.to(self.model.device, self.model.dtype)
            self.accept[slot] = torch.zeros_like(self.audio[slot])

    def fork_state(self, src: int, dst: int) -> None:
        """A group member takes its leader's prompt: its audio rows and A rows too."""
        for table in (self.audio, self.accept):
            if src in table:
                table[dst] = table[src]

    # ----- prefill -------------------------------------------------------------------------------
    def pad_rows(self, batch: int, width: int) -> Tensor:
        rows = torch.full((batch, width, COLUMNS), -1, dtype=torch.long)  # [B, W, 3]
        rows[..., 0], rows[..., 2] = 0, 0
        return rows

    def forward_prompt(self, rows: Tensor, slots: Tensor, positions: Tensor, valid: Tensor, context: int) -> Tensor:
        m = self.model.model
        index = rows[..., 1]                                        # [B, W] audio row or -1
        x = m.embed_tokens(rows[..., 0].clamp(min=0))              # [B, W, H]
        audio = [(b, s, (index[b] >= 0).nonzero().squeeze(1))  # at: [n] positions in the chunk
                 for b, s in enumerate(slots.tolist()) if s in self.audio]
        audio = [(b, s, at) for b, s, at in audio if at.numel()]
        for b, slot, at in audio:
            x[b, at] = self.audio[slot][index[b, at]]
        inputs: list[Tensor] = []
        out = m.forward_cached(x, self.kv, self.tables[slots], positions, valid=valid, context_len=context,
                               layer_inputs=inputs if audio else None)  # [B, W, H]
        for b, slot, at in audio:
            a = inputs[self.accept_layer] if self.accept_layer < self.layers else out
            self.accept[slot][index[b, at]] = a[b, at]
        return out

    # ----- the token step ------------------------------------------------------------------------
    @torch.no_grad()
    def frame_step(self, key: tuple[int, ...]) -> Tensor:
        b, context, draws = key
        x, m = self.inputs, self.model
        slots, positions, steps, valid = x.slot[:b], x.position[:b], x.step[:b], x.valid[:b].bool()
        logits = m.logits(self.hidden[slots]).float()  # [b, V]
        if draws:  # logprob: under the processed distribution it was drawn from (a greedy row's point mass: 0)
            tokens, logprob = sample(logits, self.temperature[slots], self.top_k[slots], self.top_p[slots],
                                     gumbel_noise(self.seed[slots], steps, logits.shape[-1]))
        else:
            tokens, logprob = logits.argmax(dim=-1), torch.zeros(b, device=logits.device)
        row = m.model.embed_tokens(tokens)[:, None]  # [b, 1, H]
        out = m.model.forward_cached(row, self.kv, self.tables[slots], positions[:, None], valid=valid[:, None],
                                     context_len=context)  # [b, 1, H]
        self.hidden[slots] = out[:, 0]
        return torch.stack([(tokens == self.eos).float(), tokens.float(), logprob], dim=1)  # [b, 3]


class TalkerFrames(TalkerExecutor):
    """Qwen3-TTS's talker executor over this family's rows [B, W, 3 + G] and the A rows of each slot."""

    def __init__(self, model: FedTalker, **kwargs: Any) -> None:
        self.accept: dict[int, Tensor] = {}  # slot -> [N, H_thinker] its request's A rows
        super().__init__(model, **kwargs)

    def set_accept(self, slot: int, rows: Tensor | None) -> None:
        self.accept.pop(slot, None)
        if rows is not None:
            self.accept[slot] = rows

    def pad_rows(self, batch: int, width: int) -> Tensor:
        return torch.full((batch, width, 3 + self.groups), -1, dtype=torch.long)  # [B, W, 3 + G]

    def embed_rows(self, rows: Tensor, slots: Tensor) -> Tensor:
        m = self.model
        text, codec, index, codes = rows[..., 0], rows[..., 1], rows[..., 2], rows[..., 3:]
        x = torch.where((text >= 0)[..., None], m.embed_text(text.clamp(min=0)), 0.0)
        x = x + torch.where((codec >= 0)[..., None], m.embed_codec(codec.clamp(min=0)), 0.0)
        frame = codes[..., 0] >= 0
        x = x + torch.where(frame[..., None], m.embed_frame(codes.masked_fill(~frame[..., None], 0)), 0.0)
        for b, slot in enumerate(slots.tolist()):
            at = (index[b] >= 0).nonzero().squeeze(1)
            if at.numel():
                x[b, at] = x[b, at] + m.project_hidden(self.accept[int(slot)][index[b, at]])
        return x


def executors_as(frames: PagedFrames, prefill: Hashable, frame: Hashable) -> dict[Hashable, Halves]:
    """A frame executor's two halves (the kit's under PREFILL and AR_FRAME) under this family's work kinds: the
    thinker's and the talker's prefill and step are distinct kinds, so both run in one engine step."""
    ex = frames.executors()
    return {prefill: ex[WorkUnitKind.PREFILL], frame: ex[WorkUnitKind.AR_FRAME]}


class Code2WavExecutor(ChunkExecutor):
    def __init__(self, codec: Any, *, num_slots: int, batch_buckets: list[int], frame_buckets: list[int],
                 graphs: bool = True) -> None:
        super().__init__(codec, "omni_code2wav", width=codec.cfg.num_quantizers, hop=codec.hop, num_slots=num_slots,
                         batch_buckets=batch_buckets, frame_buckets=frame_buckets, graphs=graphs,
                         max_code=codec.cfg.codebook_size - 1)

    def _chunk_step(self, key: tuple[int, ...]) -> Tensor:
        b, f = key
        out = self.codec.decode_chunk(self.rows[0, :b], self.codes[:b, :f], state=self.state, lengths=self.rows[1, :b])
        return torch.cat([out.audio, out.start[:, None].to(out.audio.dtype)], dim=1)  # [b, f * hop + 1]

    def read(self, host: np.ndarray, plans: Sequence[ChunkPlan]) -> list[np.ndarray]:  # type: ignore[override]
        out = []
        for i, p in enumerate(plans):
            start, end = int(host[i, -1]), len(p.codes) * self.hop
            out.append(np.array(host[i : i + 1, start:end], dtype=np.float32))  # [1, n]
        return out


__all__ = ["Code2WavExecutor", "TalkerFrames", "ThinkerFrames", "executors_as"]
