"""The end of a request's way out: its result built by its family and handed to its handle, off the engine thread.

Owns: `publish` (the family's assembly of the result; a non-streaming request's audio as one chunk first; the
handle finished whatever fails, as an error of that request alone) and `error_result` (the result of a request
whose family could not assemble one). Runs on the results thread (`Requests.finish` posts it there).
Must not know: the queues, slots, KV or the engine's step (lifecycle.py, engine.py), loop logic, the caller's API.
"""

from __future__ import annotations

from typing import Any, Hashable, Mapping

import numpy as np

from v2.contracts import AudioChunk, FinishReason
from v2.runtime.family import EngineFamily
from v2.runtime.results import Metrics, SpeechResult
from v2.runtime.records import RequestRecord


def publish(family: EngineFamily, req: RequestRecord, outputs: Mapping[Hashable, Any] | None, reason: FinishReason,
            now: float) -> None:
    """Build the result (its family's assembly) and end the request's handle with it; a non-streaming
    request gets its audio as one chunk first. Runs off the engine thread (joining the audio is a copy no
    step need wait for). Whatever fails here (the assembly, its error form, the delivery) still ends this
    request, as an error, and no other: the handle always finishes."""
    try:
        result = family.result(req, outputs or {}, reason, now)
    except Exception as e:
        req.error = f"building the result failed: {type(e).__name__}: {e}"
        try:
            result = family.result(req, {}, FinishReason.ERROR, now)
        except Exception:
            result = error_result(family, req, now)
    try:
        if not req.request.stream and result.audio.shape[1]:
            req.handle.deliver([AudioChunk(0, result.audio, result.sample_rate, len(result.codes), True)])
    except Exception as e:
        req.error = f"delivering the result failed: {type(e).__name__}: {e}"
        result = error_result(family, req, now)
    req.handle.finish(result)


def error_result(family: EngineFamily, req: RequestRecord, now: float) -> SpeechResult:
    """The result of a request whose family could not assemble one: no audio, no codes, its error."""
    return SpeechResult(
        audio=np.zeros((family.channels, 0), np.float32), sample_rate=family.sample_rate,
        codes=np.zeros((0, family.code_width), np.int64), finish_reason=FinishReason.ERROR.value,
        metrics=Metrics(prompt_rows=0, frames=0, audio_seconds=0.0, ttfa_s=None, total_s=now - req.submitted, queue_s=0.0),
        error=req.error or "building the result failed")
