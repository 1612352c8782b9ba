"""RL rollouts: the trajectory record, its exports, and the teacher-forced logprob recompute for trainers.

Owns: `Trajectory` (what a ROLLOUT request produced, with every sampled token's logprob under the
distribution it was drawn from), `to_dict` / JSONL / npz writers, `collate` (right-padded tensors and masks
for a trainer), and `logprobs(model, prompt_rows, codes, sampling)`: the same processed distributions
recomputed in one differentiable pass (full causal backbone, teacher-forced local transformer, no cache).
Must not know: the engine, slots, scheduling (the runtime builds trajectories; this file defines them).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from torch import Tensor

from v2.models.moss_tts_local import MossTTSLocal
from v2.models.sampling import CHANNELS, SamplingSettings, SamplingTensors, apply_repetition_penalty, processed


@dataclass(frozen=True)
class Trajectory:
    """One sample. `logprobs[t, 0]` is the logprob of continuing at frame t, `logprobs[t, 1 + c]` of codebook
    c's code; `stop_logprob` is the logprob of the stop decision that ended it (finish_reason "stop")."""

    request_id: int
    group_id: int
    sample_id: int
    seed: int
    weight_version: int
    prompt_rows: np.ndarray        # int64 [T, 13]
    codes: np.ndarray              # int64 [F, 12]
    stop_decisions: np.ndarray     # bool [D]: the stop head's decision at each step (D = F, or F + 1 on stop)
    logprobs: np.ndarray           # float32 [F, 13]
    stop_logprob: float | None
    sampling: SamplingSettings
    min_frames: int
    finish_reason: str             # stop | length | abort | error
    timings: dict[str, float | None] = field(default_factory=dict)
    audio: np.ndarray | None = None  # float32 [channels, samples] unless decode_audio was off

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (arrays as nested lists; audio left out)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("audio", "sampling")}
        for key in ("prompt_rows", "codes", "stop_decisions", "logprobs"):
            out[key] = getattr(self, key).tolist()
        out["sampling"] = asdict(self.sampling)
        return out


def write_jsonl(trajectories: Iterable[Trajectory], path: str | Path) -> None:
    with Path(path).open("w") as f:
        for t in trajectories:
            f.write(json.dumps(t.to_dict()) + "\n")


def write_npz(trajectories: Iterable[Trajectory], path: str | Path) -> None:
    """The collated arrays plus per-sample ids, seeds and versions in one compressed npz."""
    items = list(trajectories)
    batch = collate(items)
    np.savez_compressed(path, **{k: v.numpy() for k, v in batch.items()},
                        request_id=np.array([t.request_id for t in items]), group_id=np.array([t.group_id for t in items]),
                        sample_id=np.array([t.sample_id for t in items]), seed=np.array([t.seed for t in items]),
                        weight_version=np.array([t.weight_version for t in items]))


def collate(trajectories: list[Trajectory]) -> dict[str, Tensor]:
    """Right-padded batch for a trainer.

    codes [B, L, 12] (0 where padded), logprobs [B, L, 13], mask [B, L, 13] (True where a logprob is real),
    lengths [B] frames, stopped [B]; L = the longest F (+ 1 when that sample stopped): the row after a
    stopped sample's last frame holds its stop decision in channel 0 only.
    """
    b = len(trajectories)
    rows = [len(t.codes) + (t.stop_logprob is not None) for t in trajectories]
    width = max(rows, default=0)
    codes = torch.zeros(b, width, 12, dtype=torch.long)
    logprobs = torch.zeros(b, width, CHANNELS, dtype=torch.float32)
    mask = torch.zeros(b, width, CHANNELS, dtype=torch.bool)
    for i, t in enumerate(trajectories):
        f = len(t.codes)
        codes[i, :f] = torch.from_numpy(t.codes)
        logprobs[i, :f] = torch.from_numpy(t.logprobs)
        mask[i, :f] = True
        if t.stop_logprob is not None:
            logprobs[i, f, 0] = t.stop_logprob
            mask[i, f, 0] = True
    return {"codes": codes, "logprobs": logprobs, "mask": mask,
            "lengths": torch.tensor([len(t.codes) for t in trajectories], dtype=torch.long),
            "stopped": torch.tensor([t.stop_logprob is not None for t in trajectories])}


def logprobs(model: MossTTSLocal, prompt_rows: Tensor, codes: Tensor, sampling: SamplingSettings, *,
             min_frames: int = 0, final_stop: bool = False) -> Tensor:
    """Teacher-forced logprobs of a trajectory: [F, 13] (+ one row when `final_stop`: the stop decision's
    logprob in channel 0, zeros elsewhere), under the same processed distributions the sampler used.

    Differentiable with respect to the model's parameters (turn `requires_grad` on to train): one causal
    backbone pass over prompt + frames, one teacher-forced local pass per frame, no cache.
    """
    dev = model.device
    codes = torch.as_tensor(codes, dtype=torch.long, device=dev).reshape(-1, model.cfg.n_vq)
    prompt_rows = torch.as_tensor(prompt_rows, dtype=torch.long, device=dev)
    f = codes.shape[0]
    steps = f + int(final_stop)  # decisions to score
    frame_rows = torch.cat([torch.full((f, 1), model.cfg.ids.audio_assistant_slot, device=dev), codes], dim=1)
    seq = torch.cat([prompt_rows, frame_rows[: steps - 1]])  # frame t is decoded from the state after row T-1+t
    was_training = model.training
    model.train()
    try:
        hidden = model.transformer(model.embed_rows(seq)[None])[0]  # [T + steps - 1, H]
        states = hidden[prompt_rows.shape[0] - 1:]  # [steps, H]
        teacher = torch.cat([codes, codes.new_zeros(steps - f, model.cfg.n_vq)])  # the stop row's codes are unused
        stop_logits, code_logits = model.frame_logits(states, teacher)  # [steps, 2], [steps, 12, V]
    finally:
        model.train(was_training)
    tensors = SamplingTensors.build([sampling] * steps, [0] * steps, dev)
    frame_idx = torch.arange(steps, device=dev)
    forced = frame_idx < min_frames
    stop_logits = torch.stack([stop_logits[:, 0], stop_logits[:, 1].masked_fill(forced, -torch.inf)], dim=1)
    z = processed(stop_logits, tensors.temperature[:, 0], tensors.top_k[:, 0], tensors.top_p[:, 0])
    decision = torch.zeros(steps, dtype=torch.long, device=dev)
    if final_stop:
        decision[-1] = 1
    columns = [torch.log_softmax(z, dim=-1).gather(1, decision[:, None])[:, 0]]
    # codes seen in earlier frames, per codebook: [steps, 12, V]
    onehot = torch.nn.functional.one_hot(teacher, model.cfg.codebook_size).bool()
    seen = (onehot.cumsum(0) - onehot.long()) > 0
    for c in range(model.cfg.n_vq):
        ch = 1 + c
        logits = apply_repetition_penalty(code_logits[:, c], seen[:, c], tensors.penalty[:, ch])
        z = processed(logits, tensors.temperature[:, ch], tensors.top_k[:, ch], tensors.top_p[:, ch])
        columns.append(torch.log_softmax(z, dim=-1).gather(1, teacher[:, c : c + 1])[:, 0])
    out = torch.stack(columns, dim=1)  # [steps, 13]
    if final_stop:
        out = torch.cat([out[:-1], torch.cat([out[-1:, :1], torch.zeros_like(out[-1:, 1:])], dim=1)])
    return out
