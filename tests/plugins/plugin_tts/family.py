"""The plugin family bound for the runtime (MOSS-TTS-Local's binding; it names itself from the card)."""

from v2.families.moss_tts_local.family import FAMILY

__all__ = ["FAMILY"]
