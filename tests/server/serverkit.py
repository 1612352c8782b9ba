"""What the server tests share: one tiny-card runtime per process, a real uvicorn server on a free loopback
port in a thread, the in-process reference for a request, and decoding any response format."""

from __future__ import annotations

import functools
import io
import time
from typing import Any

import av
import numpy as np

from v2.runtime import Runtime
from v2.server import ServerConfig, create_app
from v2.server.audio import to_s16
from v2.server.serve import ThreadedServer

CARD = "moss_tts_local_tiny"
TEXT = "The quiet river runs past old stone houses."


@functools.lru_cache(maxsize=None)
def shared_runtime() -> Runtime:
    """The tiny card (random weights, fast on a CPU), loaded once for every server test in the process."""
    return Runtime.from_card(CARD)


class LiveServer(ThreadedServer):
    """A real uvicorn server for the app over `runtime`, on 127.0.0.1 on a free port, in a thread."""

    def __init__(self, runtime: Any, config: ServerConfig | None = None, **options: Any) -> None:
        self.app = create_app(runtime, config or ServerConfig.for_card(CARD, **options))
        super().__init__(self.app)

    @property
    def state(self) -> Any:
        return self.app.state.server


def in_process(runtime: Runtime, **request: Any) -> Any:
    """The runtime's own result for a request (the reference every HTTP answer is held to)."""
    return runtime.submit(request).result(timeout=120)


def s16(audio: np.ndarray) -> np.ndarray:
    """float [channels, n] -> int16 [n, channels], the rounding the server uses."""
    return to_s16(np.asarray(audio).T)


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """Any container the server writes -> float [channels, n] and the rate, through FFmpeg (PyAV)."""
    parts = []
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        rate, channels = stream.rate, stream.channels
        for frame in container.decode(stream):
            a = frame.to_ndarray()
            if not frame.format.is_planar:  # interleaved [1, n * channels]
                a = a.reshape(-1, channels).T
            parts.append(a / 32768.0 if a.dtype == np.int16 else a.astype(np.float64))
    return (np.concatenate(parts, axis=1) if parts else np.zeros((channels, 0))), rate


def wait_idle(runtime: Runtime, timeout: float = 10.0) -> dict[str, Any]:
    """Wait until the runtime holds no request and no slot; its stats then."""
    deadline = time.time() + timeout
    while True:
        s = runtime.stats()
        if s["running"] == s["waiting"] == s["kv_slots_in_use"] == s["codec_slots_in_use"] == 0:
            return s
        assert time.time() < deadline, f"the runtime is not idle: {s}"
        time.sleep(0.01)
