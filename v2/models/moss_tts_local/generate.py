"""The simple reference generation loop: prompts in, codes out, eager, one slot per prompt.

Owns: `generate_batch`, the plain loop (prefill every prompt into its own KV slot, then one frame
per step for all unfinished rows, finished rows aimed at the dummy slot) that the runtime's batched
path is tested against, `generate(model, rows, ...)` (one prompt through it, plain sampling arguments
allowed), and the resolution of user sampling arguments into `SamplingSettings`. It uses the model;
the model does not know this loop.
Must not know: requests, the scheduler, streaming, the codec.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from v2.models.moss_tts_local.model import MossTTSLocal
from v2.models.sampling import SamplingTensors
from v2.sampling_settings import HeadSampling, SamplingSettings, needs_full_sort


@dataclass
class Generation:
    """What one prompt produced; the per-frame extras are for checks against the reference."""

    codes: Tensor          # [F, 12] int64
    logprobs: Tensor       # [F', 13] float32, F' = F + 1 when the last decision was "stop"
    stopped: bool          # ended by the stop head (else by max_frames)
    hidden: Tensor         # [F', H] backbone state each frame was decoded from
    stop_logits: Tensor    # [F', 2]
    code_logits: Tensor    # [F', 12, V] raw, before any penalty


def resolve_settings(sampling: SamplingSettings | None, temperature: float | None, top_k: int | None,
                     top_p: float | None, repetition_penalty: float) -> SamplingSettings:
    """`sampling` (else the release defaults with `repetition_penalty`); a single given
    temperature/top_k/top_p then overrides that value on both heads."""
    base = sampling or SamplingSettings(repetition_penalty=repetition_penalty)

    def override(head: HeadSampling) -> HeadSampling:
        return HeadSampling(head.temperature if temperature is None else temperature,
                            head.top_k if top_k is None else top_k,
                            head.top_p if top_p is None else top_p)

    return SamplingSettings(override(base.stop), override(base.audio), base.repetition_penalty)


@torch.no_grad()
def generate(model: MossTTSLocal, rows: Tensor, *, max_frames: int, min_frames: int = 0,
             temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
             repetition_penalty: float = 1.0, seed: int = 0, sampling: SamplingSettings | None = None) -> Tensor:
    """Generate frames for one prompt rows [T, 13] -> codes [F, 12] (eager, with KV cache).

    A single temperature/top_k/top_p overrides both heads; otherwise `sampling` (or the release
    defaults) applies. The stop decision is ignored before `min_frames` frames.
    """
    settings = resolve_settings(sampling, temperature, top_k, top_p, repetition_penalty)
    out = generate_batch(model, [rows], [settings], [seed], max_frames=max_frames, min_frames=min_frames)
    return out[0].codes


@torch.no_grad()
def generate_batch(model: MossTTSLocal, prompts: list[Tensor], settings: list[SamplingSettings],
                   seeds: list[int], *, max_frames: int, min_frames: int = 0) -> list[Generation]:
    """Generate for several prompts [T_i, 13] at once; each row equals its own batch-1 run."""
    if max_frames < 1 or min_frames < 0:
        raise ValueError(f"need max_frames >= 1 and min_frames >= 0, got {max_frames}, {min_frames}")
    dev = model.device
    b = len(prompts)
    lengths = [int(p.shape[0]) for p in prompts]
    t_max = max(lengths)
    cache = model.allocate_kv(b, t_max + max_frames)
    slots = torch.arange(b, device=dev)

    rows = torch.full((b, t_max, model.cfg.row_width), model.cfg.audio_pad_code, dtype=torch.long, device=dev)
    rows[..., 0] = model.cfg.ids.pad
    for i, p in enumerate(prompts):
        rows[i, : lengths[i]] = p.to(dev)
    valid = torch.arange(t_max, device=dev)[None] < torch.tensor(lengths, device=dev)[:, None]  # [B, T]
    positions = torch.arange(t_max, device=dev).expand(b, t_max)
    out = model.transformer.forward_cached(model.embed_rows(rows), cache, slots, positions, valid, t_max)
    hidden = out[torch.arange(b, device=dev), torch.tensor(lengths, device=dev) - 1]  # [B, H]

    sampling = SamplingTensors.build(settings, seeds, dev)
    presence = torch.zeros(b, model.cfg.n_vq, model.cfg.codebook_size, dtype=torch.bool, device=dev)
    active = torch.ones(b, dtype=torch.bool, device=dev)
    pos = torch.tensor(lengths, device=dev)
    record: list[list[tuple[Tensor, ...]]] = [[] for _ in range(b)]
    stopped = [False] * b
    for step in range(max_frames):
        steps = torch.full((b,), step, dtype=torch.long, device=dev)
        allow = torch.full((b,), step >= min_frames, dtype=torch.bool, device=dev)
        frame = model.decode_frame(hidden, sampling, steps, presence=presence, allow_stop=allow,
                                   full_sort=any(map(needs_full_sort, settings)), return_logits=True)
        was_active, stop = active.tolist(), frame.stop.tolist()  # one device-to-host read per step
        stop_logits, code_logits = frame.stop_logits, frame.code_logits
        assert stop_logits is not None and code_logits is not None  # return_logits=True sets both
        for i in range(b):
            if was_active[i]:
                record[i].append((frame.codes[i], frame.logprobs[i], hidden[i], stop_logits[i], code_logits[i]))
                stopped[i] = stopped[i] or stop[i]
        active = active & ~frame.stop
        if not bool(active.any()) or step + 1 == max_frames:
            break
        presence.scatter_(2, frame.codes[:, :, None], True)
        hidden = model.transformer.forward_cached(frame.next_embed[:, None], cache, slots, pos[:, None],
                                                  active[:, None], t_max + step + 1)[:, 0]
        pos = pos + 1
    return [_collect(rec, stop, model) for rec, stop in zip(record, stopped)]


def _collect(rec: list[tuple[Tensor, ...]], stopped: bool, model: MossTTSLocal) -> Generation:
    codes, logprobs, hidden, stop_logits, code_logits = (torch.stack(x) for x in zip(*rec))
    kept = codes[:-1] if stopped else codes
    return Generation(codes=kept.reshape(-1, model.cfg.n_vq), logprobs=logprobs, stopped=stopped,
                      hidden=hidden, stop_logits=stop_logits, code_logits=code_logits)
