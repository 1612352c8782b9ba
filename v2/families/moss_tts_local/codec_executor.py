"""The codec executor: the kit's streaming chunk executor (v2/kit/chunk_executor.py) over the vocoder.

Owns: what the vocoder gives it: each codec slot's streaming state, the codes width-major [bucket, 12,
frames], 48 kHz stereo audio rows [channels, frames * hop], the step graphs' name; and `chunk`, both halves
at once (benches, tests).
Must not know: requests, loops' state, scheduling policy, threads.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor

from v2.models.moss_codec import MossAudioDecoder
from v2.kit.chunk_executor import ChunkExecutor
from v2.kit.chunks import ChunkPlan

class CodecExecutor(ChunkExecutor):
    """The vocoder over slot-indexed streaming state; `num_slots` real slots and one dummy."""

    def __init__(self, codec: MossAudioDecoder, *, num_slots: int, batch_buckets: list[int], frame_buckets: list[int],
                 graphs: bool = True) -> None:
        super().__init__(codec, "audio_chunk", width=12, hop=codec.cfg.hop, frame_major=False, num_slots=num_slots,
                         batch_buckets=batch_buckets, frame_buckets=frame_buckets, graphs=graphs)

    def chunk(self, plans: Sequence[ChunkPlan], bucket: int, frames: int) -> Tensor:
        """Decode every plan's frames in one call, padded to `bucket` rows of `frames` frames
        -> audio [bucket, channels, frames * hop] on the device (row b's first n_b * hop samples are real)."""
        return self.launch(self.pack(plans, bucket, frames))
