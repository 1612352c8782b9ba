"""The codec executor: the kit's streaming chunk executor (v2/kit/chunk_executor.py) over Mimi.

Owns: what Mimi gives it: its per-slot streaming state (`MimiState`), the codes frame-major [bucket, frames,
N], 24 kHz mono audio rows of `hop` samples a frame, the step graphs' name; and the model's spare ids
(codebook_size .. vocab - 1: 2048..2050 in the release, which no logits processor of the reference masks),
which are not codec codes: they reach the decoder clamped to the last code, as vllm-omni's CSM does (the
result's codes keep the ids the model chose). The concatenated chunks of a stream equal the whole decode bit
for bit (the decoder's own promise: `MimiModel.decode` is `decode_chunk` from a fresh state).
Must not know: requests, loops' state, scheduling policy, threads.
"""

from __future__ import annotations

from typing import Any

from v2.kit.chunk_executor import ChunkExecutor

class CodecExecutor(ChunkExecutor):
    def __init__(self, codec: Any, *, num_slots: int, batch_buckets: list[int], frame_buckets: list[int],
                 graphs: bool = True) -> None:
        cfg = codec.cfg
        super().__init__(codec, "csm_audio_chunk", width=cfg.num_quantizers, hop=codec.hop, num_slots=num_slots,
                         batch_buckets=batch_buckets, frame_buckets=frame_buckets, graphs=graphs,
                         max_code=cfg.codebook_size - 1)  # spare ids are no codec codes
