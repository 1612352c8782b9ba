"""The plugin family's bench module (what `python -m v2.bench` finds through the registry)."""

from v2.families.moss_tts_local.bench import overhead, request, runtime, sequential

__all__ = ["overhead", "request", "runtime", "sequential"]
