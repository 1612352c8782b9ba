"""The engine's record of each request: plain mutable data.

Owns: what the engine tracks per request between submit and result (the request, its prompt, resolved
settings, loop states, slots held, timestamps, group membership, weight version, its prompt's KV block
keys).
Must not know: tensors beyond the prompt rows it carries, scheduling, executors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from v2.long_text import TextSegment
from v2.families.moss_tts_local.ar_decode import ARState
from v2.families.moss_tts_local.encode import EncodeState
from v2.families.moss_tts_local.vocoder import VocoderState
from v2.runtime.groups import Group
from v2.sampling_settings import SamplingSettings
from v2.request import SpeechRequest
from v2.runtime.handles import SpeechHandle


@dataclass
class RequestRecord:
    id: int
    handle: SpeechHandle
    request: SpeechRequest
    rows: torch.Tensor
    sampling: SamplingSettings
    max_frames: int
    submitted: float
    ar: ARState | None = None
    voc: VocoderState | None = None
    admitted: float | None = None
    first_audio: float | None = None
    error: str | None = None
    ended: bool = False
    slots: dict[str, int] = field(default_factory=dict)  # pool name -> slot held
    group: Group | None = None
    group_id: int = 0
    sample_id: int = 0
    version: int = 0  # weights it runs under, fixed at admission
    enc: EncodeState | None = None  # reference recordings still to encode (it waits until they are)
    transcript: str | None = None   # continuation mode: the reference's transcript (the prompt is laid out again
                                    # with the real codes once they are encoded)
    kv_keys: list[bytes] | None = None  # chained keys of its prompt's full KV blocks (made once it is ready)
    segments: tuple[TextSegment, ...] = ()  # long text: its segments (`rows` is then the current segment's prompt)

    @property
    def ready(self) -> bool:
        """Its prompt is final: nothing left to encode."""
        return self.enc is None or self.enc.codes is not None
