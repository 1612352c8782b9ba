"""MOSS-TTS-Local's loop names: the keys of its loop graph, its plans' `loop`, its states in a record.

Must not know: anything else (plain names, hashed by identity).
"""

from __future__ import annotations

from v2.contracts import Kind


class LoopKind(Kind):
    AR_DECODE = "ar_decode"
    VOCODER = "vocoder"
    ENCODE = "encode"
