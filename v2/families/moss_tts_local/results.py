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
from v2.runtime.handles import SpeechResult
from v2.kit.results import joined_audio, request_metrics, segment_spans, timings


def build_result(req: Any, ar: ARResult | None, voc: VocoderResult | None, reason: FinishReason, now: float, *,
                 channels: int, sample_rate: int, groups: int, family: str, decoded: bool = True) -> SpeechResult:
    """`req` is the engine's record of a request; `ar` / `voc` its loops' `finalize()` (None if it never
    started); `groups`: codes per frame; `family`: the family's name, recorded in the trajectory; `decoded`:
    the card declares the vocoder loop (else a trajectory carries no audio, as with decode_audio false)."""
    audio = joined_audio(voc.chunks if voc else [], channels)
    codes = np.array(ar.codes if ar else [], dtype=np.int64).reshape(-1, groups)
    segments = segment_spans(req.work.segments or (), ar.segments if ar else [], len(req.request.text or ""))
    rows = 0 if req.rows is None else int(req.rows.shape[0])  # ended before its prompt: none
    prompt_rows = sum(s.prompt_rows for s in segments) if segments else rows
    metrics = request_metrics(req, prompt_rows, len(codes), audio.shape[1] / sample_rate, now)
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
            timings=timings(metrics),
            audio=audio if decoded and req.request.decode_audio else None)
    return SpeechResult(audio, sample_rate, codes, reason.value, metrics, trajectory, req.error, segments)
