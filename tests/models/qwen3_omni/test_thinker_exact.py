"""The thinker batched == alone, bit for bit on the CPU: four prompts of different lengths (one with audio)
prefilled together right-padded into a KVCache, then decoded one token a step together; every hidden row and
logit equals that prompt's own run (its rows route to other experts than its neighbours'); a paged cache
filled in chunks == a slot filled in one call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.models.qwen3_omni.conftest import KEYS
from tests.models.qwen3_omni.test_thinker_parity import prompt_rows
from v2.models.kv_cache import KVCache, PagedKVCache
from v2.models.qwen3_omni.moe import route
from v2.models.qwen3_omni.thinker import Thinker

STEPS = 3


@torch.no_grad()
def run(thinker: Thinker, prompts: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(final-norm rows [T + STEPS - 1, H], logits [STEPS, vocab]) per prompt, all prompts in one batch."""
    b, longest = len(prompts), max(p.shape[0] for p in prompts)
    h = prompts[0].shape[1]
    cache = KVCache.allocate(thinker.cfg.text.decoder, b, longest + STEPS, dtype=torch.float32, device="cpu")
    x = torch.zeros(b, longest, h)
    valid = torch.zeros(b, longest, dtype=torch.bool)
    for i, p in enumerate(prompts):
        x[i, : p.shape[0]], valid[i, : p.shape[0]] = p, True
    slots, pos = torch.arange(b), torch.arange(longest).expand(b, longest)
    out = thinker.model.forward_cached(x, cache, slots, pos, valid=valid)  # [B, T, H]
    rows = [[out[i, : p.shape[0]]] for i, p in enumerate(prompts)]
    last = torch.stack([out[i, p.shape[0] - 1] for i, p in enumerate(prompts)])  # [B, H]
    logits = [[thinker.logits(last)]]
    lengths = torch.tensor([p.shape[0] for p in prompts])
    for s in range(STEPS - 1):
        tokens = logits[-1][0].argmax(-1)  # [B]
        step = thinker.model.forward_cached(thinker.model.embed_tokens(tokens)[:, None], cache, slots,
                                            (lengths + s)[:, None])  # [B, 1, H]
        for i in range(b):
            rows[i].append(step[i])
        logits.append([thinker.logits(step[:, 0])])
    return [(torch.cat(rows[i]), torch.stack([lg[0][i] for lg in logits])) for i in range(b)]


@pytest.mark.exact
def test_thinker_batched_equals_alone(thinker: Thinker, oref: dict[str, np.ndarray]) -> None:
    prompts = [prompt_rows(thinker, oref, k) for k in KEYS]
    with torch.no_grad():  # the draw routes rows differently: prompts' first layer top-k sets differ
        mlp = thinker.model.layers[0].mlp
        picks = {tuple(sorted(r)) for p in prompts for r in route(mlp.gate(p), 2, True)[1].tolist()}
        assert len(picks) > 4
    together = run(thinker, prompts)
    for i, key in enumerate(KEYS):
        alone = run(thinker, [prompts[i]])[0]
        assert torch.equal(together[i][0], alone[0]), key
        assert torch.equal(together[i][1], alone[1]), key
    reordered = run(thinker, prompts[::-1])
    for i in range(len(KEYS)):
        assert torch.equal(reordered[len(KEYS) - 1 - i][1], together[i][1])


@pytest.mark.exact
def test_paged_and_chunked_prefill_equal_one_slot_pass(thinker: Thinker, oref: dict[str, np.ndarray]) -> None:
    """Prompt c (with audio) prefilled into a KVCache slot in one call == into 4-row blocks of a PagedKVCache
    (a scattered table) in chunks of 5, 11 and the rest, then one decode step each: the same bits."""
    rows = prompt_rows(thinker, oref, "c")  # [T, H]
    t, d = rows.shape[0], thinker.cfg.text.decoder
    with torch.no_grad():
        slot_cache = KVCache.allocate(d, 1, t + 1, dtype=torch.float32, device="cpu")
        whole = thinker.model.forward_cached(rows[None], slot_cache, torch.tensor([0]), torch.arange(t)[None])[0]
        paged = PagedKVCache.allocate(d, 20, 4, dtype=torch.float32, device="cpu")
        table = torch.tensor([[13, 2, 7, 19, 0, 5, 11, 3, 17]])  # 9 blocks of 4 rows hold T + 1 = 35 positions
        parts = []
        for s, e in ((0, 5), (5, 16), (16, t)):
            parts.append(thinker.model.forward_cached(rows[None, s:e], paged, table, torch.arange(s, e)[None],
                                                      context_len=36)[0])
        assert torch.equal(torch.cat(parts), whole)
        nxt = thinker.model.embed_tokens(torch.tensor([[int(thinker.logits(whole[-1]).argmax())]]))
        a = thinker.model.forward_cached(nxt, slot_cache, torch.tensor([0]), torch.tensor([[t]]))
        b = thinker.model.forward_cached(nxt, paged, table, torch.tensor([[t]]), context_len=36)
        assert torch.equal(a, b)
