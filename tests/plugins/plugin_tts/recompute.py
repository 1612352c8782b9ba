"""The plugin family's RL recompute (what `v2.rl.logprobs` finds through the registry)."""

from v2.families.moss_tts_local.recompute import trajectory_logprobs

__all__ = ["trajectory_logprobs"]
