"""The thinker -> talker hand-off of Qwen3-Omni: which thinker rows the talker reads, and how.

Owns: `user_positions` (the prompt positions inside user turns: `<|im_start|>user\\n ... <|im_end|>\\n` of every
user turn, in order; system and earlier assistant turns are dropped), `talker_prefix` (the talker's prompt rows:
each user position as Ph(A[p]) when its token is an audio / image / video placeholder, else Pt(E[p]); then the
last `<|im_start|>assistant\\n` as Pt(E); then tts_pad + C[nothink], tts_pad + C[think_bos],
tts_pad + C[think_eos], tts_pad + C[speaker], tts_bos + C[pad], Pt(E[gen_0]) + C[bos]) and `trailing_rows`
(Pt of each later text token's embedding, then tts_eos: one row fed per frame, tts_pad after them). E = the
thinker's input embeddings (audio rows replaced by the audio encoder's), A = its residual stream after layer
`accept_hidden_layer - 1`; Pt / Ph = the talker's text / hidden projections.
Must not know: the thinker's layers (rows are given), caches, sampling, requests.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from v2.models.qwen3_omni.config import TokenIds
from v2.models.qwen3_omni.talker import OmniTalker


def user_positions(prompt_ids: Sequence[int], ids: TokenIds) -> list[int]:
    """Positions p whose turn is a user turn: the token after the latest `<|im_start|>` at or before p is `user`."""
    out, role = [], None
    for p, tok in enumerate(prompt_ids):
        if tok == ids.im_start:
            role = prompt_ids[p + 1] if p + 1 < len(prompt_ids) else None
        if role == ids.user:
            out.append(p)
    return out


def assistant_start(prompt_ids: Sequence[int], ids: TokenIds) -> int:
    """The position s of the generation prompt `<|im_start|>assistant\\n` that ends the prompt."""
    t = len(prompt_ids)
    if t < 3 or list(prompt_ids[t - 3 : t - 1]) != [ids.im_start, ids.assistant]:
        raise ValueError("prompt_ids: must end with the generation prompt <|im_start|>assistant\\n "
                         f"({ids.im_start}, {ids.assistant}, ...), got {list(prompt_ids[-3:])}")
    return t - 3


def talker_prefix(talker: OmniTalker, prompt_ids: Sequence[int], embed: Tensor, accept: Tensor, first_text: Tensor,
                  speaker: int, ids: TokenIds) -> Tensor:
    """The talker's prompt rows [Tp, H]. prompt_ids [T]; embed / accept [T, H_thinker] (E and A at the prompt's
    positions; more rows are ignored); first_text [H_thinker] = E of the first generated token; speaker a codec id."""
    t = len(prompt_ids)
    if embed.shape[0] < t or accept.shape[0] < t:
        raise ValueError(f"embed/accept: need a row per prompt position ({t}), got {embed.shape[0]} and "
                         f"{accept.shape[0]}")
    s = assistant_start(prompt_ids, ids)
    users = [p for p in user_positions(prompt_ids, ids) if p < s]
    placeholders = (ids.audio, ids.image, ids.video)
    hidden = torch.tensor([prompt_ids[p] in placeholders for p in users], dtype=torch.bool)  # [U]
    at = torch.tensor(users, dtype=torch.long)
    user = torch.where(hidden[:, None].to(talker.device), talker.project_hidden(accept[at]),
                       talker.project_text(embed[at])) if users else embed.new_zeros(0, talker.omni.hidden_size)
    head = talker.project_text(torch.cat([embed[s : s + 3], first_text[None]]))  # [4, H]: im_start assistant \n gen_0
    bos, _, pad = talker.special_text_rows()
    c = talker.omni.codec
    codec = talker.embed_codec(torch.tensor([c.nothink, c.think_bos, c.think_eos, speaker, c.pad, c.bos]))  # [6, H]
    text = torch.stack([pad, pad, pad, pad, bos, head[3]])  # [6, H]
    return torch.cat([user.to(talker.dtype), head[:3], text + codec])


def trailing_rows(talker: OmniTalker, text_embed: Tensor) -> Tensor:
    """text_embed [N, H_thinker] (E of the text tokens after the first, in order) -> [N + 1, H]: Pt of each,
    then tts_eos. The talker is fed row t - 1 with frame t - 1, and tts_pad once they are spent."""
    return torch.cat([talker.project_text(text_embed), talker.special_text_rows()[1][None]])
