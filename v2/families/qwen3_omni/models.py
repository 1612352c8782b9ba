"""The Qwen3-Omni parts as this family's executors use them: the thinker with its device and dtype, and the talker
fed the THINKER's text table (its text rows are Pt(embed_tokens[id]) of a thinker id).

Owns: `RuntimeThinker` (`v2.models.qwen3_omni.thinker.Thinker` with `device` / `dtype`, what the kit's frame
executor reads) and `FedTalker` (`OmniTalker` whose `embed_text(ids)` is the text projection of the thinker's
embedding rows, so Qwen3-TTS's frame step feeds one projected thinker token per frame unchanged; `bind_text`
gives it the thinker's table and sets its tts_bos / tts_eos / tts_pad rows).
Must not know: the runtime, requests, slots.
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.qwen3_omni.talker import OmniTalker
from v2.models.qwen3_omni.thinker import Thinker


class RuntimeThinker(Thinker):
    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype


class FedTalker(OmniTalker):
    _text_table: Tensor | None = None

    def bind_text(self, table: Tensor, tts_ids: tuple[int, int, int]) -> None:
        """table [vocab, H_thinker]: the thinker's `embed_tokens` weight (shared, not copied); tts_ids: the ids
        of tts_bos, tts_eos, tts_pad."""
        self._text_table = table.detach()  # the same storage (weight updates reach it), not a parameter of this module
        self.set_special_text(table[list(tts_ids)].detach())

    def embed_text(self, ids: Tensor) -> Tensor:
        """Thinker ids [...] -> talker rows [..., H]: Pt(embed_tokens[id])."""
        if self._text_table is None:
            raise ValueError("the talker's text table is not bound: call bind_text with the thinker's table")
        return self.project_text(torch.nn.functional.embedding(ids.to(self._text_table.device), self._text_table))
