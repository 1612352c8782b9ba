"""Building what a finished Qwen3-TTS request hands back: the `SpeechResult`, and under ROLLOUT its trajectory.

Owns: the audio joined from the chunks made (24 kHz mono), the codes [F, G], the segments (a long text's
spans and frame ranges), the metrics, and the trajectory
record (prompt rows [T, 2 + G], codes, per frame G logprobs: group 0's choice, whose distribution includes
the stop id, then groups 1..G-1; the stop choice's logprob when it stopped; the trailing text ids the frames
were fed and a clone's x-vector: what `recompute.recompute` needs besides, the fields `TalkerTrajectory`
adds to `v2.rl.Trajectory`).
Must not know: slots, scheduling, threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from v2.contracts import ExecutionProfile, FinishReason
from v2.families.qwen3_tts.talker import TalkerResult
from v2.rl.trajectory import Trajectory
from v2.kit.chunks import ChunkResult
from v2.runtime.handles import SpeechResult, SpeechSegment
from v2.kit.results import joined_audio, request_metrics, segment_spans, timings


@dataclass(frozen=True)
class TalkerTrajectory(Trajectory):
    """A Qwen3-TTS trajectory: the common record plus what its recompute needs besides."""

    trailing: np.ndarray | None = None        # int64 [Tt]: the trailing text ids fed with frames 0, 1, ...
    speaker_vector: np.ndarray | None = None  # float [H] (the model's dtype): a voice clone's x-vector, or None


def build_result(req: Any, talker: TalkerResult | None, codec: ChunkResult | None, reason: FinishReason, now: float,
                 *, sample_rate: int, groups: int, family: str, decoded: bool = True) -> SpeechResult:
    """`decoded`: the card declares the codec loop (else a trajectory carries no audio, as with decode_audio false)."""
    audio = joined_audio(codec.chunks if codec else [], 1)
    codes = np.array(talker.codes if talker else [], dtype=np.int64).reshape(-1, groups)
    if getattr(req.work, "segments", ()):  # a long text: its segments, each with its own prompt
        segments = segment_spans(req.work.segments, talker.segments if talker else [], len(req.request.text or ""))
        prompt_rows = sum(s.prompt_rows for s in segments) if segments else int(req.rows.shape[0])
    else:  # one prompt (an open request's holds all the text it was fed)
        prompt_rows = 0 if req.rows is None else int(req.rows.shape[0])  # ended before its prompt: none
        text = getattr(req.work, "text", None) or req.request.text or ""
        segments = (SpeechSegment(0, len(text), 0, len(codes), (talker.finish if talker else reason).value,
                                  prompt_rows),) if talker else ()
    metrics = request_metrics(req, prompt_rows, len(codes), audio.shape[1] / sample_rate, now)
    trajectory = None
    if req.request.profile is ExecutionProfile.ROLLOUT:
        logprobs = np.array(talker.logprobs if talker else [], dtype=np.float32).reshape(-1, groups)
        stopped = talker is not None and talker.finish is FinishReason.STOP and talker.stop_logprob is not None
        decisions = np.zeros(len(codes) + int(stopped), dtype=bool)
        if stopped:
            decisions[-1] = True
        trajectory = TalkerTrajectory(
            family=family, request_id=req.id, group_id=req.group_id, sample_id=req.sample_id, seed=req.request.seed,
            weight_version=req.version, prompt_rows=req.rows.numpy(), codes=codes, stop_decisions=decisions,
            logprobs=logprobs, stop_logprob=talker.stop_logprob if stopped and talker else None,
            sampling=req.work.sampling, min_frames=req.work.floor, finish_reason=reason.value,
            timings=timings(metrics),
            audio=audio if decoded and req.request.decode_audio else None,
            trailing=np.array(talker.trailing if talker else (), dtype=np.int64),
            speaker_vector=None if req.work.xvector is None else np.asarray(req.work.xvector))
    return SpeechResult(audio, sample_rate, codes, reason.value, metrics, trajectory, req.error, segments)
