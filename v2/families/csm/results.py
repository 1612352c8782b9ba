"""Building what a finished CSM request hands back: the `SpeechResult`, and under ROLLOUT its `Trajectory`.

Owns: the audio joined from the chunks made (24 kHz mono), the codes [F, N] the reference decodes to audio
(every frame made, less a final stop frame whose N codes are all `codebook_eos`: the reference's audio
cut), the one segment, the metrics, and the trajectory record: the prompt rows [T, 1 + N] (prepare.py's
layout), every frame made [F, N] with the stop frame included (it is a decision too: the recompute scores
it), per frame N logprobs (codebook 0 under the backbone's distribution, codebooks 1..N-1 under the depth
decoder's), `stop_decisions` (True at a stop frame), no separate stop logprob (the stop is a frame).
Must not know: slots, scheduling, threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from v2.contracts import ExecutionProfile, FinishReason
from v2.families.csm.backbone import CsmResult, decoded
from v2.rl.trajectory import Trajectory
from v2.kit.chunks import ChunkResult
from v2.runtime.handles import SpeechResult, SpeechSegment
from v2.kit.results import joined_audio, request_metrics, timings


def spoken(frames: list[tuple[int, ...]], eos: int) -> list[tuple[int, ...]]:
    """The frames the reference decodes: all but a final all-`codebook_eos` frame (only a stop frame can be)."""
    return frames[:-1] if frames and not decoded(frames[-1], eos) else frames


def build_result(req: Any, backbone: CsmResult | None, codec: ChunkResult | None, reason: FinishReason, now: float,
                 *, sample_rate: int, width: int, eos: int, family: str, text: str) -> SpeechResult:
    """`text`: what the request spoke (its one segment's span)."""
    audio = joined_audio(codec.chunks if codec else [], 1)
    frames = list(backbone.codes) if backbone else []
    codes = np.array(spoken(frames, eos), dtype=np.int64).reshape(-1, width)
    prompt_rows = 0 if req.rows is None else int(req.rows.shape[0])
    segments = (SpeechSegment(0, len(text), 0, len(codes), backbone.finish.value, prompt_rows),) if backbone else ()
    metrics = request_metrics(req, prompt_rows, len(codes), audio.shape[1] / sample_rate, now)
    trajectory = None
    if req.request.profile is ExecutionProfile.ROLLOUT:
        made = np.array(frames, dtype=np.int64).reshape(-1, width)
        logprobs = np.array(backbone.logprobs if backbone else [], dtype=np.float32).reshape(-1, width)
        stops = np.zeros(len(made), dtype=bool)
        if backbone is not None and backbone.finish is FinishReason.STOP and len(made):
            stops[-1] = True
        trajectory = Trajectory(
            family=family, request_id=req.id, group_id=req.group_id, sample_id=req.sample_id, seed=req.request.seed,
            weight_version=req.version, prompt_rows=req.rows.numpy(), codes=made, stop_decisions=stops,
            logprobs=logprobs, stop_logprob=None, sampling=req.work.sampling, min_frames=0,
            finish_reason=reason.value,
            timings=timings(metrics),
            audio=audio if req.request.decode_audio else None)
    return SpeechResult(audio, sample_rate, codes, reason.value, metrics, trajectory, req.error, segments)
