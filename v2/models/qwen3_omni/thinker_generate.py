"""The thinker's plain greedy loop (the reference's `generate` for the thinker), the loop other paths are tested
against: prefill a prompt's rows into a KV cache slot, then one token a step until `<|im_end|>` or the cap.

Owns: `ThinkerRun` (the ids; per step the final-norm row, the logits' logsumexp and the chosen token's logprob;
and the rows the talker reads: E = the input rows and A = the residual stream entering layer
`accept_hidden_layer` (after the final norm when it equals the layer count), at positions 0 .. T + n - 2, i.e.
every row that was fed, the last token never is) and `greedy`. Logits are argmax'ed as the reference does
(no penalty, no suppression); the emitted `<|im_end|>` is part of the ids.
Must not know: the chat template, the talker's layout, requests, the scheduler, sampling settings.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from v2.models.kv_cache import KVCache
from v2.models.qwen3_omni.thinker import Thinker


@dataclass
class ThinkerRun:
    tokens: list[int]
    embed: Tensor      # [T + n - 1, H] E
    accept: Tensor     # [T + n - 1, H] A
    final: Tensor      # [n, H] the final-norm rows each step's logits came from
    logsumexp: Tensor  # [n] float32
    logprobs: Tensor   # [n] float32: the chosen token's log-softmax
    logits: Tensor | None = None  # [n, vocab] float32 when asked for (`keep_logits`)


@torch.no_grad()
def greedy(thinker: Thinker, rows: Tensor, *, max_new_tokens: int, eos: int, accept_layer: int,
           keep_logits: bool = False) -> ThinkerRun:
    """rows [T, H] (`Thinker.embed`) -> the greedy run of at most `max_new_tokens` tokens (stopping after `eos`)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    layers = thinker.cfg.text.decoder.num_layers
    if not 0 <= accept_layer <= layers:
        raise ValueError(f"accept_layer must be in 0..{layers}, got {accept_layer}")
    t = rows.shape[0]
    cache = KVCache.allocate(thinker.cfg.text.decoder, 1, t + max_new_tokens, dtype=rows.dtype, device=rows.device)
    slot = torch.tensor([0], device=rows.device)
    x, pos = rows[None], torch.arange(t, device=rows.device)[None]  # [1, T, H], [1, T]
    embeds, accepts, finals, lse, logprobs, kept, tokens = [], [], [], [], [], [], []
    while True:
        inputs: list[Tensor] = []
        h = thinker.model.forward_cached(x, cache, slot, pos, layer_inputs=inputs)  # [1, rows, H]
        embeds.append(x[0])
        accepts.append(inputs[accept_layer][0] if accept_layer < layers else h[0])
        finals.append(h[0, -1])
        logits = thinker.logits(h[0, -1]).float()  # [vocab]
        tokens.append(int(logits.argmax()))
        lse.append(logits.logsumexp(-1))
        logprobs.append(torch.log_softmax(logits, -1)[tokens[-1]])  # as the reference scores it
        if keep_logits:
            kept.append(logits)
        if tokens[-1] == eos or len(tokens) == max_new_tokens:
            break
        x = thinker.model.embed_tokens(torch.tensor([[tokens[-1]]], device=rows.device))  # [1, 1, H]
        pos = pos[:, -1:] + 1
    return ThinkerRun(tokens, torch.cat(embeds), torch.cat(accepts), torch.stack(finals), torch.stack(lse),
                      torch.stack(logprobs), torch.stack(kept) if keep_logits else None)
