"""A Qwen3-Omni request's result: the reply's text (ids, decoded text, how it ended), the talker's codes, the audio,
and under the ROLLOUT profile its trajectory.

Owns: `OmniTrajectory` (the common `v2.rl.Trajectory` over the talker's frames: `codes` [F, 16], `logprobs`
[F, 16] (group 0, then the code predictor's 15), `stop_logprob`; plus the thinker's side: the prompt's rows,
`text_ids`, `text_logprobs` (each token's logprob under the distribution it was drawn from), the stop token's
(`text_stop_logprob`, when `<|im_end|>` ended it), the thinker's sampling; the talker's prompt rows and the audio
encoder's rows, which the recompute needs) and `build_result`.
Must not know: the engine, slots, scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from v2.contracts import ExecutionProfile, FinishReason
from v2.kit.chunks import ChunkResult
from v2.kit.results import joined_audio, request_metrics, timings
from v2.kit.sequence import ARResult
from v2.rl.trajectory import Trajectory
from v2.runtime.handles import SpeechResult


@dataclass(frozen=True)
class OmniTrajectory(Trajectory):
    text_ids: np.ndarray | None = None          # int64 [n]: the thinker's tokens (its stop token not included)
    text_logprobs: np.ndarray | None = None     # float32 [n]
    text_stop_logprob: float | None = None      # the `<|im_end|>` choice that ended the text, when it did
    thinker_sampling: tuple[float, int, float] = (0.0, 0, 1.0)  # temperature, top_k, top_p
    text_eos: int = 151645                      # the thinker's stop token (`<|im_end|>`)
    talker_rows: np.ndarray | None = None       # int64 [P, 3 + G]: the talker's prompt rows (None: text only)
    audio_rows: np.ndarray | None = None        # float [N, H]: the audio encoder's rows of the prompt's clips


def build_result(record: Any, think: ARResult | None, talk: ARResult | None, c2w: ChunkResult | None,
                 reason: FinishReason, now: float, *, sample_rate: int, groups: int, family: str,
                 decode: Any, eos: int) -> SpeechResult:
    """`decode`: ids -> text (None: no tokenizer); `eos`: the thinker's stop token."""
    work = record.work
    audio = joined_audio(c2w.chunks if c2w is not None else [], 1)
    codes = np.array(talk.codes if talk else [], dtype=np.int64).reshape(-1, groups)
    text_ids = tuple(c[0] for c in think.codes) if think is not None else ()
    finish = talk.finish if talk is not None else think.finish if think is not None else reason
    if reason in (FinishReason.ABORT, FinishReason.ERROR):
        finish = reason
    metrics = request_metrics(record, int(work.rows.shape[0]), len(codes), audio.shape[1] / sample_rate, now)
    trajectory = None
    if record.request.profile is ExecutionProfile.ROLLOUT:
        stopped = talk is not None and talk.finish is FinishReason.STOP and talk.stop_logprob is not None
        decisions = np.zeros(len(codes) + int(stopped), dtype=bool)
        if stopped:
            decisions[-1] = True
        s = work.thinker_sampling
        trajectory = OmniTrajectory(
            family=family, request_id=record.id, group_id=record.group_id, sample_id=record.sample_id,
            seed=record.request.seed, weight_version=record.version, prompt_rows=work.rows.numpy(), codes=codes,
            stop_decisions=decisions,
            logprobs=np.array(talk.logprobs if talk else [], dtype=np.float32).reshape(-1, groups)[: len(codes)],
            stop_logprob=talk.stop_logprob if stopped and talk else None, sampling=work.talker_sampling,
            min_frames=0, finish_reason=finish.value, timings=timings(metrics),
            audio=audio if record.request.decode_audio else None,
            text_ids=np.array(text_ids, dtype=np.int64),
            text_logprobs=np.array([lp[0] for lp in think.logprobs] if think else [], dtype=np.float32),
            text_stop_logprob=think.stop_logprob if think is not None and think.finish is FinishReason.STOP else None,
            thinker_sampling=(s.temperature, s.top_k, s.top_p), text_eos=eos,
            talker_rows=None if talk is None or work.talker_prefix is None else _talker_rows(work, text_ids),
            audio_rows=None if work.audio_rows is None else work.audio_rows.float().numpy())
    return SpeechResult(audio, sample_rate, codes, finish.value, metrics, trajectory, record.error,
                        text=decode(list(text_ids)) if decode is not None else None, text_ids=text_ids,
                        text_finish_reason=think.finish.value if think is not None else reason.value)


def _talker_rows(work: Any, text_ids: tuple[int, ...]) -> np.ndarray:
    rows = work.talker_prefix.clone()
    if text_ids:
        rows[-1, 0] = text_ids[0]
    return np.asarray(rows.numpy())
