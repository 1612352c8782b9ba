"""Qwen3-ForcedAligner's network: log-mel clips and prompt ids -> the head's logits at the timestamp markers.

Owns: the module tree in the release's names below `thinker.` (`audio_tower`: the shared AuT encoder and
projector, the same maths and keys; `model`: a Qwen3 decoder with its token table; `lm_head`: the 5000-class
head, no bias), the release's per-clip encoding (a clip's last chunk zero-padded to a whole chunk: `encode`,
every clip's chunks and rows in the same calls: `encoder.BatchEncoder`, with the AuT's weights),
the audio rows put in place of `<|audio_pad|>`, one causal pass over the batch right-padded (positions
0.. per clip, keys past a clip's length masked), and the head read only at the marker rows.
Exact on the CPU: every matmul is `exact.linear`, attention `exact.attention`, so a clip's logits are the
same bits alone or in any batch.
Must not know: words, tokenizers, the fix-up, files, requests, the runtime.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from v2.models import exact
from v2.models.aut.encoder import AudioEncoder
from v2.models.forced_aligner.config import ForcedAlignerConfig
from v2.models.forced_aligner.encoder import CONV_TILE, BatchEncoder
from v2.models.qwen3 import Qwen3Backbone

__all__ = ["CONV_TILE", "ForcedAligner"]


class ForcedAligner(nn.Module):
    def __init__(self, cfg: ForcedAlignerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.audio_tower = AudioEncoder(cfg.audio)
        self.model = Qwen3Backbone(cfg.text)
        self.lm_head = exact.Linear(cfg.text.hidden_size, cfg.classes, bias=False)
        self._encoder = BatchEncoder(self.audio_tower)  # kept buffers; reads the tower's weights at each call

    def encoder_inputs(self, mels: list[Tensor]) -> list[Tensor]:
        """Each clip's rows entering the encoder layers [N_a, d_model]: its chunks of 2 n_window frames, the
        last one zero-padded to a whole chunk (the release encodes each clip alone, so no other clip's length
        reaches it), through the convs, `conv_out` and the per-chunk positions; rows past the clip's dropped."""
        self._check(mels)
        return self._encoder.conv_rows(mels)

    def encode(self, mels: list[Tensor]) -> list[Tensor]:
        """Log-mel clips [mel, T_i] -> audio rows [N_a(T_i), hidden] each (the projector's output)."""
        self._check(mels)
        return self._encoder.encode(mels)

    def _check(self, mels: list[Tensor]) -> None:
        n_mel = self.cfg.audio.num_mel_bins
        if not mels:
            raise ValueError("mels: at least one clip is needed")
        for i, m in enumerate(mels):
            if m.dim() != 2 or m.shape[0] != n_mel or m.shape[1] < 1:
                raise ValueError(f"mels[{i}]: log-mel must be [{n_mel}, frames >= 1], got {list(m.shape)}")

    def embed(self, ids: Tensor, audio: Tensor) -> Tensor:
        """ids [L] -> rows [L, hidden]: the token table, `<|audio_pad|>` rows replaced in order by audio [N, hidden]
        (one prompt's decoder input; `marker_logits` makes the batch's in one go, the same rows)."""
        x = self.model.embed_tokens(ids)  # [L, hidden]
        pads = (ids == self.cfg.ids.audio_pad).nonzero().squeeze(1)  # [N]
        if pads.shape[0] != audio.shape[0]:
            raise ValueError(f"input_ids: {pads.shape[0]} <|audio_pad|> ids for {audio.shape[0]} audio rows")
        x[pads] = audio.to(x.dtype)
        return x

    def marker_logits(self, input_ids: list[Tensor], mels: list[Tensor]) -> list[Tensor]:
        """One prompt's ids [L_i] and log-mel [mel, T_i] per clip -> logits [markers_i, classes] per clip (the
        rows of its `<timestamp>` ids, in order), all clips in one decoder pass."""
        logits, counts = self._markers(input_ids, mels)
        return list(logits.split(counts))

    def marker_classes(self, input_ids: list[Tensor], mels: list[Tensor]) -> Tensor:
        """`marker_logits`' argmax per marker (the first maximum on ties), every clip's in order: int64 [sum M_i]."""
        return self._markers(input_ids, mels)[0].float().argmax(-1)

    def _markers(self, input_ids: list[Tensor], mels: list[Tensor]) -> tuple[Tensor, list[int]]:
        """The head's logits at every clip's markers [sum M_i, classes] (clip by clip) and each clip's M_i."""
        if len(input_ids) != len(mels) or not mels:
            raise ValueError(f"input_ids / mels: one of each per clip, got {len(input_ids)} and {len(mels)}")
        audio = self.encode(mels)
        ids = nn.utils.rnn.pad_sequence(input_ids, batch_first=True)  # [B, L], right-padded with 0
        lengths = torch.tensor([i.shape[0] for i in input_ids], device=ids.device)
        valid = torch.arange(ids.shape[1], device=ids.device)[None] < lengths[:, None]  # [B, L]
        pads = ids == self.cfg.ids.audio_pad  # [B, L] (a padding 0 is no special id)
        marks = ids == self.cfg.ids.timestamp  # [B, L]
        per_clip = torch.stack([pads.sum(1), marks.sum(1)]).tolist()  # [2][B]
        for i, (n, a) in enumerate(zip(per_clip[0], audio)):
            if n != a.shape[0]:
                raise ValueError(f"input_ids[{i}]: {n} <|audio_pad|> ids for {a.shape[0]} audio rows")
        x = self.model.embed_tokens(ids)  # [B, L, hidden]
        x.masked_fill_(~valid[..., None], 0.0)  # the padding's rows are zeros
        x[pads] = (torch.cat(audio) if len(audio) > 1 else audio[0]).to(x.dtype)  # row-major: clip by clip, in order
        h = self.model(x, valid=valid)  # [B, L, hidden]
        return self.lm_head(h[marks]), per_clip[1]  # [sum M_i, classes]: clip by clip, each clip's in order
