"""The Qwen3-TTS reference loop: prompt rows in, frames out, eager, one KV slot per prompt.

Owns: `generate_batch` (the reference's loop exactly: step 0 prefills and chooses group 0 of frame 0;
step t >= 1 completes frame t-1 with the code predictor, feeds its row plus the trailing text row or
P(tts_pad), and chooses group 0 of frame t; `max_new_tokens` counts group-0 choices, so the last
choice's frame is never completed; a row that chose EOS keeps being fed with group 0 = EOS until every
row has stopped or the budget is spent; each row's frames are cut at its first EOS) and `generate` (one
prompt). Left-padded batches are run as each row at its own positions (the reference's `cumsum(mask) - 1`).
Must not know: requests, the scheduler, streaming, the codec.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.models.qwen3_tts.sampling import Qwen3TTSSamplingTensors


@dataclass
class Qwen3Generation:
    """What one prompt produced. S = group-0 choices the loop made for the batch; F = this row's frames."""

    codes: Tensor        # [F, G] int64, cut at the first EOS
    stopped: bool        # chose EOS (else the budget ran out)
    raw_codes: Tensor    # [S-1, G] every frame the loop completed (after a stop: group 0 = EOS, junk codes)
    logits0: Tensor      # [S, V] raw group-0 logits of every choice
    hidden: Tensor       # [S, H] the talker state each choice was made from
    rows: Tensor         # [S-1, H] the talker row fed after each completed frame
    cp_logits: Tensor    # [S-1, G-1, V'] raw code-predictor logits
    group0: Tensor       # [S] int64 the group-0 ids chosen (EOS forced after a stop)
    logprobs: Tensor     # [S, G] group 0 of choice s, then groups 1..G-1 of frame s (0 where not completed)


def pad_left(prompts: list[Tensor]) -> tuple[Tensor, Tensor]:
    """Rows [T_i, H] -> zero-padded on the left [B, T, H] and the mask [B, T] int64 (0 on the padding)."""
    t_max = max(int(p.shape[0]) for p in prompts)
    rows = torch.zeros(len(prompts), t_max, prompts[0].shape[-1], dtype=prompts[0].dtype, device=prompts[0].device)
    mask = torch.zeros(len(prompts), t_max, dtype=torch.long, device=prompts[0].device)
    for i, p in enumerate(prompts):
        rows[i, t_max - p.shape[0]:] = p
        mask[i, t_max - p.shape[0]:] = 1
    return rows, mask


def pad_trailing(trailing: list[Tensor], pad_row: Tensor) -> Tensor:
    """Trailing text rows [Tt_i, H] -> [B, Tt, H] padded with P(tts_pad) on the right."""
    width = max(int(t.shape[0]) for t in trailing)
    out = pad_row.expand(len(trailing), width, pad_row.shape[-1]).clone()
    for i, t in enumerate(trailing):
        out[i, : t.shape[0]] = t
    return out


@torch.no_grad()
def generate(model: Qwen3TTS, rows: Tensor, trailing: Tensor, *, max_new_tokens: int, min_new_tokens: int = 2,
             sampling: Qwen3TTSSampling | None = None, seed: int = 0) -> Tensor:
    """One prompt (rows [T, H], trailing text [Tt, H]) -> codes [F, G]."""
    out = generate_batch(model, [rows], [trailing], [sampling or Qwen3TTSSampling()], [seed],
                         max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens)
    return out[0].codes


