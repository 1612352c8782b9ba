"""`POST /dev/captioned_speech`: Kokoro-FastAPI's captioned speech path, as an alias of `POST /v1/audio/speech`
with word timestamps, for the clients written against it.

Owns: what its body is (the speech body's fields and Kokoro's `return_timestamps`, true unless false; `stream`
taken as a boolean and answered whole whatever it says, since the answer is one JSON object followed by a
newline, which a client reading Kokoro's streamed JSON lines reads as well; `stream_format` other than `audio`
refused naming it) and how it becomes a speech body (`timestamps: "word"` unless `return_timestamps` is false).
The answer is speech.py's: `{"audio": <base64>, "audio_format": <content type>, "timestamps": [{"word",
"start_time", "end_time"}]}` (null timestamps when not asked).
Must not know: FastAPI, the runtime, the engine, any family.
"""

from __future__ import annotations

from typing import Any

from v2.params import SpeechParams
from v2.server.errors import ApiError

PATH = "/dev/captioned_speech"
KNOWN = (*SpeechParams.model_fields, "return_timestamps")


def speech_body(raw: dict[str, Any]) -> dict[str, Any]:
    """The speech body a captioned request is: `return_timestamps` (true unless false) as `timestamps: "word"`,
    `stream` checked and dropped (the answer is whole), `stream_format` only `audio`."""
    body = dict(raw)
    wanted = body.pop("return_timestamps", True)
    if not isinstance(wanted, bool):
        raise ApiError(400, "return_timestamps: must be true or false", param="return_timestamps",
                       code="invalid_value")
    stream = body.pop("stream", None)
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, "stream: must be true or false (the answer is one JSON object either way)",
                       param="stream", code="invalid_value")
    fmt = body.pop("stream_format", None)
    if fmt not in (None, "audio"):
        raise ApiError(400, "stream_format: this path answers one JSON object (for SSE events of the words, ask "
                       "POST /v1/audio/speech with timestamps \"word\")", param="stream_format", code="invalid_value")
    if wanted and body.get("timestamps") is None:
        body["timestamps"] = "word"
    elif not wanted and body.get("timestamps") is not None:
        raise ApiError(400, "timestamps: return_timestamps is false", param="timestamps", code="invalid_value")
    body["stream"] = False
    return body
