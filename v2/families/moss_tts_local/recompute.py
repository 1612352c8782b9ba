"""The teacher-forced logprob recompute: a trajectory's logprobs again, differentiably, for a trainer.

Owns: `logprobs(model, prompt_rows, codes, sampling)`: the same processed distributions the sampler drew
from, recomputed in one differentiable pass (full causal backbone, teacher-forced local transformer, no
cache), with the stop decision's logprob on request; and `trajectory_logprobs(model, trajectory)`, the same
for a trajectory this family made (what `v2.rl.logprobs` calls for it).
Must not know: the engine, slots, scheduling, how trajectories are stored (trajectory.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models.moss_tts_local.model import MossTTSLocal
from v2.models.sampling import SamplingTensors, apply_repetition_penalty, processed
from v2.rl.trajectory import Trajectory
from v2.sampling_settings import SamplingSettings


def trajectory_logprobs(model: MossTTSLocal, trajectory: Trajectory) -> Tensor:
    """`logprobs` of a trajectory: its prompt, codes, sampling and min_frames, and its final stop decision
    when it stopped. [F (+1), 13]."""
    t = trajectory
    return logprobs(model, torch.from_numpy(t.prompt_rows), torch.from_numpy(t.codes), t.sampling,
                    min_frames=t.min_frames, final_stop=t.stop_logprob is not None)


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
