"""The codec executor: the kit's streaming chunk executor (v2/kit/chunk_executor.py) over the 12 Hz
decoder.

Owns: what the decoder gives it: its per-slot streaming state (`Qwen3CodecState`), the codes frame-major
[bucket, frames, G], 24 kHz mono audio rows of `hop` samples a frame, the step graphs' name.
Must not know: requests, loops' state, scheduling policy, threads.
"""

from __future__ import annotations

from v2.models.qwen3_codec.decoder import Qwen3CodecDecoder
from v2.kit.chunk_executor import ChunkExecutor

class CodecExecutor(ChunkExecutor):
    def __init__(self, codec: Qwen3CodecDecoder, *, num_slots: int, batch_buckets: list[int],
                 frame_buckets: list[int], graphs: bool = True) -> None:
        super().__init__(codec, "qwen3_audio_chunk", width=codec.cfg.groups, hop=codec.hop, num_slots=num_slots,
                         batch_buckets=batch_buckets, frame_buckets=frame_buckets, graphs=graphs)