@torch.no_grad()
def generate_batch(model: Qwen3TTS, prompts: list[Tensor], trailing: list[Tensor], settings: list[Qwen3TTSSampling],
                   seeds: list[int], *, max_new_tokens: int, min_new_tokens: int = 2) -> list[Qwen3Generation]:
    """Several prompts at once (left-padded as the reference batches them); each row equals its own run.
    min_new_tokens: EOS is masked at choices 0 .. min_new_tokens-1 (>= max_new_tokens: never stops)."""
    if max_new_tokens < 1 or min_new_tokens < 0:
        raise ValueError(f"need max_new_tokens >= 1 and min_new_tokens >= 0, got {max_new_tokens}, {min_new_tokens}")
    if not len(prompts) == len(trailing) == len(settings) == len(seeds) >= 1:
        raise ValueError("prompts, trailing, settings and seeds must be equally long and not empty")
    dev, g = model.device, model.num_code_groups
    b = len(prompts)
    x, mask = pad_left([p.to(dev, model.dtype) for p in prompts])  # [B, T, H], [B, T]
    text = pad_trailing([t.to(dev, model.dtype) for t in trailing], model.special_text_rows()[2])  # [B, Tt, H]
    pad_row = model.special_text_rows()[2].expand(b, -1)
    t_max = x.shape[1]
    valid = mask.bool()
    positions = (mask.cumsum(1) - 1).clamp(min=0)  # [B, T]
    lengths = mask.sum(1)  # [B]
    cache = model.allocate_kv(b, int(lengths.max()) + max_new_tokens)
    slots = torch.arange(b, device=dev)
    last = torch.full((b,), t_max - 1, dtype=torch.long, device=dev)
    hidden, logits = model.prefill(x, cache, slots, positions, valid, last, int(lengths.max()))

    s = Qwen3TTSSamplingTensors.build(settings, seeds, dev)
    v = model.cfg.talker.vocab_size
    seen = torch.zeros(b, v, dtype=torch.bool, device=dev)
    finished = torch.zeros(b, dtype=torch.bool, device=dev)
    eos = model.cfg.codec.eos
    rec: dict[str, list[Tensor]] = {k: [] for k in ("logits0", "hidden", "group0", "lp0", "codes", "rows", "cp", "cplp")}
    for step in range(max_new_tokens):
        frame = torch.full((b,), step, dtype=torch.long, device=dev)
        if step > 0:  # complete frame step-1 and feed it
            prev = rec["group0"][-1]
            tt = text[:, step - 1] if step - 1 < text.shape[1] else pad_row
            out = model.frame_step(hidden, prev, tt, s, frame - 1, cache, slots, lengths + step - 1,
                                   context_len=int(lengths.max()) + step)
            hidden, logits = out.hidden, out.logits
            rec["codes"].append(out.frame.codes)
            rec["rows"].append(out.row)
            assert out.frame.logits is not None  # asked for (the default)
            rec["cp"].append(out.frame.logits)
            rec["cplp"].append(out.frame.logprobs)
        allow = torch.full((b,), step >= min_new_tokens, dtype=torch.bool, device=dev)
        ids, lp = model.choose(logits, s, frame, seen=seen, allow_eos=allow)
        ids = torch.where(finished, torch.full_like(ids, eos), ids)  # a stopped row keeps feeding EOS
        rec["logits0"].append(logits)
        rec["hidden"].append(hidden)
        rec["group0"].append(ids)
        rec["lp0"].append(lp)
        seen.scatter_(1, ids[:, None], True)
        finished = finished | (ids == eos)
        if bool(finished.all()):
            break
    return [_collect(rec, i, eos, g) for i in range(b)]


def _collect(rec: dict[str, list[Tensor]], i: int, eos: int, groups: int) -> Qwen3Generation:
    group0 = torch.stack([x[i] for x in rec["group0"]])  # [S]
    s = group0.shape[0]
    stops = (group0 == eos).nonzero()
    frames = int(stops[0, 0]) if len(stops) else s - 1
    raw = torch.stack([x[i] for x in rec["codes"]]) if rec["codes"] else torch.zeros(0, groups, dtype=torch.long)
    lps = torch.zeros(s, groups)
    lps[:, 0] = torch.stack([x[i] for x in rec["lp0"]]).float().cpu()
    if rec["cplp"]:
        lps[: s - 1, 1:] = torch.stack([x[i] for x in rec["cplp"]]).float().cpu()

    def stack(key: str) -> Tensor:
        return torch.stack([x[i] for x in rec[key]]) if rec[key] else torch.zeros(0)

    return Qwen3Generation(codes=raw[:frames], stopped=bool(len(stops)), raw_codes=raw, logits0=stack("logits0"),
                           hidden=stack("hidden"), rows=stack("rows"), cp_logits=stack("cp"), group0=group0,
                           logprobs=lps)
