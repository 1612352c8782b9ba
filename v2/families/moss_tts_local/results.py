"""Building what a finished request hands back: the `SpeechResult`, and under ROLLOUT its `Trajectory`.

Owns: assembling audio from the chunks made, the codes [F, G], the segments (a long text's spans and
frame ranges), the metrics (TTFA, RTF, queueing), and the trajectory record (ids, seed, weight version,
prompt, codes, stop decisions, logprobs, timings). (The runtime publishes it: `Requests.publish`.)
Must not know: slots, scheduling, threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from v2.contracts import ExecutionProfile, FinishReason
from v2.families.moss_tts_local.ar_decode import ARResult
from v2.families.moss_tts_local.vocoder import VocoderResult
from v2.rl.trajectory import Trajectory
from v2.runtime.handles import Metrics, SpeechResult, SpeechSegment


def _segments(req: Any, ar: ARResult | None) -> tuple[SpeechSegment, ...]:
    """Each segment's text span and frame range (the frame ranges tile the codes)."""
    ended = ar.segments if ar else []
    planned = req.work.segments or ()
    out, frame = [], 0
    for i, (prompt_rows, frames, finish) in enumerate(ended):
        start, end = (planned[i].start, planned[i].end) if i < len(planned) else (0, len(req.request.text or ""))
        out.append(SpeechSegment(start, end, frame, frame + frames, finish.value, prompt_rows))
        frame += frames
    return tuple(out)


def build_result(req: Any, ar: ARResult | None, voc: VocoderResult | None, reason: FinishReason, now: float, *,
                 channels: int, sample_rate: int, groups: int, family: str, decoded: bool = True) -> SpeechResult:
    """`req` is the engine's record of a request; `ar` / `voc` its loops' `finalize()` (None if it never
    started); `groups`: codes per frame; `family`: the family's name, recorded in the trajectory; `decoded`:
    the card declares the vocoder loop (else a trajectory carries no audio, as with decode_audio false)."""
    chunks = voc.chunks if voc else []
    audio = np.concatenate([c.audio for c in chunks], axis=1) if chunks else np.zeros((channels, 0), np.float32)
    codes = np.array(ar.codes if ar else [], dtype=np.int64).reshape(-1, groups)
    segments = _segments(req, ar)
    metrics = Metrics(
        prompt_rows=sum(s.prompt_rows for s in segments) if segments else 0 if req.rows is None else int(req.rows.shape[0]),
        frames=len(codes), audio_seconds=audio.shape[1] / sample_rate,
        ttfa_s=None if req.first_audio is None else req.first_audio - req.submitted, total_s=now - req.submitted,
        queue_s=(req.admitted or now) - req.submitted)
    trajectory = None
    if req.request.profile is ExecutionProfile.ROLLOUT:
        decisions = np.array(ar.logprobs if ar else [], dtype=np.float32).reshape(-1, 1 + groups)
        stopped = ar is not None and ar.finish is FinishReason.STOP and len(decisions) > len(codes)
        trajectory = Trajectory(
            request_id=req.id, group_id=req.group_id, sample_id=req.sample_id, seed=req.request.seed,
            weight_version=req.version, prompt_rows=req.rows.numpy(), codes=codes,
            stop_decisions=np.arange(len(decisions)) == len(codes) if stopped else np.zeros(len(decisions), bool),
            logprobs=np.ascontiguousarray(decisions[: len(codes)]),
            stop_logprob=float(decisions[len(codes), 0]) if stopped else None, sampling=req.work.sampling,
            min_frames=req.request.min_frames, finish_reason=reason.value, family=family,
            timings={"queue_s": metrics.queue_s, "total_s": metrics.total_s, "ttfa_s": metrics.ttfa_s},
            audio=audio if decoded and req.request.decode_audio else None)
    return SpeechResult(audio, sample_rate, codes, reason.value, metrics, trajectory, req.error, segments)
