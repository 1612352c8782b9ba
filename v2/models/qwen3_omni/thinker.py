"""Qwen3-Omni's thinker (release prefix `thinker.`): the MoE text decoder, its untied lm head and the audio encoder.

Owns: the module tree under the release's names (`model.*`: `MoeDecoder`; `lm_head`; `audio_tower.*`:
`AudioEncoder`), a prompt's input rows (`embed`: `embed_tokens` rows with the audio encoder's rows in place of
the `<|audio_pad|>` ids, in order: the rows the talker later reads as E), the logits of hidden rows, and
loading from a release checkpoint. The vision tower is not built (`loader.NOT_MODELLED`). Decoding, caches
and sampling are the caller's (`MoeDecoder.forward_cached`).
Must not know: the chat template, the talker, requests, the scheduler.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from v2.models import exact
from v2.models.aut.encoder import AudioEncoder
from v2.models.qwen3_omni.config import ThinkerConfig
from v2.models.qwen3_omni.decoder import MoeDecoder
from v2.models.qwen3_omni.loader import Checkpoint, build_part, open_checkpoint


class Thinker(nn.Module):
    def __init__(self, cfg: ThinkerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.text.decoder
        self.model = MoeDecoder(cfg.text)
        self.lm_head = exact.Linear(d.hidden_size, d.vocab_size, bias=False)
        self.audio_tower = AudioEncoder(cfg.audio)

    def embed(self, input_ids: Tensor, audio_rows: Tensor | None, audio_id: int,
              vision_ids: tuple[int, ...] = ()) -> Tensor:
        """input_ids [T] -> rows [T, H]: `embed_tokens`, with `audio_rows` [N, H] (a prompt's encoded clips,
        concatenated in order) at the N positions holding `audio_id`. An id of `vision_ids` (the image and
        video placeholders) is refused: the vision tower is not built."""
        if vision_ids and bool(torch.isin(input_ids, torch.tensor(vision_ids, device=input_ids.device)).any()):
            raise ValueError(f"prompt_ids: image / video placeholders {list(vision_ids)} are not supported "
                             "(no vision input)")
        rows = self.model.embed_tokens(input_ids)  # [T, H]
        slots = (input_ids == audio_id).nonzero().squeeze(1)  # [N]
        given = 0 if audio_rows is None else audio_rows.shape[0]
        if slots.numel() != given:
            raise ValueError(f"audio: the prompt holds {slots.numel()} audio placeholder ids ({audio_id}) but the "
                             f"audio gives {given} rows")
        if audio_rows is not None and given:
            rows = rows.index_copy(0, slots, audio_rows.to(rows.dtype))
        return rows

    def logits(self, hidden: Tensor) -> Tensor:
        """Final-norm rows [..., H] -> logits [..., vocab] (float32 where the rows are)."""
        return self.lm_head(hidden)


def load_thinker(path: Path | Checkpoint, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> Thinker:
    """The thinker of a release checkpoint (a directory or an opened `Checkpoint`), weights cast to `dtype`."""
    ckpt = path if isinstance(path, Checkpoint) else open_checkpoint(Path(path))
    return build_part(Thinker, ckpt.config.thinker, ckpt, "thinker.", dtype=dtype, device=device)
